//! The store seam. A store is what makes a lock a lock: it must make `acquire` an atomic
//! set-if-absent and make `release`/`extend` conditional on the owner token. A store that
//! cannot do both is a suggestion, not a lock — [`crate::conformance`] checks for it.

use std::rc::Rc;

use crate::grant::Grant;
use crate::input::{Key, Ttl};
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
        }
    )*};
}

forward_store!(&S, Rc<S>);
