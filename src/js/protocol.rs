//! Every number the JS face (`src/js/*.js`) and the wasm's numeric exports exchange, in one
//! place. A hot call answers a plain `f64` (a step code, a fence, a time) rather than a JS
//! value, and what a step carries besides its code is read by JS from wasm memory (`OUT_*`).
//! `src/js/protocol.js` declares the ones the JS files use, by the same names, in its block marked
//! `protocol (src/js/protocol.rs)`; `tests/js_protocol.rs` checks the two agree, name for name.
//!
//! Conventions outside the table: `NaN` passed in means "not given" (a `timeout`, a
//! `retryDelay`, a clock not read); a fence ≥ 1 answered by a step means "held, with this
//! fence"; slot ids are `generation · 2^24 + index + 1` (`handle/slots.rs`), never 0 (0 is
//! "no slot").
//!
//! This file holds constants only, so that the test can compile it on its own.

// ---- Step codes: what a run's or an acquire's step answers -------------------------------

/// Not acquired; or (ending a hold) the store refused the release: the hold was lost.
pub const REFUSED: f64 = 0.0;
/// Acquired, from a store without fences (a fenced hold answers its fence, ≥ 1).
pub const HELD_UNFENCED: f64 = -1.0;
/// Make the store call the step is about, bounded by `arg` ms.
pub const CALL: f64 = -2.0;
/// Pause `arg` ms, then retry.
pub const SLEEP: f64 = -3.0;
/// The store call went unanswered for `arg` ms: a `LockStoreTimeoutError`.
pub const TIMED_OUT: f64 = -4.0;
/// (From `__kCheck`) the key must be judged as the JS string it is, not from its cached bytes.
pub const CHECK_KEY_AS_STRING: f64 = -5.0;
/// (Memory store) queued for the key, or still queued; JS steps again (`__kPoll`) when woken, or
/// after `arg` ms when that is not -1.
pub const STILL_QUEUED: f64 = -7.0;
/// Call the JS store's `acquireOrWait`, bounded by `arg` ms; its `waitMs` and `pollMs` are
/// `OUT_WAIT_MS` and `OUT_POLL_MS`.
pub const CALL_ACQUIRE_OR_WAIT: f64 = -8.0;
/// The call failed: `__kError` has the JS error to throw.
pub const FAILED: f64 = -100.0;

// ---- Ending a hold, and what became of the handle's slot -------------------------------
// One vocabulary for both: a release answers REFUSED, RELEASED (the handle keeps its slot),
// CLOSED or SPARED (released, and the now idle handle let go of its slot); `__kClose` answers
// KEPT, CLOSED or SPARED.

/// The hold was released; the handle keeps its slot.
pub const RELEASED: f64 = 1.0;
/// The handle keeps its slot (it is not idle).
pub const KEPT: f64 = 0.0;
/// The handle let go of its slot, which closed.
pub const CLOSED: f64 = 3.0;
/// The handle let go of its slot, idle, which is now the spare (the next handle on the same
/// key, TTL and store takes it as it is).
pub const SPARED: f64 = 4.0;

// ---- Store operations, as the exports number them ----------------------------------------

/// The store's `acquire`.
pub const OP_ACQUIRE: u32 = 0;
/// The store's `release`.
pub const OP_RELEASE: u32 = 1;
/// The store's `extend`.
pub const OP_EXTEND: u32 = 2;
/// The store's `isLocked`.
pub const OP_IS_LOCKED: u32 = 3;
/// The store's `remainingTime`.
pub const OP_REMAINING_TIME: u32 = 4;
/// The store's `forceRelease`.
pub const OP_FORCE_RELEASE: u32 = 5;
/// The store's `acquireShared` (`__kMemoryCall` only: a limit mismatch answers the held limit
/// as a number, which JS makes `{ heldLimit }`).
pub const OP_ACQUIRE_SHARED: u32 = 6;
/// The memory store's `inspect` (`__kMemoryCall` only: answers `[fence, ms left, …]` for the
/// live holds, a fence of 0 for none, which JS joins with the metadata and waiters it keeps).
pub const OP_INSPECT: u32 = 7;

// ---- A JS store's acquire answer, as JS hands it in (`__kAnswered`) -----------------------

/// It answered `false`.
pub const ANSWER_FALSE: u32 = 0;
/// It answered `true` (granted, no fence).
pub const ANSWER_TRUE: u32 = 1;
/// It answered `{ fence }` with a number; the fence is passed along.
pub const ANSWER_FENCE: u32 = 2;

// ---- Answers of the other operations -------------------------------------------------------

/// `extend()` succeeded.
pub const EXTENDED: f64 = 1.0;
/// `isLocked()` / `forceRelease()`: yes (someone holds it / someone did).
pub const YES: f64 = 1.0;
/// `isLocked()` / `forceRelease()`: no.
pub const NO: f64 = 0.0;
/// `getRemainingTime()`: nobody holds the key (`null`).
pub const NOBODY: f64 = -1.0;

/// `__kNotHeld`: the `LockNotHeldError` of an `extend()` on a handle holding nothing.
pub const NOT_HELD_EXTEND: u32 = 0;
/// `__kNotHeld`: the `LockNotHeldError` of a `serialize()` on a handle holding nothing.
pub const NOT_HELD_SERIALIZE: u32 = 1;

// ---- A hold's watcher (`watching.rs`) ------------------------------------------------------

/// The watch is over and the watcher gone; `arg` is why (`LOST_*`).
pub const WATCH_LOST: f64 = 0.0;
/// Extend the hold (`__kWatchExtend`), then report (`__kWatchExtended`).
pub const WATCH_EXTEND: f64 = -2.0;
/// Look again (`__kWatchNext`) after `arg` ms.
pub const WATCH_SLEEP: f64 = -3.0;
/// Why a watch ended: its holder released it, or the watcher was stopped — nothing to tell.
pub const LOST_NOTHING: u32 = 0;
/// Why a hold was lost: its TTL passed without a successful extend.
pub const LOST_EXPIRED: u32 = 1;
/// Why a hold was lost: the store no longer records it (an extend was refused).
pub const LOST_REFUSED: u32 = 2;
/// Why a hold was lost: its maximum hold time (`maxHoldMs`) was reached.
pub const LOST_HOLD_CAP: u32 = 3;

// ---- OUT: what a step hands JS besides its code, read from wasm memory ---------------------

/// How many numbers `OUT` holds.
pub const OUT_LEN: usize = 5;
/// The number the step carries: a bound, a pause, a fence, a loss reason.
pub const OUT_ARG: usize = 0;
/// The address of the owner token the step's store call carries.
pub const OUT_OWNER_AT: usize = 1;
/// Its length in bytes; anything but `MINTED_TOKEN_LEN` means "ask `__kOwner`".
pub const OUT_OWNER_LEN: usize = 2;
/// An extend's TTL; a wait's `waitMs`.
pub const OUT_TTL: usize = 3;
/// An extend's id (the answer is recorded against it); a wait's `pollMs`.
pub const OUT_EXTEND_ID: usize = 4;
/// A wait's `waitMs` (the same number as `OUT_TTL`).
pub const OUT_WAIT_MS: usize = OUT_TTL;
/// A wait's `pollMs` (the same number as `OUT_EXTEND_ID`).
pub const OUT_POLL_MS: usize = OUT_EXTEND_ID;
/// The length of every minted owner token: 32 ASCII bytes, read by JS straight from memory.
pub const MINTED_TOKEN_LEN: usize = 32;

/// Every name above as `protocol.js` spells it, with its value, for `tests/js_protocol.rs` (the
/// only reader).
#[allow(dead_code)]
pub const TABLE: &[(&str, f64)] = &[
    ("REFUSED", REFUSED),
    ("HELD_UNFENCED", HELD_UNFENCED),
    ("CALL", CALL),
    ("SLEEP", SLEEP),
    ("TIMED_OUT", TIMED_OUT),
    ("CHECK_KEY_AS_STRING", CHECK_KEY_AS_STRING),
    ("STILL_QUEUED", STILL_QUEUED),
    ("CALL_ACQUIRE_OR_WAIT", CALL_ACQUIRE_OR_WAIT),
    ("FAILED", FAILED),
    ("RELEASED", RELEASED),
    ("KEPT", KEPT),
    ("CLOSED", CLOSED),
    ("SPARED", SPARED),
    ("OP_ACQUIRE", OP_ACQUIRE as f64),
    ("OP_RELEASE", OP_RELEASE as f64),
    ("OP_EXTEND", OP_EXTEND as f64),
    ("OP_IS_LOCKED", OP_IS_LOCKED as f64),
    ("OP_REMAINING_TIME", OP_REMAINING_TIME as f64),
    ("OP_FORCE_RELEASE", OP_FORCE_RELEASE as f64),
    ("OP_ACQUIRE_SHARED", OP_ACQUIRE_SHARED as f64),
    ("OP_INSPECT", OP_INSPECT as f64),
    ("ANSWER_FALSE", ANSWER_FALSE as f64),
    ("ANSWER_TRUE", ANSWER_TRUE as f64),
    ("ANSWER_FENCE", ANSWER_FENCE as f64),
    ("EXTENDED", EXTENDED),
    ("YES", YES),
    ("NO", NO),
    ("NOBODY", NOBODY),
    ("NOT_HELD_EXTEND", NOT_HELD_EXTEND as f64),
    ("NOT_HELD_SERIALIZE", NOT_HELD_SERIALIZE as f64),
    ("WATCH_LOST", WATCH_LOST),
    ("WATCH_EXTEND", WATCH_EXTEND),
    ("WATCH_SLEEP", WATCH_SLEEP),
    ("LOST_NOTHING", LOST_NOTHING as f64),
    ("LOST_EXPIRED", LOST_EXPIRED as f64),
    ("LOST_REFUSED", LOST_REFUSED as f64),
    ("LOST_HOLD_CAP", LOST_HOLD_CAP as f64),
    ("OUT_LEN", OUT_LEN as f64),
    ("OUT_ARG", OUT_ARG as f64),
    ("OUT_OWNER_AT", OUT_OWNER_AT as f64),
    ("OUT_OWNER_LEN", OUT_OWNER_LEN as f64),
    ("OUT_TTL", OUT_TTL as f64),
    ("OUT_EXTEND_ID", OUT_EXTEND_ID as f64),
    ("OUT_WAIT_MS", OUT_WAIT_MS as f64),
    ("OUT_POLL_MS", OUT_POLL_MS as f64),
    ("MINTED_TOKEN_LEN", MINTED_TOKEN_LEN as f64),
];
