//! Errors. Input mistakes, a lost lock and a failing store are different things to a caller,
//! so they are different variants, each carrying what is needed to say what went wrong.

use std::fmt;

use crate::input::ShowNumber;

/// The store operation an error happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `acquire(key, owner, ttl)`: atomic set-if-absent.
    Acquire,
    /// `release(key, owner)`: compare-owner-and-delete.
    Release,
    /// `extend(key, owner, ttl)`: compare-owner-and-reset-expiry.
    Extend,
    /// `isLocked(key)`.
    IsLocked,
    /// `remainingTime(key)`.
    RemainingTime,
}

impl Operation {
    /// The method name as the JS store seam spells it.
    pub fn js_name(self) -> &'static str {
        match self {
            Operation::Acquire => "acquire",
            Operation::Release => "release",
            Operation::Extend => "extend",
            Operation::IsLocked => "isLocked",
            Operation::RemainingTime => "remainingTime",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.js_name())
    }
}

/// A value a caller passed that the lock cannot work with. Never a panic: bindings turn these
/// into `TypeError`/`RangeError` for JS and into a WIT error variant for components.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The key is the empty string.
    #[error("lock key must be a non-empty string")]
    EmptyKey,
    /// The key is longer than [`crate::input::MAX_KEY_BYTES`] bytes of UTF-8.
    #[error("lock key is {len} bytes of UTF-8; the limit is {max}")]
    KeyTooLong {
        /// Length of the key that was given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A TTL that is not a finite number of milliseconds in `1..=MAX_TTL_MS`.
    #[error("ttlMs must be a finite number of milliseconds between 1 and {max}, got {}", ShowNumber(*.value))]
    InvalidTtl {
        /// The value that was given.
        value: f64,
        /// The largest TTL accepted.
        max: u64,
    },
    /// A negative or non-finite wait option (`timeout`, `retryDelay`).
    #[error("{option} must be a finite number of milliseconds between 0 and {max}, got {}", ShowNumber(*.value))]
    InvalidWait {
        /// Which option: `timeout` or `retryDelay`.
        option: &'static str,
        /// The value that was given.
        value: f64,
        /// The largest value accepted.
        max: u64,
    },
    /// An owner token that is empty, too long or not printable ASCII.
    #[error("owner token must be 1 to {max} printable ASCII characters")]
    InvalidOwner {
        /// The longest token accepted.
        max: usize,
    },
    /// A string given to `restoreLock` that `serialize()` did not produce.
    #[error("not a serialized keel-lock: {reason}")]
    MalformedSerializedLock {
        /// What is wrong with it.
        reason: String,
    },
    /// A serialized lock from a format version this build does not read.
    #[error("serialized lock has format version {found}; this build reads version {supported}")]
    UnsupportedSerializedVersion {
        /// The version found in the string.
        found: String,
        /// The version this build reads.
        supported: u32,
    },
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
    #[error("lock \"{key}\" is not held by this handle ({operation})")]
    NotHeld {
        /// The key of the lock.
        key: String,
        /// What was attempted.
        operation: &'static str,
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
    /// The platform's random number generator failed, so no owner token could be minted.
    #[error("could not draw an owner token from the platform CSPRNG: {0}")]
    Random(getrandom::Error),
}
