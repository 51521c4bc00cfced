//! `DurableObjectLockStore`'s JS face: the store object JS Workers pass to `setLockStore`,
//! each method checking its arguments before any RPC and answering as the seam does.

use super::*;
use crate::js::convert::metadata;

/// `new DurableObjectLockStore(env.LOCKS)` for JS Workers: a store object with the five
/// `LockStore` methods, the waiting pair (`acquireOrWait`, `withdraw`), the shared pair
/// (`acquireShared`, `acquireSharedOrWait`) and `inspect`, ready for `setLockStore`. With
/// `inspect` it keeps hold metadata: the JS face passes it to the acquiring methods as their
/// last argument.
#[wasm_bindgen(js_name = DurableObjectLockStore)]
pub struct JsDurableObjectLockStore {
    inner: Rc<DurableObjectLockStore>,
}

/// Runs `op` on a clone of the store as a promise; bad arguments reject it.
fn spawn<F, Fut, T>(store: &Rc<DurableObjectLockStore>, op: F) -> Promise
where
    F: FnOnce(Rc<DurableObjectLockStore>) -> Result<Fut, JsValue> + 'static,
    Fut: core::future::Future<Output = Result<T, JsValue>> + 'static,
    T: Into<JsValue>,
{
    let store = store.clone();
    promise(async move { Ok(op(store)?.await?.into()) })
}

#[wasm_bindgen]
extern "C" {
    /// A promise seen as having `then(step)` with a function kept across calls (js-sys's
    /// `Promise::then` takes a closure, which would be one more per call).
    #[wasm_bindgen(extends = Promise)]
    type Then;
    #[wasm_bindgen(method, js_name = then)]
    fn then(this: &Then, step: &Function) -> Promise;
}

/// A function of one answer, made once per isolate and kept for its life: the `then` step of
/// every call of one kind, so a call makes no closure of its own.
fn answer_step(step: fn(JsValue) -> Result<JsValue, JsValue>) -> Function {
    Closure::<dyn Fn(JsValue) -> Result<JsValue, JsValue>>::new(step)
        .into_js_value()
        .unchecked_into()
}

per_thread! {
    // A valid answer (`false`, `true`, or the object's `{ fence }`) is passed on as it is.
    static ACQUIRED: Function = answer_step(|answer| {
        answers::acquire(Rpc::Acquire.method(), &answer).map(|_| answer)
    });
    // `false`, `{ fence }` or `{ heldLimit }`, passed on as it is.
    static SHARED: Function = answer_step(|answer| {
        answers::shared(Rpc::AcquireShared.method(), &answer, false).map(|_| answer)
    });
    static RELEASED: Function = answer_step(|answer| {
        answers::boolean(Rpc::Release.method(), &answer).map(JsValue::from_bool)
    });
    static EXTENDED: Function = answer_step(|answer| {
        answers::boolean(Rpc::Extend.method(), &answer).map(JsValue::from_bool)
    });
    static LOCKED: Function = answer_step(|answer| {
        answers::boolean(Rpc::IsLocked.method(), &answer).map(JsValue::from_bool)
    });
    static FORCE_RELEASED: Function = answer_step(|answer| {
        answers::boolean(Rpc::ForceRelease.method(), &answer).map(JsValue::from_bool)
    });
    static REMAINING: Function = answer_step(|answer| {
        let ms = answers::remaining_time(Rpc::RemainingTime.method(), &answer)?;
        Ok(ms.map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)))
    });
}

/// The arguments of a call from JS — key, then as many of owner, TTL, weight and limit as the
/// method takes, then `said`, the hold's metadata, if the caller gave some — checked as the
/// object checks them (a bad one rejects the call before anything is sent) and passed on as the
/// caller gave them: a valid key is well-formed UTF-16 and a valid owner printable ASCII, so
/// the strings are the ones the checks read. The TTL goes as the whole milliseconds it stands
/// for, the share's terms as the numbers they stand for. One routine for every method: answers
/// the arguments and how many to send (the unused tail is never sent).
fn checked(args: &[&JsValue], said: Option<&JsValue>) -> Result<([JsValue; 6], usize), JsValue> {
    let mut out = [(); 6].map(|()| JsValue::UNDEFINED);
    if let Some(k) = args.first() {
        key(k)?;
        out[0] = JsValue::clone(k);
    }
    if let Some(o) = args.get(1) {
        owner(o)?;
        out[1] = JsValue::clone(o);
    }
    if let Some(t) = args.get(2) {
        out[2] = JsValue::from_f64(required_ttl(t)?.as_ms() as f64);
    }
    if let (Some(weight), Some(limit)) = (args.get(3), args.get(4)) {
        [out[3], out[4]] = terms(share(weight, limit)?);
    }
    let mut n = args.len();
    if let Some(said) = said.filter(|m| !m.is_undefined()) {
        out[n] = metadata(said)?;
        n += usize::from(!out[n].is_null());
    }
    Ok((out, n))
}

/// A shared acquire's answer as the JS seam has it: `{ fence }` (`{ fence, waitedMs }` after a
/// wait), `false`, or `{ heldLimit }`.
fn shared_grant_to_js(answer: SharedGrant) -> Result<JsValue, JsValue> {
    match answer {
        SharedGrant::Granted(grant) => waited_grant_to_js(grant),
        SharedGrant::Busy | SharedGrant::Unsupported => Ok(JsValue::FALSE),
        SharedGrant::LimitMismatch { held } => {
            object(&[("heldLimit", JsValue::from_f64(held.into()))])
        }
    }
}

impl JsDurableObjectLockStore {
    /// One RPC call with `args` and `said` (see [`checked`]) sent now, its answer judged by
    /// `step` (passed on as the object gave it without one): the promise of the checked answer.
    /// Bad arguments or a failed send reject it. Nothing here awaits in Rust: the call's own
    /// promise, then `step`, settle the answer.
    #[inline(never)]
    fn answered(
        &self,
        rpc: Rpc,
        args: &[&JsValue],
        said: Option<&JsValue>,
        step: Option<&'static PerThread<Function>>,
    ) -> Promise {
        let sent = checked(args, said).and_then(|(all, n)| self.inner.send(rpc, first(&all, n)));
        match (sent, step) {
            (Ok((_, answer)), Some(step)) => step.with(|step| {
                Promise::resolve(&answer)
                    .unchecked_into::<Then>()
                    .then(step)
            }),
            (Ok((_, answer)), None) => Promise::resolve(&answer),
            (Err(e), _) => Promise::reject(&e),
        }
    }

    /// `acquireOrWait` and `acquireSharedOrWait` (with the share's `terms`) in one body and one
    /// future: the arguments checked in the order the methods take them (a bad one rejects the
    /// promise), then the waiting call, carrying the metadata `m` when given.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn waiting(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        terms: Option<(&JsValue, &JsValue)>,
        w: &JsValue,
        p: &JsValue,
        m: &JsValue,
    ) -> Promise {
        let checked = || -> Result<_, JsValue> {
            let (k, o, t) = (key(k)?, owner(o)?, required_ttl(t)?);
            let holding = match terms {
                Some((weight, limit)) => Holding::Shared(share(weight, limit)?),
                None => Holding::Exclusive,
            };
            let wait = Wait {
                wait_ms: wait_ms("waitMs", w)?,
                poll_ms: match p.is_undefined() {
                    true => DEFAULT_RETRY_DELAY_MS,
                    false => wait_ms("pollMs", p)?,
                },
            };
            let said = Some(metadata(m)?).filter(|m| !m.is_null());
            Ok((k, o, t, holding, wait, said))
        };
        let checked = checked();
        spawn(&self.inner, move |s| {
            let (k, o, t, holding, wait, said) = checked?;
            Ok(async move {
                let answer = s.wait_in_queue(&k, &o, t, holding, wait, said).await?;
                shared_grant_to_js(answer)
            })
        })
    }
}

#[wasm_bindgen(js_class = DurableObjectLockStore)]
impl JsDurableObjectLockStore {
    /// A store over `namespace`, the Worker's `LockDurableObject` binding (`env.LOCKS`).
    #[wasm_bindgen(constructor)]
    pub fn new(namespace: JsValue) -> Result<JsDurableObjectLockStore, JsValue> {
        Ok(JsDurableObjectLockStore {
            inner: Rc::new(DurableObjectLockStore::from_js(namespace)?),
        })
    }

    /// Atomic set-if-absent, in the key's Durable Object: `{ fence }` or `false`. `metadata`
    /// (a string of at most 1 KiB of UTF-8), when given, is kept with the hold; so for every
    /// acquiring method, as its last argument.
    pub fn acquire(&self, k: &JsValue, o: &JsValue, t: &JsValue, m: &JsValue) -> Promise {
        self.answered(Rpc::Acquire, &[k, o, t], Some(m), Some(&ACQUIRED))
    }

    /// Acquire, or wait in the key's queue in its Durable Object for up to `waitMs`: `{ fence }`
    /// at once, `{ fence, waitedMs }` after waiting, or `false` when the wait is spent.
    /// `pollMs` (default 50) paces the plain attempts made if the object restarts meanwhile.
    #[wasm_bindgen(js_name = acquireOrWait)]
    pub fn acquire_or_wait(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        w: &JsValue,
        p: &JsValue,
        m: &JsValue,
    ) -> Promise {
        self.waiting(k, o, t, None, w, p, m)
    }

    /// A shared hold of `weight` permits out of `limit`, in the key's Durable Object: `{ fence }`,
    /// `false` (no room now, or callers queued first) or `{ heldLimit }` (the live shared holds
    /// have another limit).
    #[wasm_bindgen(js_name = acquireShared)]
    pub fn acquire_shared(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        weight: &JsValue,
        limit: &JsValue,
        m: &JsValue,
    ) -> Promise {
        let args = [k, o, t, weight, limit];
        self.answered(Rpc::AcquireShared, &args, Some(m), Some(&SHARED))
    }

    /// `acquireShared`, or wait in the key's one FIFO queue for up to `waitMs`:
    /// `{ fence, waitedMs }`, `false` when the wait is spent, `{ heldLimit }` at once. `pollMs`
    /// (default 50) paces the plain attempts made if the object restarts meanwhile.
    #[wasm_bindgen(js_name = acquireSharedOrWait)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_shared_or_wait(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        weight: &JsValue,
        limit: &JsValue,
        w: &JsValue,
        p: &JsValue,
        m: &JsValue,
    ) -> Promise {
        self.waiting(k, o, t, Some((weight, limit)), w, p, m)
    }

    /// Frees the key whoever holds it (operators); resolves whether anyone did.
    #[wasm_bindgen(js_name = forceRelease)]
    pub fn force_release(&self, k: &JsValue) -> Promise {
        self.answered(Rpc::ForceRelease, &[k], None, Some(&FORCE_RELEASED))
    }

    /// Stop waiting: leave the key's queue, or release the key if it was already handed over.
    pub fn withdraw(&self, k: &JsValue, o: &JsValue) -> Promise {
        let checked = key(k).and_then(|k| Ok((k, owner(o)?)));
        spawn(&self.inner, move |s| {
            let (k, o) = checked?;
            Ok(async move { s.withdraw(&k, &o).await.map(|()| JsValue::UNDEFINED) })
        })
    }

    /// Compare-owner-and-delete.
    pub fn release(&self, k: &JsValue, o: &JsValue) -> Promise {
        self.answered(Rpc::Release, &[k, o], None, Some(&RELEASED))
    }

    /// Compare-owner-and-reset-expiry.
    pub fn extend(&self, k: &JsValue, o: &JsValue, t: &JsValue) -> Promise {
        self.answered(Rpc::Extend, &[k, o, t], None, Some(&EXTENDED))
    }

    /// Whether anyone holds the key.
    #[wasm_bindgen(js_name = isLocked)]
    pub fn is_locked(&self, k: &JsValue) -> Promise {
        self.answered(Rpc::IsLocked, &[k], None, Some(&LOCKED))
    }

    /// Milliseconds until the key expires, or `null`.
    #[wasm_bindgen(js_name = remainingTime)]
    pub fn remaining_time(&self, k: &JsValue) -> Promise {
        self.answered(Rpc::RemainingTime, &[k], None, Some(&REMAINING))
    }

    /// Who holds the key and who waits, read in one turn of its Durable Object: `{ holders:
    /// [{ metadata, fence, remainingMs }], waiting }` (the live holds in fence order; never an
    /// owner token), as the object answers it. `keel-lock`'s `inspect(key)` judges it.
    pub fn inspect(&self, k: &JsValue) -> Promise {
        self.answered(Rpc::Inspect, &[k], None, None)
    }
}
