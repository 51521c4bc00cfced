//! The store seam. A store is what makes a lock a lock: it must make `acquire` an atomic
//! set-if-absent and make `release`/`extend` conditional on the owner token. A store that
//! cannot do both is a suggestion, not a lock — the conformance kit (`conformance`, feature `testing`) checks for it.

use alloc::rc::Rc;
use alloc::vec::Vec;

use crate::grant::Grant;
use crate::input::{Key, Ttl};
use crate::inspect::LockInfo;
use crate::share::{Share, SharedGrant};
use crate::token::OwnerToken;

/// Where lock rows live. Implemented by [`crate::MemoryLockStore`], by the JS seam (any JS
/// object with the five methods), and by the distributed stores.
///
/// Futures are not `Send`: wasm is single-threaded and JS values are not `Send`.
///
/// Five operations, every one a single atomic step in the store. `acquire` answers a [`Grant`]
/// rather than a `bool` so that what a store knows about an acquisition (its fence) travels with
/// it; further capabilities arrive as provided methods with defaults, so existing stores keep
/// compiling and keep their meaning. ARCHITECTURE.md has the design.
///
/// The core bounds every call (see [`crate::Lock`]): it drops a future that has not completed
/// in time. A store whose call may still take effect after that (a request already sent) must
/// then undo a grant it answers late — release it — so that an abandoned acquire never leaves a
/// key held until its TTL. The JS seam and the Durable Object store do this for every JS store.
#[allow(async_fn_in_trait)]
pub trait LockStore {
    /// The store's own error, passed through to callers unchanged.
    type Error;

    /// A short name for error messages ("memory", "js", "durable-object", …).
    fn name(&self) -> &'static str;

    /// Atomically: if `key` is free (absent or expired), record `owner` as its holder for `ttl`
    /// and answer the [`Grant`]; otherwise change nothing and answer `None`.
    ///
    /// A store that keeps fences gives every grant a fence strictly greater than every fence it
    /// handed out before for `key`, across release, expiry and restarts (gaps allowed).
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Self::Error>;

    /// Atomically: if `owner` holds `key` (and it has not expired), free it and answer `true`;
    /// otherwise change nothing and answer `false`.
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Self::Error>;

    /// Atomically: if `owner` holds `key` (and it has not expired), set its expiry to `ttl` from
    /// now and answer `true`; otherwise change nothing and answer `false`.
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Self::Error>;

    /// Whether anyone holds `key` right now.
    async fn is_locked(&self, key: &Key) -> Result<bool, Self::Error>;

    /// Milliseconds until `key` expires, or `None` when nobody holds it.
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Self::Error>;

    /// Whether this store parks waiting callers and hands a freed key to the oldest of them
    /// ([`LockStore::acquire_or_wait`]). When it does not, the core polls `acquire` every
    /// retry delay instead.
    fn hands_over(&self) -> bool {
        false
    }

    /// Whether this store parks waiting shared requests too
    /// ([`LockStore::acquire_shared_or_wait`]); when it does not, a semaphore or read lock
    /// polls [`LockStore::acquire_shared`].
    fn hands_over_shared(&self) -> bool {
        false
    }

    /// Whether every call completes on its own, on time: an in-process store whose waits keep
    /// their own deadlines (the memory store). The core then sets no timer to bound its calls.
    fn always_answers(&self) -> bool {
        false
    }

    /// Acquire `key`, or join its queue of waiters and wait up to `wait.wait_ms` for the store
    /// to hand it over: on release, or when the holder's TTL passes, the store grants the key to
    /// the oldest waiter still waiting — no race against newcomers. Answers `None` when the wait
    /// is spent (and the caller is no longer queued); a `None` more than `wait.poll_ms` sooner
    /// (the store lost the caller's place) is asked again after that pause, for what is left.
    /// The grant reports how long it waited in the store ([`Grant::waited_ms`]).
    ///
    /// The default is one plain [`LockStore::acquire`], for stores that cannot wait.
    async fn acquire_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        wait: Wait,
    ) -> Result<Option<Grant>, Self::Error> {
        let _ = wait;
        self.acquire(key, owner, ttl).await
    }

    /// Whether this store keeps each hold's metadata — carried to it by the owner token of the
    /// acquiring call ([`OwnerToken::metadata`]), kept through `extend` and a hand-over,
    /// dropped with the hold — and answers [`LockStore::inspect`]. When it does not, the core
    /// refuses metadata ([`crate::Error::Unsupported`]) rather than let it be dropped.
    fn keeps_metadata(&self) -> bool {
        false
    }

    /// One atomic read of `key`: its live holds (metadata, fence, time left; never an owner
    /// token) and how many callers wait for it. `None`: the store cannot say (the default).
    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, Self::Error> {
        let _ = key;
        Ok(None)
    }

    /// Whether [`LockStore::acquire_many`] may take a set of keys in one step. When it does not,
    /// the core never calls it (and a build whose stores all answer `false` leaves the one-step
    /// path out).
    fn acquires_many(&self) -> bool {
        false
    }

    /// Atomically: if [`LockStore::acquire`] would grant every key of `keys` to the owner of
    /// `owners` at the same index at this instant, grant them all as it would (each drawing the
    /// key's next fence) and answer [`ManyGrant::All`] with one grant per key, in order;
    /// otherwise change nothing and answer [`ManyGrant::Refused`]. The keys are sorted and
    /// distinct, at most [`crate::MAX_KEYS`]; the owners distinct.
    ///
    /// The default answers [`ManyGrant::Unsupported`] — as does a store for a set it cannot take
    /// in one step (a Redis Cluster's keys in different slots), changing nothing — and the core
    /// then takes the keys one at a time. Shared holds always go one key at a time.
    async fn acquire_many(
        &self,
        keys: &[Key],
        owners: &[OwnerToken],
        ttl: Ttl,
    ) -> Result<ManyGrant, Self::Error> {
        let _ = (keys, owners, ttl);
        Ok(ManyGrant::Unsupported)
    }

    /// Frees `key` whoever holds it: for operators clearing a stuck lock. Dangerous — the holder
    /// keeps working until its next extend is refused. The default answers
    /// [`ForceRelease::Unsupported`].
    async fn force_release(&self, key: &Key) -> Result<ForceRelease, Self::Error> {
        let _ = key;
        Ok(ForceRelease::Unsupported)
    }

    /// Atomically: if a shared hold of `share.weight()` permits out of `share.limit()` fits on
    /// `key` ([`crate::share::fit`]: no live exclusive hold, the live shared holds under the same
    /// limit with room for it) and nobody is queued for the key, record `owner`'s hold for `ttl`
    /// and answer it [`SharedGrant::Granted`] with the key's next fence. Live holds under another
    /// limit answer [`SharedGrant::LimitMismatch`]. `release`, `extend` and `withdraw` then act on
    /// this owner's hold alone; `is_locked` sees any live hold, `remaining_time` the last to
    /// expire. An exclusive `acquire` must be refused while any shared hold is live.
    ///
    /// The default answers [`SharedGrant::Unsupported`]: a store that keeps no shared holds never
    /// grants one as a lock.
    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, Self::Error> {
        let _ = (key, owner, ttl, share);
        Ok(SharedGrant::Unsupported)
    }

    /// [`LockStore::acquire_shared`], or join the key's one FIFO queue (exclusive and shared
    /// waiters alike) and wait up to `wait.wait_ms`: a hand-over grants the front waiters in
    /// order while each fits and stops at the first that does not. The default is one
    /// [`LockStore::acquire_shared`].
    async fn acquire_shared_or_wait(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        wait: Wait,
    ) -> Result<SharedGrant, Self::Error> {
        let _ = wait;
        self.acquire_shared(key, owner, ttl, share).await
    }

    /// The caller with `owner` stopped waiting for `key` (it gave up or was aborted): leave the
    /// queue, and if the store already handed `key` to `owner`, release it. Afterwards `owner`
    /// neither holds `key` nor waits for it. The default releases.
    async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), Self::Error> {
        self.release(key, owner).await.map(drop)
    }
}

/// What [`LockStore::acquire_many`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManyGrant {
    /// Every key granted: one grant per key, in the order of the keys.
    All(Vec<Grant>),
    /// Some key was not free; nothing changed.
    Refused,
    /// The store cannot take this set in one step; nothing changed.
    Unsupported,
}

/// What [`LockStore::force_release`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceRelease {
    /// The key was held, and is now free (or handed to its next waiter).
    Freed,
    /// Nobody held the key.
    WasFree,
    /// This store cannot free a key regardless of its holder.
    Unsupported,
}

/// How long a caller will wait for a store to hand it a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The most the caller will wait, in ms.
    pub wait_ms: u64,
    /// How often a store that is told about hand-overs should look again anyway, in case a
    /// notification was lost: the caller's retry delay.
    pub poll_ms: u64,
}

macro_rules! forward_store {
    ($($ptr:ty),*) => {$(
        impl<S: LockStore + ?Sized> LockStore for $ptr {
            type Error = S::Error;
            fn name(&self) -> &'static str {
                (**self).name()
            }
            async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<Option<Grant>, S::Error> {
                (**self).acquire(key, owner, ttl).await
            }
            async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, S::Error> {
                (**self).release(key, owner).await
            }
            async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, S::Error> {
                (**self).extend(key, owner, ttl).await
            }
            async fn is_locked(&self, key: &Key) -> Result<bool, S::Error> {
                (**self).is_locked(key).await
            }
            async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, S::Error> {
                (**self).remaining_time(key).await
            }
            fn always_answers(&self) -> bool {
                (**self).always_answers()
            }
            fn hands_over(&self) -> bool {
                (**self).hands_over()
            }
            fn hands_over_shared(&self) -> bool {
                (**self).hands_over_shared()
            }
            async fn acquire_or_wait(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, wait: Wait) -> Result<Option<Grant>, S::Error> {
                (**self).acquire_or_wait(key, owner, ttl, wait).await
            }
            async fn withdraw(&self, key: &Key, owner: &OwnerToken) -> Result<(), S::Error> {
                (**self).withdraw(key, owner).await
            }
            async fn force_release(&self, key: &Key) -> Result<ForceRelease, S::Error> {
                (**self).force_release(key).await
            }
            fn acquires_many(&self) -> bool {
                (**self).acquires_many()
            }
            fn keeps_metadata(&self) -> bool {
                (**self).keeps_metadata()
            }
            async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, S::Error> {
                (**self).inspect(key).await
            }
            async fn acquire_many(&self, keys: &[Key], owners: &[OwnerToken], ttl: Ttl) -> Result<ManyGrant, S::Error> {
                (**self).acquire_many(keys, owners, ttl).await
            }
            async fn acquire_shared(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, share: Share) -> Result<SharedGrant, S::Error> {
                (**self).acquire_shared(key, owner, ttl, share).await
            }
            async fn acquire_shared_or_wait(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, share: Share, wait: Wait) -> Result<SharedGrant, S::Error> {
                (**self).acquire_shared_or_wait(key, owner, ttl, share, wait).await
            }
        }
    )*};
}

forward_store!(&S, Rc<S>);
