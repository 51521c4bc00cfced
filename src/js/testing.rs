//! `checkLockStore`: the core's conformance properties, run against any JS store. The engine
//! behind `keel-lock/testing` (feature `testing`: the npm package builds it as a wasm of its own).

use js_sys::{Array, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::api::backend_for;
use super::convert::{object, type_error};
use super::lock::JsFuture;
use super::runtime::JsRuntime;
use crate::conformance::{check_all, ConformanceOptions, Verdict};

fn options(value: &JsValue) -> Result<ConformanceOptions, JsValue> {
    let mut o = ConformanceOptions::default();
    if value.is_undefined() || value.is_null() {
        return Ok(o);
    }
    if !value.is_object() {
        return Err(type_error("checkLockStore options must be an object"));
    }
    let get = |name: &str| Reflect::get(value, &JsValue::from_str(name));
    // `max` is an integer so the message formats no f64 (float formatting costs ~15 KB of wasm).
    let count = |name: &str, v: JsValue, max: u32| -> Result<Option<u64>, JsValue> {
        if v.is_undefined() {
            return Ok(None);
        }
        match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 && n <= f64::from(max) => {
                Ok(Some(n.ceil() as u64))
            }
            _ => Err(js_sys::RangeError::new(&format!(
                "checkLockStore option {name} must be a number from 0 to {max}"
            ))
            .into()),
        }
    };
    if let Some(p) = get("keyPrefix")?.as_string() {
        o.key_prefix = p;
    }
    if let Some(n) = count("shortTtlMs", get("shortTtlMs")?, 60_000)? {
        o.short_ttl_ms = n.max(1);
    }
    if let Some(n) = count("settleMs", get("settleMs")?, 60_000)? {
        o.settle_ms = n;
    }
    if let Some(n) = count("contenders", get("contenders")?, 10_000)? {
        o.contenders = n.max(2) as usize;
    }
    Ok(o)
}

/// Runs every conformance property against `store` and resolves
/// `[{ property, ok, applicable, message }]`, one entry per property: `ok: false` is a broken
/// property; `applicable: false` is a finding (e.g. a store without fences), not a failure.
#[wasm_bindgen(js_name = checkLockStore)]
pub fn check_lock_store(store: JsValue, opts: JsValue) -> Promise {
    let prepared = backend_for(store).and_then(|b| Ok((b, options(&opts)?)));
    // Boxed: shares the one `future_to_promise` instance with the `Lock` methods.
    let run: JsFuture = Box::pin(async move {
        let (backend, options) = prepared?;
        let results = Array::new();
        for (property, outcome) in check_all(&backend, &JsRuntime, &options).await {
            let (ok, applicable, message) = match outcome {
                Ok(Verdict::Holds) => (true, true, JsValue::NULL),
                Ok(Verdict::NotApplicable(why)) => (true, false, JsValue::from_str(&why)),
                Err(v) => (false, true, JsValue::from_str(&v.message)),
            };
            results.push(&object(&[
                ("property", JsValue::from_str(property)),
                ("ok", JsValue::from_bool(ok)),
                ("applicable", JsValue::from_bool(applicable)),
                ("message", message),
            ])?);
        }
        Ok(results.into())
    });
    future_to_promise(run)
}
