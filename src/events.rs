//! Lock events: what a run, an acquire, a release and an extend came to, told to a listener as
//! they happen — for logs, metrics and traces. The vocabulary is the JS face's
//! (`onLockEvent`): attempted, granted (with how long it waited and how the grant came),
//! refused, timed out, aborted, failed, released, release refused, extended, lost.
//!
//! A listener is set per lock ([`crate::Lock::with_events`], [`crate::MultiLock::with_events`]),
//! as its store and runtime are given to it; one listener can be shared by every lock (it is an
//! [`Rc`]). A lock without one tells nothing and does no work for it: one `Option` check per
//! call, no allocation, no clock read. Times come from the lock's [`crate::Runtime`]
//! (its monotonic clock), like every other time the core keeps.
//!
//! Builds with `std` only: the npm package's wasm (no `std`) leaves lock events to the JS face.
//!
//! ```
//! use std::cell::RefCell;
//! use std::rc::Rc;
//! use keel_lock::events::{GrantVia, LockEventKind, LockEventListener};
//! use keel_lock::{AcquireOptions, Key, Lock, MemoryLockStore, Ttl};
//! use keel_lock::virtual_time::VirtualRuntime;
//!
//! let rt = VirtualRuntime::new();
//! let store = MemoryLockStore::new(rt.clone());
//! let told = Rc::new(RefCell::new(Vec::new()));
//! let sink = told.clone();
//! let listener: LockEventListener = Rc::new(move |event| sink.borrow_mut().push(event.kind));
//! let lock = Lock::new(Key::new("invoice:42")?, Ttl::default(), &store, rt.clone())
//!     .with_events(Some(listener));
//! rt.block_on(lock.run(AcquireOptions::default(), |_| async {}))?;
//! assert_eq!(
//!     *told.borrow(),
//!     [
//!         LockEventKind::Attempted { timeout_ms: 0 },
//!         LockEventKind::Granted { waited_ms: 0, via: GrantVia::Immediate },
//!         LockEventKind::Released { held_ms: Some(0), task_failed: false },
//!     ]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::rc::Rc;

use crate::error::{Error, Operation};
use crate::grant::Fence;
use crate::holding::LossReason;
use crate::input::Key;
use crate::share::Holding;

/// Called with every event of the locks it is set on, synchronously, as each happens. It must
/// not panic; it may call into other locks, but a call into the lock that is telling it waits
/// for nothing (lock calls are async: the listener can only start them).
pub type LockEventListener = Rc<dyn Fn(&LockEvent<'_>)>;

/// One lock event: which lock, which call, and what happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockEvent<'a> {
    /// The key, or a [`crate::MultiLock`]'s keys in the order they are taken.
    pub keys: &'a [Key],
    /// The store's name ([`crate::LockStore::name`]).
    pub store: &'static str,
    /// How the lock takes its key: exclusive, or shared (a semaphore's permits, a read lock).
    pub holding: Holding,
    /// The lock call the event belongs to.
    pub call: Call,
    /// The hold's fence, for events about a hold whose store keeps fences (granted, released,
    /// release refused, extended, lost); `None` otherwise, and always for a multi-key lock
    /// (each key has its own: [`crate::MultiLock::fences`]).
    pub fence: Option<Fence>,
    /// What happened.
    pub kind: LockEventKind,
}

impl LockEvent<'_> {
    /// The key, for a single-key lock (the first key of a multi-key one).
    pub fn key(&self) -> &Key {
        &self.keys[0]
    }
}

/// The lock call an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Call {
    /// `run` and its variants: acquire, run the task, release.
    Run,
    /// `acquire` and `acquire_until`.
    Acquire,
    /// `release`.
    Release,
    /// `extend`.
    Extend,
    /// `keep_alive`: a hold watched outside `run`, as a run watches its own.
    KeepAlive,
}

/// How a grant came (the JS face's `via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrantVia {
    /// At the first request, without waiting.
    Immediate,
    /// The store queued the request and handed the key over when it was freed
    /// ([`crate::LockStore::hands_over`]).
    HandOver,
    /// After retrying: the lock polled a store that does not hand keys over.
    Poll,
}

/// What happened. The JS face's event `type` is given with each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockEventKind {
    /// A run or an acquire started (JS `run` / `acquire`). Every one ends in exactly one of
    /// [`Granted`](Self::Granted), [`Refused`](Self::Refused), [`TimedOut`](Self::TimedOut),
    /// [`Aborted`](Self::Aborted) or [`Failed`](Self::Failed).
    Attempted {
        /// How long it will wait for the key (0: only if free now).
        timeout_ms: u64,
    },
    /// The key is held (JS `granted`).
    Granted {
        /// From the call to the grant, on the runtime's monotonic clock.
        waited_ms: u64,
        /// How the grant came.
        via: GrantVia,
    },
    /// Someone else held the key and there was no timeout to wait (JS `refused`).
    Refused {
        /// From the call to the answer.
        waited_ms: u64,
    },
    /// The timeout was spent without a grant (JS `timed-out`).
    TimedOut {
        /// From the call to giving up.
        waited_ms: u64,
    },
    /// The caller's cancellation ended the wait; nothing is held (JS `aborted`).
    Aborted {
        /// From the call to the cancellation.
        waited_ms: u64,
    },
    /// The call failed (JS `error`): a store error or timeout, an unsupported operation, an
    /// extend of a hold that had already ended. A store error within a run's release is told
    /// this way too, with [`Call::Run`].
    Failed {
        /// What failed.
        error: ErrorKind,
        /// From the call to the failure, for a run or an acquire; `None` for the other calls.
        waited_ms: Option<u64>,
    },
    /// The hold was released (JS `released`): by a run once its task finished, or by
    /// `release`.
    Released {
        /// From the grant to the release's answer, for a run; `None` for `release`, which
        /// does not know when its hold was granted.
        held_ms: Option<u64>,
        /// The run's task failed (it was released all the same); always `false` for `release`.
        task_failed: bool,
    },
    /// The release was refused (JS `release-refused`): this handle no longer held the key —
    /// never acquired, already released, or expired (perhaps taken by someone else).
    ReleaseRefused,
    /// The hold's TTL was reset (JS `extended`).
    Extended,
    /// The hold was lost (JS `lost`): an extend refused by the store or made after the local
    /// deadline, or — while a run's task runs — found by the run's watcher.
    Lost {
        /// Why.
        reason: LossReason,
    },
}

/// A failure's kind: [`Error`] without the store's own error value (which the failing call
/// answers to its caller) and without the texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::Input`]: the caller passed something unusable.
    Input,
    /// [`Error::NotHeld`]: an extend of a hold this handle no longer had.
    NotHeld,
    /// [`Error::Store`]: the store failed during `operation`.
    Store {
        /// The store operation.
        operation: Operation,
    },
    /// [`Error::StoreTimeout`]: the store did not answer `operation` within `after_ms`.
    StoreTimeout {
        /// The store operation.
        operation: Operation,
        /// How long it was given.
        after_ms: u64,
    },
    /// [`Error::Unsupported`]: the store does not offer `operation`.
    Unsupported {
        /// The operation it lacks.
        operation: Operation,
    },
    /// [`Error::LimitMismatch`]: the key is held as a semaphore of another limit.
    LimitMismatch {
        /// The limit of the live holds.
        held: u32,
        /// The limit asked for.
        asked: u32,
    },
    /// [`Error::Aborted`].
    Aborted,
    /// [`Error::Random`]: no owner token could be minted.
    Random,
}

impl ErrorKind {
    /// The kind of `error`.
    pub fn of<E>(error: &Error<E>) -> Self {
        match error {
            Error::Input(_) => ErrorKind::Input,
            Error::NotHeld { .. } => ErrorKind::NotHeld,
            Error::Store { operation, .. } => ErrorKind::Store {
                operation: *operation,
            },
            Error::StoreTimeout {
                operation,
                after_ms,
                ..
            } => ErrorKind::StoreTimeout {
                operation: *operation,
                after_ms: *after_ms,
            },
            Error::Unsupported { operation, .. } => ErrorKind::Unsupported {
                operation: *operation,
            },
            Error::LimitMismatch { held, asked, .. } => ErrorKind::LimitMismatch {
                held: *held,
                asked: *asked,
            },
            Error::Aborted => ErrorKind::Aborted,
            Error::Random(_) => ErrorKind::Random,
        }
    }
}

/// How an acquisition's grant came, recorded by the acquire loop for the event that tells it.
pub(crate) struct Trace {
    via: Option<GrantVia>,
}

impl Trace {
    /// Nothing recorded yet: a grant now would be immediate.
    pub(crate) fn new() -> Self {
        Trace { via: None }
    }

    /// The loop paused before retrying.
    pub(crate) fn slept(&mut self) {
        self.via = Some(GrantVia::Poll);
    }

    /// A store that hands keys over answered after keeping the request waiting `waited_ms`.
    pub(crate) fn waited(&mut self, waited_ms: u64) {
        if waited_ms > 0 {
            self.via = Some(GrantVia::HandOver);
        }
    }

    /// How the grant came.
    pub(crate) fn via(&self) -> GrantVia {
        self.via.unwrap_or(GrantVia::Immediate)
    }
}
