//! The JS `Lock` class. Async methods return promises built from core futures that own a
//! clone of the lock (`Rc`), so no Rust borrow is held across an await: `l.extend()` from inside
//! `l.run(fn)` — the documented pattern — works.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::abort::{cancellation, signal_option, Abort};
use super::convert::{
    acquire_options, describe, fence_to_js, object, resolve_answer, to_js, ttl, type_error,
};
use super::runtime::JsRuntime;
use super::store::Backend;
use crate::error::Error;
use crate::input::AcquireOptions;
use crate::lock::{Lock, RunContext, RunError};

pub(crate) type CoreLock = Lock<Backend, JsRuntime>;

/// A lock on one key. Created by `lock(key, ttlMs)` or `restoreLock(serialized)`; bound to the
/// store that was current when it was created.
#[wasm_bindgen(js_name = Lock)]
pub struct JsLock {
    inner: Rc<CoreLock>,
}

impl JsLock {
    pub(crate) fn wrap(lock: CoreLock) -> JsLock {
        JsLock {
            inner: Rc::new(lock),
        }
    }
}

/// A future of a JS value, boxed so that every async method (and `checkLockStore`) shares one
/// copy of the promise glue instead of one per future type.
pub(crate) type JsFuture = Pin<Box<dyn Future<Output = Result<JsValue, JsValue>>>>;

/// Runs `f` as a promise; any `Err` rejects it.
///
/// The future is polled once on the spot: on the memory store (and with a synchronous `fn`)
/// everything completes without waiting, and an already-settled promise is much cheaper than a
/// spawned task. Only a future that is still pending is handed to the executor, which polls it
/// again with a real waker — futures check their state on every poll, so nothing is lost.
fn spawn(f: impl Future<Output = Result<JsValue, JsValue>> + 'static) -> Promise {
    spawn_boxed(Box::pin(f))
}

fn spawn_boxed(mut future: JsFuture) -> Promise {
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(Ok(value)) => Promise::resolve(&value),
        Poll::Ready(Err(error)) => Promise::reject(&error),
        Poll::Pending => future_to_promise(future),
    }
}

/// Calls the user's callback with the run's context object `{ fence }`; a thrown error or
/// rejection comes back as the same JS object.
async fn call_task(task: Function, context: RunContext) -> Result<JsValue, JsValue> {
    let context = object(&[("fence", fence_to_js(context.fence))])?;
    resolve_answer(task.call1(&JsValue::UNDEFINED, &context)?).await
}

/// `{ timeout, retryDelay, signal }`.
type WaitOptions = (AcquireOptions, Option<Abort>);

fn wait_options(value: &JsValue) -> Result<WaitOptions, JsValue> {
    Ok((acquire_options(value)?, signal_option(value)?))
}

/// A lock error as JS sees it; an abort rejects with the signal's reason.
fn lock_error(error: Error<JsValue>, abort: Option<&Abort>) -> JsValue {
    match (error, abort) {
        (Error::Aborted, Some(abort)) => abort.reason(),
        (error, _) => to_js(error),
    }
}

async fn run(
    lock: Rc<CoreLock>,
    task: JsValue,
    options: Result<WaitOptions, JsValue>,
) -> Result<JsValue, JsValue> {
    let (options, abort) = options?;
    let task: Function = task
        .dyn_into()
        .map_err(|v| type_error(format!("run() needs a function, got {}", describe(&v))))?;
    if let Some(abort) = abort.as_ref().filter(|a| a.aborted()) {
        return Err(abort.reason());
    }
    let cancel = cancellation(abort.as_ref())?;
    match lock
        .try_run_until(options, cancel, |context| call_task(task, context))
        .await
    {
        Ok(Some(value)) => Ok(Array::of2(&JsValue::TRUE, &value).into()),
        Ok(None) => Ok(Array::of2(&JsValue::FALSE, &JsValue::UNDEFINED).into()),
        Err(RunError::Task(error)) => Err(error),
        Err(RunError::Lock(error)) => Err(lock_error(error, abort.as_ref())),
    }
}

async fn acquire(
    lock: Rc<CoreLock>,
    options: Result<WaitOptions, JsValue>,
) -> Result<JsValue, JsValue> {
    let (options, abort) = options?;
    if let Some(abort) = abort.as_ref().filter(|a| a.aborted()) {
        return Err(abort.reason());
    }
    let cancel = cancellation(abort.as_ref())?;
    match lock.acquire_until(options, cancel).await {
        Ok(acquired) => Ok(acquired.into()),
        Err(error) => Err(lock_error(error, abort.as_ref())),
    }
}

fn lift<T: Into<JsValue>>(r: Result<T, Error<JsValue>>) -> Result<JsValue, JsValue> {
    r.map(Into::into).map_err(to_js)
}

#[wasm_bindgen(js_class = Lock)]
impl JsLock {
    /// Acquire, run `fn({ fence })`, always release. Resolves `[true, result]`, or
    /// `[false, undefined]` when someone else holds the lock (then `fn` never ran).
    pub fn run(&self, task: JsValue, options: JsValue) -> Promise {
        spawn(run(self.inner.clone(), task, wait_options(&options)))
    }

    /// `run(fn)` that never waits.
    #[wasm_bindgen(js_name = runImmediately)]
    pub fn run_immediately(&self, task: JsValue) -> Promise {
        spawn(run(
            self.inner.clone(),
            task,
            Ok((AcquireOptions::immediately(), None)),
        ))
    }

    /// Tries to take the lock; with `{ timeout }`, waits until then (in the store's queue when
    /// it hands keys over). Resolves a boolean; with `{ signal }`, rejects with the signal's
    /// reason when it aborts first, leaving nothing held or queued.
    pub fn acquire(&self, options: JsValue) -> Promise {
        spawn(acquire(self.inner.clone(), wait_options(&options)))
    }

    /// Frees the lock if this handle still owns it. Resolves `false` (never throws) otherwise.
    pub fn release(&self) -> Promise {
        let lock = self.inner.clone();
        spawn(async move { lift(lock.release().await) })
    }

    /// Resets expiry to `ttlMs` (default: the lock's TTL) from now. Rejects with
    /// `LockNotHeldError` when the lock was lost or never acquired.
    pub fn extend(&self, ttl_ms: JsValue) -> Promise {
        let lock = self.inner.clone();
        let ttl = ttl(&ttl_ms, lock.ttl());
        spawn(async move {
            let ttl = ttl?;
            lift(lock.extend(Some(ttl)).await.map(|()| JsValue::UNDEFINED))
        })
    }

    /// Freezes key, TTL and owner token into a string for `restoreLock`. Throws
    /// `LockNotHeldError` when there is no hold to hand over.
    pub fn serialize(&self) -> Result<String, JsValue> {
        self.inner.serialize().map_err(to_js)
    }

    /// Does anyone (not necessarily this handle) hold the key?
    #[wasm_bindgen(js_name = isLocked)]
    pub fn is_locked(&self) -> Promise {
        let lock = self.inner.clone();
        spawn(async move { lift(lock.is_locked().await) })
    }

    /// Did this handle hold the lock and lose it? Conservative: judged against the time the
    /// acquire/extend request was sent plus its TTL.
    #[wasm_bindgen(js_name = isExpired)]
    pub fn is_expired(&self) -> Promise {
        Promise::resolve(&JsValue::from_bool(self.inner.is_expired()))
    }

    /// Milliseconds until the key's expiry, or `null` when unheld.
    #[wasm_bindgen(js_name = getRemainingTime)]
    pub fn get_remaining_time(&self) -> Promise {
        let lock = self.inner.clone();
        spawn(async move {
            let remaining = lock.remaining_time().await.map_err(to_js)?;
            Ok(remaining.map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)))
        })
    }

    /// The fencing token of the current hold: a number that strictly increases with every
    /// acquisition of the key, or `null` when this handle holds nothing or its store keeps no
    /// fences.
    #[wasm_bindgen(getter)]
    #[wasm_bindgen(unchecked_return_type = "number | null")]
    pub fn fence(&self) -> JsValue {
        fence_to_js(self.inner.fence())
    }

    /// The key.
    #[wasm_bindgen(getter)]
    pub fn key(&self) -> String {
        self.inner.key().as_str().to_owned()
    }

    /// The TTL in ms.
    #[wasm_bindgen(getter, js_name = ttlMs)]
    pub fn ttl_ms(&self) -> f64 {
        self.inner.ttl().as_ms() as f64
    }
}
