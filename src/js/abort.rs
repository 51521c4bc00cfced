//! `AbortSignal` for `run()` and `acquire()`: the `signal` option, checked at the boundary, and a
//! future that completes when the signal aborts — what the core's `acquire_until` waits on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use js_sys::Reflect;
use wasm_bindgen::prelude::*;

use super::convert::{describe, get_prop, type_error};
use super::promises::{abort_watch, Event};

/// A caller's `AbortSignal` (anything with `aborted`, `reason` and `addEventListener`).
pub(crate) struct Abort {
    signal: JsValue,
}

/// Reads `options.signal`: `undefined` means none; anything that is not an `AbortSignal` is a
/// `TypeError`.
pub(crate) fn signal_option(options: &JsValue) -> Result<Option<Abort>, JsValue> {
    if !options.is_object() {
        return Ok(None);
    }
    let signal = get_prop!(options, "signal")?;
    if signal.is_undefined() {
        return Ok(None);
    }
    let listens = signal.is_object()
        && Reflect::get(&signal, &JsValue::from_str("addEventListener"))
            .is_ok_and(|f| f.is_function())
        && Reflect::get(&signal, &JsValue::from_str("aborted"))
            .is_ok_and(|a| a.as_bool().is_some());
    if !listens {
        return Err(not_a_signal(&signal));
    }
    Ok(Some(Abort { signal }))
}

/// The `TypeError` for an `options.signal` that is not an `AbortSignal`.
pub(crate) fn not_a_signal(value: &JsValue) -> JsValue {
    type_error(
        [
            "options.signal must be an AbortSignal, got ",
            &describe(value),
        ]
        .concat(),
    )
}

impl Abort {
    /// Whether the signal has already aborted.
    pub(crate) fn aborted(&self) -> bool {
        get_prop!(&self.signal, "aborted")
            .ok()
            .and_then(|a| a.as_bool())
            .unwrap_or(false)
    }

    /// What to reject with: `signal.reason`, or an `AbortError` when it has none.
    pub(crate) fn reason(&self) -> JsValue {
        match get_prop!(&self.signal, "reason") {
            Ok(reason) if !reason.is_undefined() => reason,
            _ => {
                let error = js_sys::Error::new("the operation was aborted");
                error.set_name("AbortError");
                error.into()
            }
        }
    }

    /// Completes when the signal aborts (the listener goes when the future is dropped, so a
    /// long-lived signal does not collect one listener per call).
    pub(crate) fn watch(&self) -> Event {
        abort_watch(&self.signal)
    }
}

/// Completes when `abort` (if any) aborts; never, without one.
pub(crate) fn cancellation(abort: Option<&Abort>) -> Result<Cancel, JsValue> {
    Ok(Cancel(abort.map(Abort::watch)))
}

/// The future [`cancellation`] returns.
pub(crate) struct Cancel(Option<Event>);

impl Future for Cancel {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Some(aborted) => Pin::new(aborted).poll(cx),
            None => Poll::Pending,
        }
    }
}
