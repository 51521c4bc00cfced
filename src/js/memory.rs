//! `MemoryLockStore` for JS: the core's memory store behind a JS class. It is a complete
//! `LockStore` object in its own right (its methods, which `src/js/memory-store.js` defines
//! over [`memory_call`], answer plain values), and `setLockStore` recognises it and drives it
//! directly, without a JS call per store operation.

use alloc::rc::Rc;
use core::cell::RefCell;

use wasm_bindgen::prelude::*;

use super::convert::{grant_to_js, key, owner, required_ttl};
use super::runtime::JsRuntime;
use crate::error::Operation;
use crate::memory::MemoryLockStore;
use crate::share::SharedGrant;

per_thread! {
    /// Hand-off slot used by `setLockStore` to recognise a `MemoryLockStore` object without
    /// taking it away from JS (wasm-bindgen offers no borrow-from-JsValue for exported types).
    static ATTACHING: RefCell<Option<Rc<MemoryLockStore<JsRuntime>>>> = const { RefCell::new(None) };
}

/// The default store: per-isolate, in memory. It coordinates the callers that share this JS
/// isolate and nothing more. Expired rows are cleaned up as new keys arrive.
#[wasm_bindgen(js_name = MemoryLockStore)]
pub struct JsMemoryLockStore {
    inner: Rc<MemoryLockStore<JsRuntime>>,
}

impl Default for JsMemoryLockStore {
    fn default() -> Self {
        Self::new()
    }
}

#[wasm_bindgen(js_class = MemoryLockStore)]
impl JsMemoryLockStore {
    /// An empty store.
    #[wasm_bindgen(constructor)]
    pub fn new() -> JsMemoryLockStore {
        JsMemoryLockStore {
            inner: Rc::new(MemoryLockStore::new(JsRuntime)),
        }
    }

    /// Rows held right now, expired ones not yet swept included.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.inner.stored_rows()
    }

    /// Deletes expired rows now; answers how many went.
    #[wasm_bindgen(js_name = purgeExpired)]
    pub fn purge_expired(&self) -> usize {
        self.inner.purge_expired()
    }

    /// Internal: lets `setLockStore` pick up the Rust store behind this object.
    #[wasm_bindgen(js_name = __keelAttach, skip_typescript)]
    pub fn attach(&self) {
        ATTACHING.with(|slot| *slot.borrow_mut() = Some(self.inner.clone()));
    }
}

/// A `MemoryLockStore` method (`src/js/memory-store.js` puts them on the class's prototype),
/// `op` as `operations.rs` numbers them: `acquire(key, owner, ttlMs)` (0) answers `{ fence }` or
/// `false`; `release(key, owner)` (1), `extend(key, owner, ttlMs)` (2), `isLocked(key)` (3) and
/// `forceRelease(key)` (5) a boolean; `remainingTime(key)` (4) the ms left or `null`. One export
/// for all six: each of their own carried its copy of the argument checks.
#[wasm_bindgen(js_name = __kMemoryCall, skip_typescript)]
pub fn memory_call(
    store: &JsMemoryLockStore,
    op: u32,
    k: JsValue,
    o: JsValue,
    t: JsValue,
    weight: JsValue,
    limit: JsValue,
) -> Result<JsValue, JsValue> {
    let m = &store.inner;
    let op = super::convert::operation(op).ok_or_else(super::convert::bad_operation)?;
    let k = key(&k)?;
    Ok(match op {
        Operation::Acquire => {
            return grant_to_js(m.acquire_sync(&k, &owner(&o)?, required_ttl(&t)?))
        }
        Operation::Release => m.release_sync(&k, &owner(&o)?).into(),
        Operation::Extend => m.extend_sync(&k, &owner(&o)?, required_ttl(&t)?).into(),
        Operation::IsLocked => m.remaining_time_sync(&k).is_some().into(),
        Operation::RemainingTime => m
            .remaining_time_sync(&k)
            .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)),
        Operation::ForceRelease => m.force_release_sync(&k).into(),
        Operation::AcquireShared => {
            let (o, t) = (owner(&o)?, required_ttl(&t)?);
            let share = super::convert::share(&weight, &limit)?;
            match m.acquire_shared_sync(&k, &o, t, share) {
                SharedGrant::Granted(grant) => return grant_to_js(Some(grant)),
                // JS turns a number into `{ heldLimit }`.
                SharedGrant::LimitMismatch { held } => JsValue::from_f64(held.into()),
                _ => JsValue::FALSE,
            }
        }
        // Flat, for `inspect` in `src/js/memory-store.js` to build the answer from (the metadata
        // is kept in JS): each live hold's fence (0: none) and ms left.
        Operation::Inspect => {
            let out = js_sys::Array::new();
            m.each_live_hold(&k, |fence, left| {
                out.push(&JsValue::from_f64(fence.map_or(0.0, |f| f.get() as f64)));
                out.push(&JsValue::from_f64(left as f64));
            });
            out.into()
        }
        Operation::Metadata => return Err(super::convert::bad_operation()),
    })
}

/// The Rust store behind `value` if it is a plain `MemoryLockStore`. Anything derived from one
/// (a subclass, `Object.create(store)`, an instance with a method replaced) may behave
/// differently, so it goes through the JS seam and its own methods are called.
pub(crate) fn recognise(value: &JsValue) -> Option<Rc<MemoryLockStore<JsRuntime>>> {
    ATTACHING.with(|slot| slot.borrow_mut().take());
    let object = value.dyn_ref::<js_sys::Object>()?;
    let proto = js_sys::Object::get_prototype_of(value);
    if !js_sys::Object::has_own(&proto, &JsValue::from_str("__keelAttach")) {
        return None;
    }
    let overridden = ["acquire", "release", "extend", "isLocked", "remainingTime"]
        .iter()
        .any(|m| js_sys::Object::has_own(object, &JsValue::from_str(m)));
    if overridden {
        return None;
    }
    let attach = js_sys::Reflect::get(value, &JsValue::from_str("__keelAttach")).ok()?;
    let attach: js_sys::Function = attach.dyn_into().ok()?;
    attach.call0(value).ok()?;
    ATTACHING.with(|slot| slot.borrow_mut().take())
}

/// Wraps a fresh store as the JS object users see.
pub(crate) fn fresh() -> (JsValue, Rc<MemoryLockStore<JsRuntime>>) {
    let store = JsMemoryLockStore::new();
    let inner = store.inner.clone();
    (store.into(), inner)
}
