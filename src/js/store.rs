//! The store seam, open to JS: any object with the five methods, answering values or
//! promises, becomes a [`LockStore`] the core drives. The built-in memory store skips all of
//! this and is called directly.

use crate::prelude::*;
use alloc::rc::Rc;

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;

use super::convert::{describe, method_name, type_error};
use super::promises::resolve_answer;
use super::promises::{grant_answer, grants_answer};
use super::runtime::JsRuntime;
use crate::error::Operation;
use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl, MAX_TTL_MS};
use crate::inspect::{HolderInfo, LockInfo};
use crate::memory::MemoryLockStore;
use crate::share::{Share, SharedGrant};
use crate::store::{ForceRelease, LockStore, ManyGrant, Wait};
use crate::token::{Metadata, OwnerToken};

/// A store written in JS: the object and its five methods, looked up once at `setLockStore`,
/// plus the optional pair that lets a store hand keys over to waiters:
/// `acquireOrWait(key, owner, ttlMs, waitMs, pollMs)` (answers like `acquire`, or
/// `{ fence, waitedMs }`) and `withdraw(key, owner)`; and the optional pair that lets it keep
/// shared holds (semaphores, read locks): `acquireShared(key, owner, ttlMs, weight, limit)` and
/// `acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, pollMs)`, answering as
/// `acquire`/`acquireOrWait` do or `{ heldLimit }` when the key's live holds have another limit.
pub struct JsLockStore {
    object: JsValue,
    acquire: Function,
    release: Function,
    extend: Function,
    is_locked: Function,
    remaining_time: Function,
    acquire_or_wait: Option<Function>,
    withdraw: Option<Function>,
    force_release: Option<Function>,
    acquire_shared: Option<Function>,
    acquire_shared_or_wait: Option<Function>,
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
            Reflect::get(&object, &JsValue::from_str(method_name(op)))?
                .dyn_into::<Function>()
                .map_err(|_| {
                    type_error(
                        [
                            "lock store is missing the method ",
                            method_name(op),
                            "() (a LockStore needs acquire, release, extend, isLocked and remainingTime)",
                        ]
                        .concat(),
                    )
                })
        };
        let optional = |name: &str| -> Result<Option<Function>, JsValue> {
            let value = Reflect::get(&object, &JsValue::from_str(name))?;
            if value.is_undefined() {
                return Ok(None);
            }
            value.dyn_into::<Function>().map(Some).map_err(|_| {
                type_error(["lock store's ", name, " must be a method when present"].concat())
            })
        };
        Ok(JsLockStore {
            acquire_or_wait: optional("acquireOrWait")?,
            withdraw: optional("withdraw")?,
            force_release: optional("forceRelease")?,
            acquire_shared: optional("acquireShared")?,
            acquire_shared_or_wait: optional("acquireSharedOrWait")?,
            acquire: method(Operation::Acquire)?,
            release: method(Operation::Release)?,
            extend: method(Operation::Extend)?,
            is_locked: method(Operation::IsLocked)?,
            remaining_time: method(Operation::RemainingTime)?,
            object,
        })
    }

    /// The store's `inspect` method, looked up per call (only the kit and Rust callers ask).
    fn inspect_method(&self) -> Option<Function> {
        Reflect::get(&self.object, &JsValue::from_str("inspect"))
            .ok()?
            .dyn_into()
            .ok()
    }

    /// Whether the store has a `forceRelease` method.
    pub(crate) fn force_releases(&self) -> bool {
        self.force_release.is_some()
    }

    /// Calls a method; a thrown error comes back as the same JS value.
    fn invoke(&self, method: &Function, args: &[JsValue]) -> Result<JsValue, JsValue> {
        match args {
            [a] => method.call1(&self.object, a),
            [a, b] => method.call2(&self.object, a, b),
            [a, b, c] => method.call3(&self.object, a, b, c),
            _ => method.apply(&self.object, &args.iter().collect()),
        }
    }

    /// `acquireShared`, or `acquireSharedOrWait` when there is a wait and the store has it.
    async fn shared_call(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Option<Wait>,
    ) -> Result<SharedGrant, JsValue> {
        let mut args = vec![
            js_key(key),
            js_owner(owner),
            js_ttl(ttl),
            JsValue::from_f64(share.weight().into()),
            JsValue::from_f64(share.limit().into()),
        ];
        let (method, name) = match (wait, &self.acquire_shared_or_wait) {
            (Some(wait), Some(method)) => {
                args.push(JsValue::from_f64(wait.wait_ms as f64));
                args.push(JsValue::from_f64(wait.poll_ms as f64));
                (method, "lock store's acquireSharedOrWait()")
            }
            _ => match &self.acquire_shared {
                Some(method) => (method, "lock store's acquireShared()"),
                None => return Ok(SharedGrant::Unsupported),
            },
        };
        args.extend(said(owner));
        let answer = self.call_acquiring(method, &args, key, owner).await?;
        answers::shared(name, &answer, wait.is_some())
    }

    /// Calls a method and settles its answer: a thrown error or a rejection comes back as the
    /// same JS value; a thenable is awaited.
    async fn call(&self, method: &Function, args: &[JsValue]) -> Result<JsValue, JsValue> {
        resolve_answer(self.invoke(method, args)?).await
    }

    /// Calls an acquiring method and settles its answer; a grant answered after the core gave
    /// up on the call is released.
    async fn call_acquiring(
        &self,
        method: &Function,
        args: &[JsValue],
        key: &Key,
        owner: &OwnerToken,
    ) -> Result<JsValue, JsValue> {
        let answer = self.invoke(method, args)?;
        grant_answer(answer, &self.object, key.as_str(), owner.as_str()).await
    }
}

pub(crate) mod answers;

fn seam_method(op: Operation) -> String {
    ["lock store's ", method_name(op), "()"].concat()
}

fn js_key(key: &Key) -> JsValue {
    JsValue::from_str(key.as_str())
}

fn js_owner(owner: &OwnerToken) -> JsValue {
    JsValue::from_str(owner.as_str())
}

/// The metadata `owner` carries, as the extra last argument of an acquiring call.
fn said(owner: &OwnerToken) -> Option<JsValue> {
    owner.metadata().map(JsValue::from_str)
}

fn js_ttl(ttl: Ttl) -> JsValue {
    JsValue::from_f64(ttl.as_ms() as f64)
}

impl LockStore for JsLockStore {
    type Error = JsValue;

    fn name(&self) -> &'static str {
        "js"
    }

    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, JsValue> {
        let answer = match said(owner) {
            None => {
                let args = [js_key(key), js_owner(owner), js_ttl(ttl)];
                self.call_acquiring(&self.acquire, &args, key, owner)
                    .await?
            }
            Some(said) => {
                let args = [js_key(key), js_owner(owner), js_ttl(ttl), said];
                self.call_acquiring(&self.acquire, &args, key, owner)
                    .await?
            }
        };
        answers::acquire(&seam_method(Operation::Acquire), &answer)
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, JsValue> {
        let answer = self
            .call(&self.release, &[js_key(key), js_owner(owner)])
            .await?;
        answers::boolean(&seam_method(Operation::Release), &answer)
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        let args = [js_key(key), js_owner(owner), js_ttl(ttl)];
        let answer = self.call(&self.extend, &args).await?;
        answers::boolean(&seam_method(Operation::Extend), &answer)
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, JsValue> {
        let answer = self.call(&self.is_locked, &[js_key(key)]).await?;
        answers::boolean(&seam_method(Operation::IsLocked), &answer)
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, JsValue> {
        let answer = self.call(&self.remaining_time, &[js_key(key)]).await?;
        answers::remaining_time(&seam_method(Operation::RemainingTime), &answer)
    }

    fn hands_over(&self) -> bool {
        self.acquire_or_wait.is_some()
    }

    fn hands_over_shared(&self) -> bool {
        self.acquire_shared_or_wait.is_some()
    }

    async fn acquire_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait: Wait,
    ) -> Result<Option<Grant>, JsValue> {
        let Some(method) = &self.acquire_or_wait else {
            return self.acquire(key, owner, ttl).await;
        };
        let mut args = vec![
            js_key(key),
            js_owner(owner),
            js_ttl(ttl),
            JsValue::from_f64(wait.wait_ms as f64),
            JsValue::from_f64(wait.poll_ms as f64),
        ];
        args.extend(said(owner));
        let answer = self.call_acquiring(method, &args, key, owner).await?;
        answers::waited("lock store's acquireOrWait()", &answer)
    }

    async fn force_release(&self, key: &Key) -> Result<ForceRelease, JsValue> {
        let Some(method) = &self.force_release else {
            return Ok(ForceRelease::Unsupported);
        };
        let answer = self.call(method, &[js_key(key)]).await?;
        Ok(
            match answers::boolean("lock store's forceRelease()", &answer)? {
                true => ForceRelease::Freed,
                false => ForceRelease::WasFree,
            },
        )
    }

    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, JsValue> {
        self.shared_call(key, owner, ttl, share, None).await
    }

    async fn acquire_shared_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Wait,
    ) -> Result<SharedGrant, JsValue> {
        self.shared_call(key, owner, ttl, share, Some(wait)).await
    }

    fn acquires_many(&self) -> bool {
        Reflect::has(&self.object, &JsValue::from_str("acquireMany")).unwrap_or(false)
    }

    /// A store with `inspect(key)` keeps metadata (the seam's rule).
    fn keeps_metadata(&self) -> bool {
        self.inspect_method().is_some()
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, JsValue> {
        let Some(method) = self.inspect_method() else {
            return Ok(None);
        };
        let answer = self.call(&method, &[js_key(key)]).await?;
        answers::inspect("lock store's inspect()", &answer).map(Some)
    }

    /// `acquireMany(keys, owners, ttlMs)` when the object has it (looked up per call: only the
    /// conformance kit and Rust callers take sets in one step; the JS face calls it itself).
    async fn acquire_many(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Result<ManyGrant, JsValue> {
        let method = Reflect::get(&self.object, &JsValue::from_str("acquireMany"))?;
        if method.is_undefined() {
            return Ok(ManyGrant::Unsupported);
        }
        let method: Function = method
            .dyn_into()
            .map_err(|_| type_error("lock store's acquireMany must be a method when present"))?;
        let js_keys: js_sys::Array = keys.iter().map(js_key).collect();
        let js_owners: js_sys::Array = owners.iter().map(js_owner).collect();
        let answer = method.call3(&self.object, &js_keys, &js_owners, &js_ttl(ttl))?;
        let answer = grants_answer(answer, &self.object, keys, owners).await?;
        let judged = answers::many("lock store's acquireMany()", &answer, keys.len());
        if judged.is_err() {
            // A grant inside an answer the seam does not allow is not taken: given back.
            for (key, owner) in keys.iter().zip(owners) {
                super::promises::release_late_grant(
                    &JsValue::TRUE,
                    &self.object,
                    key.as_str(),
                    owner.as_str(),
                );
            }
        }
        judged
    }

    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), JsValue> {
        match &self.withdraw {
            Some(method) => self
                .call(method, &[js_key(key), js_owner(owner)])
                .await
                .map(drop),
            None => self.release(key, owner).await.map(drop),
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

    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.acquire_sync(key, owner, ttl)),
            Backend::Js(j) => j.acquire(key, owner, ttl).await,
        }
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.release_sync(key, owner)),
            Backend::Js(j) => j.release(key, owner).await,
        }
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.extend_sync(key, owner, ttl)),
            Backend::Js(j) => j.extend(key, owner, ttl).await,
        }
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.remaining_time_sync(key).is_some()),
            Backend::Js(j) => j.is_locked(key).await,
        }
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.remaining_time_sync(key)),
            Backend::Js(j) => j.remaining_time(key).await,
        }
    }

    fn hands_over(&self) -> bool {
        match self {
            Backend::Memory(_) => true,
            Backend::Js(j) => j.hands_over(),
        }
    }

    fn hands_over_shared(&self) -> bool {
        match self {
            Backend::Memory(_) => true,
            Backend::Js(j) => j.hands_over_shared(),
        }
    }

    fn always_answers(&self) -> bool {
        matches!(self, Backend::Memory(_))
    }

    async fn acquire_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait: Wait,
    ) -> Result<Option<Grant>, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.acquire_or_wait_ms(key, owner, ttl, wait.wait_ms).await),
            Backend::Js(j) => j.acquire_or_wait(key, owner, ttl, wait).await,
        }
    }

    async fn force_release(&self, key: &Key) -> Result<ForceRelease, JsValue> {
        match self {
            Backend::Memory(m) => Ok(match m.force_release_sync(key) {
                true => ForceRelease::Freed,
                false => ForceRelease::WasFree,
            }),
            Backend::Js(j) => j.force_release(key).await,
        }
    }

    fn acquires_many(&self) -> bool {
        match self {
            Backend::Memory(_) => true,
            Backend::Js(j) => j.acquires_many(),
        }
    }

    fn keeps_metadata(&self) -> bool {
        match self {
            Backend::Memory(_) => true,
            Backend::Js(j) => j.keeps_metadata(),
        }
    }

    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, JsValue> {
        match self {
            Backend::Memory(m) => Ok(Some(m.inspect_sync(key))),
            Backend::Js(j) => j.inspect(key).await,
        }
    }

    async fn acquire_many(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Result<ManyGrant, JsValue> {
        match self {
            Backend::Memory(m) => m
                .acquire_many(keys, owners, ttl)
                .await
                .map_err(|e| match e {}),
            Backend::Js(j) => j.acquire_many(keys, owners, ttl).await,
        }
    }

    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m.acquire_shared_sync(key, owner, ttl, share)),
            Backend::Js(j) => j.acquire_shared(key, owner, ttl, share).await,
        }
    }

    async fn acquire_shared_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Wait,
    ) -> Result<SharedGrant, JsValue> {
        match self {
            Backend::Memory(m) => Ok(m
                .acquire_shared_or_wait(key, owner, ttl, share, wait)
                .await
                .unwrap_or_else(|never| match never {})),
            Backend::Js(j) => j.acquire_shared_or_wait(key, owner, ttl, share, wait).await,
        }
    }

    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), JsValue> {
        match self {
            Backend::Memory(m) => {
                m.release_sync(key, owner);
                Ok(())
            }
            Backend::Js(j) => j.withdraw(key, owner).await,
        }
    }
}
