//! The store seam. A store is what makes a lock a lock: it must make `acquire` an atomic
//! set-if-absent and make `release`/`extend` conditional on the owner token. A store that
//! cannot do both is a suggestion, not a lock — [`crate::conformance`] checks for it.

use std::rc::Rc;

use crate::input::{Key, Ttl};
use crate::token::OwnerToken;

/// Where lock rows live. Implemented by [`crate::MemoryLockStore`], by the JS seam (any JS
/// object with the five methods), and by the distributed stores.
///
/// Futures are not `Send`: wasm is single-threaded and JS values are not `Send`.
///
/// Evolution: new capabilities (a fencing token returned by acquire, a store-side blocking
/// wait instead of polling) will arrive as provided methods with default implementations, so
/// stores written against this trait, and the five-method JS seam, keep working unchanged.
#[allow(async_fn_in_trait)]
pub trait LockStore {
    /// The store's own error, passed through to callers unchanged.
    type Error;

    /// A short name for error messages ("memory", "js", "durable-object", …).
    fn name(&self) -> &'static str;

    /// Atomically: if `key` is free (absent or expired), record `owner` as its holder for `ttl`
    /// and answer `true`; otherwise change nothing and answer `false`.
    async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Self::Error>;

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
            async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, S::Error> {
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
