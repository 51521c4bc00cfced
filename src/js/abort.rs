//! `AbortSignal` for `run()` and `acquire()`: the `signal` option, checked at the boundary, and a
//! future that completes when the signal aborts — what the core's `acquire_until` waits on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::convert::{describe, type_error};

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
    let signal = Reflect::get(options, &JsValue::from_str("signal"))?;
    if signal.is_undefined() {
        return Ok(None);
    }
    let listens = signal.is_object()
        && Reflect::get(&signal, &JsValue::from_str("addEventListener"))
            .is_ok_and(|f| f.is_function())
        && Reflect::get(&signal, &JsValue::from_str("aborted"))
            .is_ok_and(|a| a.as_bool().is_some());
    if !listens {
        return Err(type_error(format!(
            "options.signal must be an AbortSignal, got {}",
            describe(&signal)
        )));
    }
    Ok(Some(Abort { signal }))
}

impl Abort {
    /// Whether the signal has already aborted.
    pub(crate) fn aborted(&self) -> bool {
        Reflect::get(&self.signal, &JsValue::from_str("aborted"))
            .ok()
            .and_then(|a| a.as_bool())
            .unwrap_or(false)
    }

    /// What to reject with: `signal.reason`, or an `AbortError` when it has none.
    pub(crate) fn reason(&self) -> JsValue {
        match Reflect::get(&self.signal, &JsValue::from_str("reason")) {
            Ok(reason) if !reason.is_undefined() => reason,
            _ => {
                let error = js_sys::Error::new("the operation was aborted");
                error.set_name("AbortError");
                error.into()
            }
        }
    }

    /// Completes when the signal aborts. The listener is removed when the future is dropped,
    /// so a long-lived signal does not collect one listener per call.
    pub(crate) fn watch(&self) -> Result<Aborted, JsValue> {
        let mut listener = JsValue::UNDEFINED;
        let promise = Promise::new(&mut |resolve, _| listener = resolve.into());
        let options = Object::new();
        Reflect::set(&options, &JsValue::from_str("once"), &JsValue::TRUE)?;
        self.call("addEventListener", &listener, &options)?;
        Ok(Aborted {
            signal: self.signal.clone(),
            listener,
            promise: JsFuture::from(promise),
        })
    }

    fn call(&self, method: &str, listener: &JsValue, options: &JsValue) -> Result<(), JsValue> {
        call(&self.signal, method, listener, options)
    }
}

fn call(
    signal: &JsValue,
    method: &str,
    listener: &JsValue,
    options: &JsValue,
) -> Result<(), JsValue> {
    let f: Function = Reflect::get(signal, &JsValue::from_str(method))?.dyn_into()?;
    f.call3(signal, &JsValue::from_str("abort"), listener, options)?;
    Ok(())
}

/// Completes when `abort` (if any) aborts; never, without one.
pub(crate) fn cancellation(abort: Option<&Abort>) -> Result<Cancel, JsValue> {
    Ok(match abort {
        Some(a) => Cancel(Some(a.watch()?)),
        None => Cancel(None),
    })
}

/// The future [`cancellation`] returns.
pub(crate) struct Cancel(Option<Aborted>);

impl Future for Cancel {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Some(aborted) => Pin::new(aborted).poll(cx),
            None => Poll::Pending,
        }
    }
}

/// The future [`Abort::watch`] returns.
pub(crate) struct Aborted {
    signal: JsValue,
    listener: JsValue,
    promise: JsFuture,
}

impl Future for Aborted {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.promise).poll(cx).map(drop)
    }
}

impl Drop for Aborted {
    fn drop(&mut self) {
        let _ = call(
            &self.signal,
            "removeEventListener",
            &self.listener,
            &JsValue::UNDEFINED,
        );
    }
}
