//! Errors. Input mistakes, a lost lock and a failing store are different things to a caller,
//! so they are different variants, each carrying what is needed to say what went wrong.

use crate::prelude::*;
use core::fmt;

pub use crate::input::InputError;

/// The store operation an error happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `acquire(key, owner, ttl)`: atomic set-if-absent.
    Acquire,
    /// `release(key, owner)`: compare-owner-and-delete.
    Release,
    /// `extend(key, owner, ttl)`: compare-owner-and-reset-expiry.
    Extend,
    /// `is_locked(key)`: is anyone holding it?
    IsLocked,
    /// `remaining_time(key)`: ms until the hold expires.
    RemainingTime,
    /// `force_release(key)`: free the key whoever holds it.
    ForceRelease,
    /// `acquire_shared(key, owner, ttl, share)`: take permits or a read lock.
    AcquireShared,
    /// `inspect(key)`: the key's live holds and waiters.
    Inspect,
    /// Keeping a hold's metadata (`keeps_metadata`).
    Metadata,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Acquire => "acquire",
            Operation::Release => "release",
            Operation::Extend => "extend",
            Operation::IsLocked => "is_locked",
            Operation::RemainingTime => "remaining_time",
            Operation::ForceRelease => "force_release",
            Operation::AcquireShared => "acquire_shared",
            Operation::Inspect => "inspect",
            Operation::Metadata => "hold metadata",
        })
    }
}

/// Everything a lock operation can fail with. `E` is the store's own error type, carried
/// unchanged so that, for example, a JS store's rejection reaches the JS caller as the same object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error<E> {
    /// The caller passed something unusable.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `extend()` (or `serialize()`) on a lock this handle does not hold: never acquired,
    /// released, or lost to expiry and possibly taken by someone else.
    #[error("lock \"{key}\" is not held by this handle ({attempted})")]
    NotHeld {
        /// The key of the lock.
        key: String,
        /// What was attempted.
        attempted: HoldOperation,
    },
    /// The store failed (threw, rejected, lost its connection, answered nonsense).
    #[error("{store} store failed during {operation}")]
    Store {
        /// The store's name, from [`crate::LockStore::name`].
        store: &'static str,
        /// The operation that failed.
        operation: Operation,
        /// The store's own error, unchanged.
        error: E,
    },
    /// The store did not answer within `after_ms`, so the call was abandoned. Its outcome is
    /// unknown; a grant it makes later is released (see [`crate::LockStore`]). An acquire that
    /// waits with a timeout is never failed this way: it answers `false` when the timeout is
    /// spent.
    #[error("{store} store did not answer {operation} of \"{key}\" within {after_ms} ms")]
    StoreTimeout {
        /// The key of the lock.
        key: String,
        /// The store's name, from [`crate::LockStore::name`].
        store: &'static str,
        /// The operation that went unanswered.
        operation: Operation,
        /// How long the call was given.
        after_ms: u64,
    },
    /// The store does not offer the operation (e.g. `force_release`).
    #[error("the {store} store does not support {operation}")]
    Unsupported {
        /// The store's name, from [`crate::LockStore::name`].
        store: &'static str,
        /// The operation it lacks.
        operation: Operation,
    },
    /// The key's live shared holds are under another limit: `semaphore(key, asked)` while
    /// holders of `semaphore(key, held)` are live. Never granted: "at most N" would mean two
    /// things at once.
    #[error("\"{key}\" is held as a semaphore of {held} permits; asked for one of {asked}")]
    LimitMismatch {
        /// The key.
        key: String,
        /// The limit of the live holds.
        held: u32,
        /// The limit asked for.
        asked: u32,
    },
    /// The caller gave up waiting (its cancellation completed, e.g. an `AbortSignal` fired).
    /// Nothing is held or queued on its behalf.
    #[error("acquire was aborted")]
    Aborted,
    /// The platform's random number generator failed, so no owner token could be minted.
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// What needed a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldOperation {
    /// `extend()`.
    Extend,
    /// `serialize()`.
    Serialize,
}

impl fmt::Display for HoldOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HoldOperation::Extend => "extend",
            HoldOperation::Serialize => "serialize",
        })
    }
}

/// The platform's random number generator failed. Opaque: which generator a platform uses is
/// not part of this crate's API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("could not draw an owner token from the platform CSPRNG: {0}")]
pub struct RandomError(pub(crate) String);

impl RandomError {
    /// In a JS host getrandom's one failure is `crypto.getRandomValues` missing or throwing;
    /// named here rather than through getrandom's `Display`, which would link `core::fmt`
    /// into the wasm builds.
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    pub(crate) fn from_getrandom(_: getrandom::Error) -> Self {
        RandomError("Web Crypto API is unavailable".into())
    }

    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub(crate) fn from_getrandom(e: getrandom::Error) -> Self {
        RandomError(e.to_string())
    }

    /// The `Display` text, built without `core::fmt`.
    pub fn message(&self) -> String {
        [
            "could not draw an owner token from the platform CSPRNG: ",
            &self.0,
        ]
        .concat()
    }
}
