//! `DurableObjectLockStore`: a [`LockStore`] over a `LockDurableObject` namespace binding.
//!
//! Transport: JS RPC, not `fetch`. One RPC call is one round trip carrying typed arguments
//! (`stub.acquire(key, owner, ttlMs)`), with no URL routing, no request/response bodies to
//! encode and parse, and errors (a `RangeError` for a bad TTL) arriving as the same error
//! class on the caller's side.
//!
//! Waiting is one RPC too: `acquireOrWait` stays open while the caller waits in the object's
//! queue, and the object resolves it with the grant when it hands the key over. Shared holds
//! (semaphores, read locks) are the same two calls with the share's terms:
//! `acquireShared(key, owner, ttlMs, weight, limit)` and `acquireSharedOrWait(…, waitMs)`.
//! Each acquiring call carries the hold's metadata as one more argument when there is some,
//! and `inspect(key)` reads the key's holds and waiters back.

use alloc::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;

use super::object::{wait_ms, waited_grant_to_js};
use super::{describe, key, promise, type_error, WorkersRuntime};
use crate::error::InputError;
use crate::grant::Grant;
use crate::input::{Key, Ttl, DEFAULT_RETRY_DELAY_MS};
use crate::inspect::LockInfo;
use crate::js::convert::{object, owner, required_ttl, share};
use crate::js::promises::{grant_answer, settled};
use crate::js::store::answers;
use crate::lock::{Lock, MultiLock};
use crate::per_thread::PerThread;
use crate::prelude::*;
use crate::runtime::Runtime;
use crate::share::{Holding, Share, SharedGrant};
use crate::store::{ForceRelease, LockStore, Wait};
use crate::token::OwnerToken;

mod js;
pub use js::JsDurableObjectLockStore;

/// A [`LockStore`] whose rows live in `LockDurableObject`s: each key is routed to its own
/// object with `idFromName(key)` (no global bottleneck), and each operation is one JS RPC call
/// to it. Expiry is judged by the object's clock, never the caller's.
///
/// It hands keys over ([`LockStore::hands_over`]): a lock waiting with a timeout makes one
/// `acquireOrWait` call that the object keeps open, queued in FIFO order behind earlier
/// waiters, until it grants the key (on release or at the holder's expiry) or the wait is
/// spent — no polling, so an acquisition after a wait costs two calls, acquire and release.
///
/// Cheap to create and to clone (it holds the namespace binding only): make one per request.
/// Its error type is the JS exception the RPC call raised; with feature `worker`, keel-lock's
/// errors convert into `worker::Error`, so `?` works in a workers-rs handler.
///
/// ```no_run
/// # #[cfg(all(feature = "worker", target_arch = "wasm32"))]
/// # mod example {
/// use keel_lock::worker::DurableObjectLockStore;
/// use keel_lock::AcquireOptions;
/// use worker::{event, Context, Env, Request, Response, Result};
///
/// #[event(fetch)]
/// async fn fetch(_req: Request, env: Env, _ctx: Context) -> Result<Response> {
///     let locks = DurableObjectLockStore::from_env(&env, "LOCKS")?;
///     let lock = locks.lock("invoice:42", 30_000)?;
///     // The task gets the hold's fencing token: hand it to whatever the work writes to.
///     match lock.run(AcquireOptions::immediately(), |held| charge_invoice(42, held.fence)).await? {
///         Some(receipt) => Response::ok(receipt),
///         None => Response::error("someone else is charging invoice 42", 409),
///     }
/// }
/// # async fn charge_invoice(_id: u32, _fence: Option<keel_lock::Fence>) -> String { String::new() }
/// # }
/// # fn main() {}
/// ```
///
/// The parts, for a lock built by hand or with another runtime:
///
/// ```no_run
/// # #[cfg(all(feature = "worker", target_arch = "wasm32"))]
/// # async fn handler(env: worker::Env) -> worker::Result<()> {
/// use keel_lock::worker::{DurableObjectLockStore, WorkersRuntime};
/// use keel_lock::{AcquireOptions, Key, Lock, Ttl};
///
/// let store = DurableObjectLockStore::new(env.durable_object("LOCKS")?);
/// let lock = Lock::new(Key::new("invoice:42")?, Ttl::from_ms(30_000)?, store, WorkersRuntime);
/// // Wait up to 10 s for the holder, trying again every 25 ms.
/// let options = AcquireOptions { timeout_ms: 10_000, retry_delay_ms: 25 };
/// if lock.acquire(options).await? {
///     // … the work, then:
///     lock.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DurableObjectLockStore {
    namespace: JsValue,
    /// `namespace.idFromName` and `namespace.get`, looked up once rather than per call.
    id_from_name: Function,
    get: Function,
}

/// A [`Lock`] over a [`DurableObjectLockStore`], as [`DurableObjectLockStore::lock`] makes it.
pub type DurableObjectLock = Lock<DurableObjectLockStore, WorkersRuntime>;

/// A [`MultiLock`] over a [`DurableObjectLockStore`], as [`DurableObjectLockStore::multi_lock`]
/// makes it.
pub type DurableObjectMultiLock = MultiLock<DurableObjectLockStore, WorkersRuntime>;

fn method(target: &JsValue, name: &str) -> Result<Function, JsValue> {
    Reflect::get(target, &JsValue::from_str(name))?
        .dyn_into::<Function>()
        .map_err(|_| {
            type_error(
                [
                    "DurableObjectLockStore needs a Durable Object namespace binding (env.LOCKS) bound to LockDurableObject; it has no ",
                    name,
                    "()",
                ]
                .concat(),
            )
        })
}

#[wasm_bindgen(module = "/src/worker/stub.js")]
extern "C" {
    /// `stub[name](...args)`: one import for every method, rather than one per method (see
    /// `src/worker/stub.js`).
    #[wasm_bindgen(catch, variadic, js_name = rpc)]
    fn call_stub(stub: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue>;
}

/// The object method an RPC call names.
#[derive(Clone, Copy)]
enum Rpc {
    Acquire,
    AcquireOrWait,
    AcquireShared,
    AcquireSharedOrWait,
    Withdraw,
    Release,
    ForceRelease,
    Extend,
    IsLocked,
    RemainingTime,
    Inspect,
}

impl Rpc {
    fn name(self) -> &'static str {
        match self {
            Rpc::Acquire => "acquire",
            Rpc::AcquireOrWait => "acquireOrWait",
            Rpc::AcquireShared => "acquireShared",
            Rpc::AcquireSharedOrWait => "acquireSharedOrWait",
            Rpc::Withdraw => "withdraw",
            Rpc::Release => "release",
            Rpc::ForceRelease => "forceRelease",
            Rpc::Extend => "extend",
            Rpc::IsLocked => "isLocked",
            Rpc::RemainingTime => "remainingTime",
            Rpc::Inspect => "inspect",
        }
    }

    /// How many arguments the method takes, the key first (the acquiring ones one more when
    /// they carry metadata).
    fn arity(self) -> usize {
        match self {
            Rpc::ForceRelease | Rpc::IsLocked | Rpc::RemainingTime | Rpc::Inspect => 1,
            Rpc::Withdraw | Rpc::Release => 2,
            Rpc::Acquire | Rpc::Extend => 3,
            Rpc::AcquireOrWait => 4,
            Rpc::AcquireShared => 5,
            Rpc::AcquireSharedOrWait => 6,
        }
    }

    /// How answer errors name the object's method.
    fn method(self) -> &'static str {
        match self {
            Rpc::Acquire => "LockDurableObject.acquire()",
            Rpc::AcquireOrWait => "LockDurableObject.acquireOrWait()",
            Rpc::AcquireShared => "LockDurableObject.acquireShared()",
            Rpc::AcquireSharedOrWait => "LockDurableObject.acquireSharedOrWait()",
            Rpc::Withdraw => "LockDurableObject.withdraw()",
            Rpc::Release => "LockDurableObject.release()",
            Rpc::ForceRelease => "LockDurableObject.forceRelease()",
            Rpc::Extend => "LockDurableObject.extend()",
            Rpc::IsLocked => "LockDurableObject.isLocked()",
            Rpc::RemainingTime => "LockDurableObject.remainingTime()",
            Rpc::Inspect => "LockDurableObject.inspect()",
        }
    }
}

impl DurableObjectLockStore {
    /// A store over a workers-rs namespace binding (`env.durable_object("LOCKS")?`).
    #[cfg(feature = "worker")]
    pub fn new(namespace: worker::ObjectNamespace) -> Self {
        let namespace: JsValue = namespace.into();
        // A workers-rs binding always has both; were one missing, the call through it would
        // fail with a JS TypeError, not a panic.
        let lookup = |name: &str| -> Function {
            Reflect::get(&namespace, &JsValue::from_str(name))
                .unwrap_or(JsValue::UNDEFINED)
                .unchecked_into()
        };
        let (id_from_name, get) = (lookup("idFromName"), lookup("get"));
        DurableObjectLockStore {
            namespace,
            id_from_name,
            get,
        }
    }

    /// A store over the Worker's Durable Object binding named `binding` (`"LOCKS"` for a
    /// `[[durable_objects.bindings]] name = "LOCKS"` entry in `wrangler.toml`).
    #[cfg(feature = "worker")]
    pub fn from_env(env: &worker::Env, binding: &str) -> worker::Result<Self> {
        Ok(Self::new(env.durable_object(binding)?))
    }

    /// A lock on `key`, held for `ttl_ms` once acquired, over this store with the Workers
    /// clock and timer ([`WorkersRuntime`]) — `lock(key, ttlMs)` of the JS API. Fails on an
    /// empty key, one over 512 bytes, or a TTL outside `1..=2^31-1` ms.
    pub fn lock(&self, key: impl AsRef<str>, ttl_ms: u64) -> Result<DurableObjectLock, InputError> {
        Ok(Lock::new(
            Key::new(key)?,
            Ttl::from_ms(ttl_ms)?,
            self.clone(),
            WorkersRuntime,
        ))
    }

    /// A lock on every key of `keys` at once — all held or none, taken in sorted order so
    /// overlapping sets never deadlock — each held for `ttl_ms` once acquired, over this store
    /// with the Workers clock and timer. Each key lives in its own object and keeps its own
    /// fence ([`MultiLock::fences`]). Fails on a bad key or TTL (as [`Self::lock`]), and on no
    /// keys, more than 64 or a key given twice ([`InputError::InvalidKeySet`]).
    ///
    /// ```no_run
    /// # #[cfg(all(feature = "worker", target_arch = "wasm32"))]
    /// # async fn handler(env: worker::Env) -> worker::Result<()> {
    /// use keel_lock::worker::DurableObjectLockStore;
    /// use keel_lock::AcquireOptions;
    ///
    /// let locks = DurableObjectLockStore::from_env(&env, "LOCKS")?;
    /// let both = locks.multi_lock(["account:2", "account:1"], 30_000)?;
    /// let options = AcquireOptions { timeout_ms: 10_000, retry_delay_ms: 25 };
    /// both.run(options, |_held| async {
    ///     // `both.fences()`: each account's fence, for the writes to that account.
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<K: AsRef<str>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        ttl_ms: u64,
    ) -> Result<DurableObjectMultiLock, InputError> {
        let keys = keys
            .into_iter()
            .map(Key::new)
            .collect::<Result<Vec<_>, _>>()?;
        MultiLock::new(keys, Ttl::from_ms(ttl_ms)?, self.clone(), WorkersRuntime)
    }

    /// A store over a namespace binding given as a JS value; a `TypeError` when it is not one.
    pub fn from_js(namespace: JsValue) -> Result<Self, JsValue> {
        if !namespace.is_object() {
            return Err(type_error(
                [
                    "DurableObjectLockStore needs a Durable Object namespace binding (env.LOCKS), got ",
                    &describe(&namespace),
                ]
                .concat(),
            ));
        }
        let id_from_name = method(&namespace, "idFromName")?;
        let get = method(&namespace, "get")?;
        Ok(DurableObjectLockStore {
            namespace,
            id_from_name,
            get,
        })
    }

    /// The stub of the object that owns `key` (given as the JS string).
    fn stub(&self, key: &JsValue) -> Result<JsValue, JsValue> {
        let id = self.id_from_name.call1(&self.namespace, key)?;
        self.get.call1(&self.namespace, &id)
    }

    /// Sends the RPC call `rpc` with `args` to the object of the key, which every call has as
    /// its first argument; answers the stub and the call's answer.
    fn send(&self, rpc: Rpc, args: &[JsValue]) -> Result<(JsValue, JsValue), JsValue> {
        let says = matches!(
            rpc,
            Rpc::Acquire | Rpc::AcquireOrWait | Rpc::AcquireShared | Rpc::AcquireSharedOrWait
        );
        let arity = args.len() == rpc.arity() || (says && args.len() == rpc.arity() + 1);
        let (Some(k), true) = (args.first(), arity) else {
            return Err(type_error([rpc.method(), ": wrong arguments"].concat()));
        };
        let stub = self.stub(k)?;
        let answer = call_stub(&stub, rpc.name(), args);
        // A stub without the method (a namespace bound to some other class) says so.
        let answer = answer.map_err(|e| method(&stub, rpc.name()).err().unwrap_or(e))?;
        Ok((stub, answer))
    }

    /// One RPC call: `stub[rpc](...args)`, awaited.
    async fn call(&self, rpc: Rpc, args: &[JsValue]) -> Result<JsValue, JsValue> {
        let (_, answer) = self.send(rpc, args)?;
        settled(&answer).await
    }

    /// An acquiring RPC call, awaited; a grant it answers after the caller gave up on it is
    /// released (the object may grant a call whose caller has stopped listening).
    async fn call_acquiring(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rpc: Rpc,
        args: &[JsValue],
    ) -> Result<JsValue, JsValue> {
        let (stub, answer) = self.send(rpc, args)?;
        grant_answer(answer, &stub, key.as_str(), owner.as_str()).await
    }

    async fn boolean(&self, rpc: Rpc, args: &[JsValue]) -> Result<bool, JsValue> {
        let answer = self.call(rpc, args).await?;
        answers::boolean(rpc.method(), &answer)
    }

    /// One waiting call — `acquireOrWait`, or `acquireSharedOrWait` for a share — open while
    /// the caller waits in the key's one queue; when it fails, plain attempts every
    /// `wait.poll_ms` until the wait is spent (see `poll_after_failed_wait`). One body for both
    /// kinds, so the wasm has one such future rather than one per kind.
    /// `said` is the hold's metadata (a JS string), sent as the call's last argument.
    async fn wait_in_queue(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        wait: Wait,
        said: Option<JsValue>,
    ) -> Result<SharedGrant, JsValue> {
        let started = WorkersRuntime.now_ms();
        let w = JsValue::from_f64(wait.wait_ms as f64);
        let (rpc, args, n) = acquiring_args(key, owner, ttl, holding, Some(w), said.clone());
        match self.call_acquiring(key, owner, rpc, first(&args, n)).await {
            Ok(answer) => match holding {
                Holding::Exclusive => answers::waited(rpc.method(), &answer).map(Into::into),
                Holding::Shared(_) => answers::shared(rpc.method(), &answer, true),
            },
            Err(failure) => {
                let wait = (wait, started);
                self.poll_after_failed_wait(key, owner, ttl, holding, wait, said, failure)
                    .await
            }
        }
    }

    /// One plain acquiring call — `acquire`, or `acquireShared` for a share — carrying `said`
    /// (the hold's metadata) when there is some.
    async fn take(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        said: Option<JsValue>,
    ) -> Result<SharedGrant, JsValue> {
        let (rpc, args, n) = acquiring_args(key, owner, ttl, holding, None, said);
        let answer = self
            .call_acquiring(key, owner, rpc, first(&args, n))
            .await?;
        match holding {
            Holding::Exclusive => answers::acquire(rpc.method(), &answer).map(Into::into),
            Holding::Shared(_) => answers::shared(rpc.method(), &answer, false),
        }
    }

    /// The safety net of [`LockStore::acquire_or_wait`] when the waiting call failed — most
    /// likely the object was restarted or evicted, and its in-memory queue went with it. The
    /// object may have recorded a grant to `owner` before failing, so that is released first
    /// (no hold is left that nobody knows of); then plain acquires every `poll_ms` until the
    /// wait that began at `started` is spent. A plain acquire never overtakes callers queued
    /// in the restarted object, and never yields a second holder. A shared hold polls
    /// `acquireShared` the same way; a limit mismatch ends it at once. Each attempt carries
    /// `said`, as the waiting call did.
    #[allow(clippy::too_many_arguments)]
    async fn poll_after_failed_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        (wait, started): (Wait, u64),
        said: Option<JsValue>,
        failure: JsValue,
    ) -> Result<SharedGrant, JsValue> {
        if self.release(key, owner).await.is_err() {
            return Err(failure);
        }
        let give_up_at = started.saturating_add(wait.wait_ms);
        loop {
            let sent = WorkersRuntime.now_ms();
            let answer = self.take(key, owner, ttl, holding, said.clone()).await?;
            match answer {
                // The TTL ran from no earlier than this attempt was sent.
                SharedGrant::Granted(grant) => {
                    return Ok(SharedGrant::Granted(
                        grant.waited(sent.saturating_sub(started)),
                    ))
                }
                SharedGrant::Busy => {}
                other => return Ok(other),
            }
            let now = WorkersRuntime.now_ms();
            if now >= give_up_at {
                return Ok(SharedGrant::Busy);
            }
            let pause = wait.poll_ms.max(1).min(give_up_at - now);
            WorkersRuntime.sleep(pause).await;
        }
    }
}

/// A share's terms as RPC arguments: weight, limit.
fn terms(share: Share) -> [JsValue; 2] {
    [
        JsValue::from_f64(share.weight().into()),
        JsValue::from_f64(share.limit().into()),
    ]
}

fn args3(key: &Key, owner: &OwnerToken, ttl: Ttl) -> [JsValue; 3] {
    [
        key.as_str().into(),
        owner.as_str().into(),
        JsValue::from_f64(ttl.as_ms() as f64),
    ]
}

/// An acquiring call and its arguments, of which the first `n` are sent: `acquire` or
/// `acquireShared` (the share's terms after the TTL), their waiting forms when `wait` (the
/// `waitMs` argument) is given, and `said` last when there is some.
fn acquiring_args(
    key: &Key,
    owner: &OwnerToken,
    ttl: Ttl,
    holding: Holding,
    wait: Option<JsValue>,
    said: Option<JsValue>,
) -> (Rpc, [JsValue; 7], usize) {
    let [k, o, t] = args3(key, owner, ttl);
    let mut args = [
        k,
        o,
        t,
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
        JsValue::UNDEFINED,
    ];
    let mut n = 3;
    let rpc = match holding {
        Holding::Exclusive if wait.is_some() => Rpc::AcquireOrWait,
        Holding::Exclusive => Rpc::Acquire,
        Holding::Shared(share) => {
            [args[3], args[4]] = terms(share);
            n = 5;
            match wait {
                Some(_) => Rpc::AcquireSharedOrWait,
                None => Rpc::AcquireShared,
            }
        }
    };
    for extra in [wait, said].into_iter().flatten() {
        args[n] = extra;
        n += 1;
    }
    (rpc, args, n)
}

/// The first `n` of `args` (all of them if there are fewer: [`DurableObjectLockStore::send`]
/// then refuses the call), without a bounds check's panic path.
fn first(args: &[JsValue], n: usize) -> &[JsValue] {
    args.get(..n).unwrap_or(args)
}

/// The metadata `owner` carries, as an acquiring call's last argument.
fn said(owner: &OwnerToken) -> Option<JsValue> {
    owner.metadata().map(JsValue::from_str)
}

impl LockStore for DurableObjectLockStore {
    type Error = JsValue;

    fn name(&self) -> &'static str {
        "durable-object"
    }

    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, JsValue> {
        let answer = self.take(key, owner, ttl, Holding::Exclusive, said(owner));
        Ok(match answer.await? {
            SharedGrant::Granted(grant) => Some(grant),
            _ => None,
        })
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, JsValue> {
        let args = [key.as_str().into(), owner.as_str().into()];
        self.boolean(Rpc::Release, &args).await
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, JsValue> {
        self.boolean(Rpc::Extend, &args3(key, owner, ttl)).await
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, JsValue> {
        self.boolean(Rpc::IsLocked, &[key.as_str().into()]).await
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, JsValue> {
        let answer = self
            .call(Rpc::RemainingTime, &[key.as_str().into()])
            .await?;
        answers::remaining_time(Rpc::RemainingTime.method(), &answer)
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn hands_over_shared(&self) -> bool {
        true
    }

    /// One `acquireShared` call: the object judges the share against the key's live holds.
    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, JsValue> {
        let holding = Holding::Shared(share);
        self.take(key, owner, ttl, holding, said(owner)).await
    }

    /// One `acquireSharedOrWait` call, open while the caller waits in the key's one queue; when
    /// that call fails, plain `acquireShared` calls every `wait.poll_ms` until the wait is
    /// spent, as for a lock.
    async fn acquire_shared_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Wait,
    ) -> Result<SharedGrant, JsValue> {
        let holding = Holding::Shared(share);
        self.wait_in_queue(key, owner, ttl, holding, wait, said(owner))
            .await
    }

    /// One `acquireOrWait` call, open while the caller waits in the object's queue. When that
    /// call fails, plain acquires every `wait.poll_ms` until the wait is spent (see
    /// `DurableObjectLockStore::poll_after_failed_wait`).
    async fn acquire_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait: Wait,
    ) -> Result<Option<Grant>, JsValue> {
        let answer = self.wait_in_queue(key, owner, ttl, Holding::Exclusive, wait, said(owner));
        Ok(match answer.await? {
            SharedGrant::Granted(grant) => Some(grant),
            _ => None,
        })
    }

    /// The object keeps each hold's metadata with its row (the owner token carries it here).
    fn keeps_metadata(&self) -> bool {
        true
    }

    /// One `inspect` call, answered in one synchronous turn of the key's object.
    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, JsValue> {
        let answer = self.call(Rpc::Inspect, &[key.as_str().into()]).await?;
        answers::inspect(Rpc::Inspect.method(), &answer).map(Some)
    }

    async fn force_release(&self, key: &Key) -> Result<ForceRelease, JsValue> {
        let freed = self
            .boolean(Rpc::ForceRelease, &[key.as_str().into()])
            .await?;
        Ok(match freed {
            true => ForceRelease::Freed,
            false => ForceRelease::WasFree,
        })
    }

    /// One `withdraw` call: the object drops `owner` from the queue or releases its grant.
    /// When that call fails (the object restarted, and its queue is gone), a release.
    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), JsValue> {
        let args = [key.as_str().into(), owner.as_str().into()];
        match self.call(Rpc::Withdraw, &args).await {
            Ok(answer) => answers::boolean(Rpc::Withdraw.method(), &answer).map(drop),
            Err(failure) => self
                .release(key, owner)
                .await
                .map(drop)
                .map_err(|_| failure),
        }
    }
}
