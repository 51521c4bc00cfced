//! `MemoryLockStore` for JS: the core's memory store behind a JS class. It is a complete
//! `LockStore` object in its own right (its methods answer plain values), and `setLockStore`
//! recognises it and drives it directly, without a JS call per store operation.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::convert::{grant_to_js, key, owner, required_ttl};
use super::runtime::JsRuntime;
use crate::memory::MemoryLockStore;

thread_local! {
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

    /// Atomic set-if-absent: `{ fence }` when acquired, `false` when held.
    #[wasm_bindgen(unchecked_return_type = "{ fence: number } | false")]
    pub fn acquire(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<JsValue, JsValue> {
        let grant = self
            .inner
            .acquire_sync(&key(&k)?, &owner(&o)?, required_ttl(&t)?);
        grant_to_js(grant)
    }

    /// Compare-owner-and-delete.
    pub fn release(&self, k: JsValue, o: JsValue) -> Result<bool, JsValue> {
        Ok(self.inner.release_sync(&key(&k)?, &owner(&o)?))
    }

    /// Compare-owner-and-reset-expiry.
    pub fn extend(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<bool, JsValue> {
        Ok(self
            .inner
            .extend_sync(&key(&k)?, &owner(&o)?, required_ttl(&t)?))
    }

    /// Whether anyone holds the key.
    #[wasm_bindgen(js_name = isLocked)]
    pub fn is_locked(&self, k: JsValue) -> Result<bool, JsValue> {
        Ok(self.inner.remaining_time_sync(&key(&k)?).is_some())
    }

    /// Milliseconds until the key expires, or `null`.
    #[wasm_bindgen(js_name = remainingTime)]
    #[wasm_bindgen(unchecked_return_type = "number | null")]
    pub fn remaining_time(&self, k: JsValue) -> Result<JsValue, JsValue> {
        let remaining = self.inner.remaining_time_sync(&key(&k)?);
        Ok(remaining.map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)))
    }

    /// Frees the key whoever holds it; answers whether anyone did.
    #[wasm_bindgen(js_name = forceRelease)]
    pub fn force_release(&self, k: JsValue) -> Result<bool, JsValue> {
        Ok(self.inner.force_release_sync(&key(&k)?))
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
