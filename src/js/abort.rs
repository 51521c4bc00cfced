//! `AbortSignal` for `run()` and `acquire()`: the `signal` option, checked at the boundary. JS
//! listens to it (`src/js/lock.js`, `src/js/over-store.js`); the core's `__kWithdraw` ends the
//! wait it cuts short.

use js_sys::Reflect;
use wasm_bindgen::prelude::*;

use super::convert::{describe, type_error};

/// Checks `options.signal`: `undefined` means none; anything that is not an `AbortSignal`
/// (something with `addEventListener` and a boolean `aborted`) is a `TypeError`.
pub(crate) fn check_signal(options: &JsValue) -> Result<(), JsValue> {
    if !options.is_object() {
        return Ok(());
    }
    let signal = get_prop!(options, "signal")?;
    if signal.is_undefined() {
        return Ok(());
    }
    let listens = signal.is_object()
        && Reflect::get(&signal, &JsValue::from_str("addEventListener"))
            .is_ok_and(|f| f.is_function())
        && Reflect::get(&signal, &JsValue::from_str("aborted"))
            .is_ok_and(|a| a.as_bool().is_some());
    match listens {
        true => Ok(()),
        false => Err(not_a_signal(&signal)),
    }
}

/// The `TypeError` for an `options.signal` that is not an `AbortSignal`.
fn not_a_signal(value: &JsValue) -> JsValue {
    type_error(
        [
            "options.signal must be an AbortSignal, got ",
            &describe(value),
        ]
        .concat(),
    )
}
