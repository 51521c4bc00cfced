//! The store seam, open to JS: any object with the five methods, answering values or
//! promises, becomes a [`LockStore`] the core drives. The built-in memory store skips all of
//! this and is called directly.

use std::rc::Rc;

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;

use super::convert::{describe, settle, type_error};
use super::runtime::JsRuntime;
use crate::error::Operation;
use crate::input::{Key, Ttl};
use crate::memory::MemoryLockStore;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// A store written in JS: the object and its five methods, looked up once at `setLockStore`.
pub struct JsLockStore {
    object: JsValue,
    acquire: Function,
    release: Function,
    extend: Function,
    is_locked: Function,
    remaining_time: Function,
}

impl JsLockStore {
    /// Checks that `object` has the five methods; a `TypeError` names the first one missing.
    pub fn new(object: JsValue) -> Result<Self, JsValue> {
        if !object.is_object() && !object.is_function() {
            return Err(type_error(
                "a lock store must be an object with acquire, release, extend, isLocked and remainingTime methods",
            ));
        }
        let method = |op: Operation| -> Result<Function, JsValue> {
            Reflect::get(&object, &JsValue::from_str(op.js_name()))?
                .dyn_into::<Function>()
                .map_err(|_| {
                    type_error(format!(
                        "lock store is missing the method {}() (a LockStore needs acquire, release, extend, isLocked and remainingTime)",
                        op.js_name()
                    ))
                })
        };
        Ok(JsLockStore {
            acquire: method(Operation::Acquire)?,
            release: method(Operation::Release)?,
            extend: method(Operation::Extend)?,
            is_locked: method(Operation::IsLocked)?,
            remaining_time: method(Operation::RemainingTime)?,
            object,
        })
    }

    /// Calls a method and settles its answer: a thrown error or a rejection comes back as the
    /// same JS value; a thenable is awaited.
    async fn call(&self, method: &Function, args: &[JsValue]) -> Result<JsValue, JsValue> {
        let answer = match args {
            [a] => method.call1(&self.object, a),
            [a, b] => method.call2(&self.object, a, b),
            [a, b, c] => method.call3(&self.object, a, b, c),
            _ => method.call0(&self.object),
        }?;
        settle(answer).await
    }

    async fn boolean(
        &self,
        op: Operation,
        method: &Function,
        args: &[JsValue],
    ) -> Result<bool, JsValue> {
        let answer = self.call(method, args).await?;
        answer.as_bool().ok_or_else(|| {
            type_error(format!(
                "lock store's {}() must answer a boolean (or a promise of one), got {}; this store is broken",
                op.js_name(),
                describe(&answer)
            ))
        })
    }
}

fn js_key(key: &Key) -> JsValue {
    JsValue::from_str(key.as_str())
}

fn js_owner(owner: &OwnerToken) -> JsValue {
    JsValue::from_str(owner.as_str())
}

fn js_ttl(ttl: Ttl) -> JsValue {
    JsValue::from_f64(ttl.as_ms() as f64)
}

impl LockStore for JsLockStore {
    type Error = JsValue;

    fn name(&self) -> &'static str {
        "js"
    }

    async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        let args = [js_key(key), js_owner(owner), js_ttl(ttl)];
        self.boolean(Operation::Acquire, &self.acquire, &args).await
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, JsValue> {
        let args = [js_key(key), js_owner(owner)];
        self.boolean(Operation::Release, &self.release, &args).await
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        let args = [js_key(key), js_owner(owner), js_ttl(ttl)];
        self.boolean(Operation::Extend, &self.extend, &args).await
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, JsValue> {
        self.boolean(Operation::IsLocked, &self.is_locked, &[js_key(key)])
            .await
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, JsValue> {
        let answer = self.call(&self.remaining_time, &[js_key(key)]).await?;
        if answer.is_null() || answer.is_undefined() {
            return Ok(None);
        }
        match answer.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(Some(ms.ceil() as u64)),
            _ => Err(type_error(format!(
                "lock store's remainingTime() must answer a non-negative number or null (or a promise of one), got {}; this store is broken",
                describe(&answer)
            ))),
        }
    }
}

/// The store a lock was created with: the built-in memory store (called synchronously, no
/// promise per store call) or any store written in JS.
#[derive(Clone)]
pub enum Backend {
    /// `new MemoryLockStore()`.
    Memory(Rc<MemoryLockStore<JsRuntime>>),
    /// Any other object with the five methods.
    Js(Rc<JsLockStore>),
}

impl LockStore for Backend {
    type Error = JsValue;

    fn name(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Js(_) => "js",
        }
    }

    async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.try_acquire(key, owner, ttl)),
            Backend::Js(j) => j.acquire(key, owner, ttl).await,
        }
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.try_release(key, owner)),
            Backend::Js(j) => j.release(key, owner).await,
        }
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.try_extend(key, owner, ttl)),
            Backend::Js(j) => j.extend(key, owner, ttl).await,
        }
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.remaining_ms(key).is_some()),
            Backend::Js(j) => j.is_locked(key).await,
        }
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.remaining_ms(key)),
            Backend::Js(j) => j.remaining_time(key).await,
        }
    }
}
