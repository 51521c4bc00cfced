//! The JS `Lock` class. Async methods return promises built from core futures that own a
//! clone of the lock (`Rc`), so no Rust borrow is held across an await: `l.extend()` from inside
//! `l.run(fn)` — the documented pattern — works.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use js_sys::{Array, Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;

use super::ids::IdMap;
use super::promises::promise_of;

use super::abort::{cancellation, signal_option, Abort};
use super::convert::{
    acquire_options, describe, fence_to_js, get_prop, keep_alive_option, not_held_error,
    resolve_answer, to_js, ttl, type_error,
};
use super::runtime::JsRuntime;
use super::store::Backend;
use crate::error::{Error, HoldOperation};
use crate::holding::{KeepAlive, LossReason, RunContext};
use crate::input::AcquireOptions;
use crate::lock::{Lock, RunError};

#[wasm_bindgen(module = "/src/js/holding.js")]
extern "C" {
    #[wasm_bindgen(js_name = makeContext)]
    fn make_context(fence: &JsValue, id: u32) -> JsValue;
    #[wasm_bindgen(js_name = setObserver)]
    fn set_observer(observer: &JsValue);
    #[wasm_bindgen(js_name = loseContext)]
    fn lose_context(context: &JsValue, reason: &JsValue);
    #[wasm_bindgen(js_name = unavailableErrorClass)]
    pub(crate) fn lock_unavailable_error_class() -> JsValue;
    #[wasm_bindgen(js_name = installHolding)]
    fn install_holding(instance: &JsValue);
}

pub(crate) type CoreLock = Lock<Backend, JsRuntime>;

/// A lock on one key. Created by `lock(key, ttlMs)` or `restoreLock(serialized)`; bound to the
/// store that was current when it was created.
#[wasm_bindgen(js_name = Lock)]
pub struct JsLock {
    inner: Rc<CoreLock>,
    keeper: Rc<RefCell<Option<Keeper>>>,
}

thread_local! {
    static DISPOSE_INSTALLED: Cell<bool> = const { Cell::new(false) };
}

impl JsLock {
    pub(crate) fn wrap(lock: CoreLock) -> JsLock {
        Self::from_core(Rc::new(lock))
    }

    /// A handle on a core lock that something else (a slot of the JS `Lock` class) shares.
    pub(crate) fn from_core(lock: Rc<CoreLock>) -> JsLock {
        // The first lock gives the class `hold()` and `[Symbol.asyncDispose]` (lazily, not at
        // module load).
        if !DISPOSE_INSTALLED.with(Cell::get) {
            DISPOSE_INSTALLED.with(|d| d.set(true));
            let sample = JsLock {
                inner: Rc::new(Lock::new(
                    lock.key().clone(),
                    lock.ttl(),
                    lock.store().clone(),
                    JsRuntime,
                )),
                keeper: Rc::default(),
            };
            install_holding(&JsValue::from(sample));
        }
        JsLock {
            inner: lock,
            keeper: Rc::default(),
        }
    }
}

/// A one-shot flag a future can wait on.
#[derive(Default)]
pub(crate) struct Flag {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Flag {
    pub(crate) fn set(&self) {
        self.set.set(true);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    pub(crate) fn wait(self: Rc<Self>) -> impl Future<Output = ()> {
        std::future::poll_fn(move |cx| {
            if self.set.get() {
                return Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

/// A keep-alive started with `autoExtend()` on an acquired lock.
struct Keeper {
    context: JsValue,
    stop: Rc<Flag>,
    done: Rc<Flag>,
}

/// Stops the lock's keep-alive, if one runs, and waits until it has (an extend in flight is let
/// finish), so that nothing extends after what follows.
async fn stop_keeper(keeper: &Rc<RefCell<Option<Keeper>>>) {
    let running = keeper.borrow_mut().take();
    if let Some(keeper) = running {
        keeper.stop.set();
        keeper.done.wait().await;
    }
}

/// Aborts the JS context's signal, with a `LockNotHeldError` saying why, when the core reports
/// the hold lost.
fn hook_loss(lock: &Rc<CoreLock>, context: &RunContext, js: JsValue) {
    let lock = lock.clone();
    context.on_lost(move |reason: LossReason| {
        let key = lock.key().as_str();
        let error = not_held_error(
            key,
            &["lock \"", key, "\" was lost: ", reason.as_str()].concat(),
        );
        lose_context(&js, &error);
    });
}

/// A run's context until its `fn` reads `signal` (then the loss is hooked up) or the run ends.
struct Unobserved {
    lock: Rc<CoreLock>,
    context: RunContext,
    js: JsValue,
}

thread_local! {
    /// Contexts whose signal nobody has read yet, by id (0 is never used).
    static UNOBSERVED: RefCell<(u32, IdMap<Unobserved>)> = RefCell::new((0, IdMap::default()));
}

/// Called from JS (through the observer set once) when the signal of the context with `id` is
/// first read. (The entry keeps the context itself.)
fn observe(id: f64, _context: JsValue) {
    let id = id as u32;
    let entry = UNOBSERVED.with(|u| u.borrow_mut().1.remove(&id));
    if let Some(entry) = entry {
        hook_loss(&entry.lock, &entry.context, entry.js);
    }
}

thread_local! {
    static OBSERVER_SET: Cell<bool> = const { Cell::new(false) };
}

/// Gives the JS side its way back in when a context's signal is first read (once per isolate).
fn ensure_observer() {
    if !OBSERVER_SET.with(|o| o.replace(true)) {
        set_observer(&Closure::<dyn Fn(f64, JsValue)>::new(observe).into_js_value());
    }
}

/// Forgets a run's context when the run ends.
struct ContextEntry(u32);

impl Drop for ContextEntry {
    fn drop(&mut self) {
        UNOBSERVED.with(|u| u.borrow_mut().1.remove(&self.0));
    }
}

/// The JS context object `{ fence, signal }` for a run. The loss is only hooked up (and the
/// deadline only watched) once `fn` reads `signal`.
fn run_context(lock: &Rc<CoreLock>, context: RunContext) -> (JsValue, ContextEntry) {
    let id = UNOBSERVED.with(|u| {
        let (next, _) = &mut *u.borrow_mut();
        if *next == 0 {
            ensure_observer();
        }
        *next = next.wrapping_add(1).max(1);
        *next
    });
    let js = make_context(&fence_to_js(context.fence), id);
    let entry = Unobserved {
        lock: lock.clone(),
        context,
        js: js.clone(),
    };
    UNOBSERVED.with(|u| u.borrow_mut().1.insert(id, entry));
    (js, ContextEntry(id))
}

/// The JS context of a hold kept alive by `autoExtend()`: its loss is always hooked up.
fn kept_context(lock: &Rc<CoreLock>, context: &RunContext) -> JsValue {
    let js = make_context(&fence_to_js(context.fence), 0);
    hook_loss(lock, context, js.clone());
    js
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
        Poll::Pending => promise_of(future),
    }
}

/// Calls the user's callback with the run's context object `{ fence, signal }`; a thrown error
/// or rejection comes back as the same JS object.
async fn call_task(
    lock: Rc<CoreLock>,
    task: Function,
    context: RunContext,
) -> Result<JsValue, JsValue> {
    let (context, _entry) = run_context(&lock, context);
    resolve_answer(task.call1(&JsValue::UNDEFINED, &context)?).await
}

/// `{ timeout, retryDelay, signal }`.
type WaitOptions = (AcquireOptions, Option<Abort>);

fn wait_options(value: &JsValue) -> Result<WaitOptions, JsValue> {
    Ok((acquire_options(value)?, signal_option(value)?))
}

/// `run()`'s options: the wait options and `autoExtend`.
fn run_options(value: &JsValue) -> Result<(WaitOptions, Option<KeepAlive>), JsValue> {
    let keep = match value.is_object() {
        true => keep_alive_option(&get_prop!(value, "autoExtend")?)?,
        false => None,
    };
    Ok((wait_options(value)?, keep))
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
    options: Result<(WaitOptions, Option<KeepAlive>), JsValue>,
) -> Result<JsValue, JsValue> {
    let ((options, abort), keep) = options?;
    let task: Function = task
        .dyn_into()
        .map_err(|v| type_error(["run() needs a function, got ", &describe(&v)].concat()))?;
    if let Some(abort) = abort.as_ref().filter(|a| a.aborted()) {
        return Err(abort.reason());
    }
    let cancel = cancellation(abort.as_ref())?;
    let held = lock.clone();
    match lock
        .try_run_with(options, cancel, keep, |context| {
            call_task(held, task, context)
        })
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
        spawn(run(self.inner.clone(), task, run_options(&options)))
    }

    /// `run(fn)` that never waits.
    #[wasm_bindgen(js_name = runImmediately)]
    pub fn run_immediately(&self, task: JsValue) -> Promise {
        spawn(run(
            self.inner.clone(),
            task,
            Ok(((AcquireOptions::immediately(), None), None)),
        ))
    }

    /// Tries to take the lock; with `{ timeout }`, waits until then (in the store's queue when
    /// it hands keys over). Resolves a boolean; with `{ signal }`, rejects with the signal's
    /// reason when it aborts first, leaving nothing held or queued.
    pub fn acquire(&self, options: JsValue) -> Promise {
        spawn(acquire(self.inner.clone(), wait_options(&options)))
    }

    /// Frees the lock if this handle still owns it. Resolves `false` (never throws) otherwise.
    /// Stops an `autoExtend()` first, waiting for an extend in flight.
    pub fn release(&self) -> Promise {
        let (lock, keeper) = (self.inner.clone(), self.keeper.clone());
        spawn(async move {
            stop_keeper(&keeper).await;
            lift(lock.release().await)
        })
    }

    /// Keeps extending the acquired lock (every `every` ms, default a third of the TTL) until
    /// `release()` or `stopAutoExtend()`; returns the hold's context `{ fence, signal }`, whose
    /// signal aborts when the hold is lost or `maxHoldMs` is reached. Throws `LockNotHeldError`
    /// when nothing is held. Calling it again while it runs returns the same context.
    #[wasm_bindgen(js_name = autoExtend)]
    pub fn auto_extend(&self, options: JsValue) -> Result<JsValue, JsValue> {
        if let Some(keeper) = &*self.keeper.borrow() {
            return Ok(keeper.context.clone());
        }
        let keep = match options.is_undefined() {
            true => KeepAlive::default(),
            false => keep_alive_option(&options)?.unwrap_or_default(),
        };
        let context = self.inner.hold_context().ok_or_else(|| {
            to_js(Error::NotHeld {
                key: self.inner.key().as_str().to_owned(),
                attempted: HoldOperation::Extend,
            })
        })?;
        let js = kept_context(&self.inner, &context);
        let (stop, done) = (Rc::new(Flag::default()), Rc::new(Flag::default()));
        let (lock, until, finished) = (self.inner.clone(), stop.clone(), done.clone());
        spawn_local(async move {
            lock.keep_alive(&context, Some(keep), until.wait()).await;
            finished.set();
        });
        *self.keeper.borrow_mut() = Some(Keeper {
            context: js.clone(),
            stop,
            done,
        });
        Ok(js)
    }

    /// Stops `autoExtend()`; resolves once no extend is in flight. The lock stays held.
    #[wasm_bindgen(js_name = stopAutoExtend)]
    pub fn stop_auto_extend(&self) -> Promise {
        let keeper = self.keeper.clone();
        spawn(async move {
            stop_keeper(&keeper).await;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The loss signal of the hold `autoExtend()` keeps alive, or `undefined` when none runs.
    #[wasm_bindgen(getter)]
    #[wasm_bindgen(unchecked_return_type = "AbortSignal | undefined")]
    pub fn signal(&self) -> Result<JsValue, JsValue> {
        match &*self.keeper.borrow() {
            Some(keeper) => Reflect::get(&keeper.context, &JsValue::from_str("signal")),
            None => Ok(JsValue::UNDEFINED),
        }
    }

    /// Frees the key whoever holds it — for operators clearing a stuck lock. Dangerous: the
    /// holder keeps working until its next extend fails (its `signal` aborts then). Resolves
    /// whether anyone held it; rejects when the store cannot force-release.
    #[wasm_bindgen(js_name = forceRelease)]
    pub fn force_release(&self) -> Promise {
        let lock = self.inner.clone();
        spawn(async move { lift(lock.force_release().await) })
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
