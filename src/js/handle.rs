//! The numeric face of the binding, for the JS `Lock` class (`src/js/api.js`). A lock handle in
//! JS is a plain object; while it acquires, holds or releases, its core lock lives here in a
//! slot named by a number. Every decision is the core's — the acquisition machine
//! ([`crate::attempt`]), the memory store, the hold's bookkeeping — and what crosses is numbers
//! and the key string: the JS side only awaits the store's promises and keeps the timers
//! ("call the store", "sleep", "done" come back as step codes).
//!
//! Step codes (the `f64` answers): [`REFUSED`]; a fence ≥ 1 or [`HELD_UNFENCED`] (held);
//! [`CALL`] (make the store call the step is about, bounded by `arg` ms); [`CALL_WAIT`] (the
//! same with a JS store's `acquireOrWait`); [`SLEEP`] (`arg` ms, then [`retry`]);
//! [`TIMED_OUT`] (the call went unanswered for `arg` ms); [`QUEUE`] (the memory store queues
//! the caller: [`wait`]) and [`PENDING`] (still queued); [`FAILED`] (the error is [`error`]).
//! `arg` is the first number JS reads from the step's numbers in wasm memory ([`out`]).
//! Ending a hold answers [`RELEASED`], [`RELEASED_CLOSED`], [`RELEASED_SPARED`] or [`REFUSED`]
//! (lost), or [`CALL`].
//!
//! Nothing here may panic on input: ids that name no slot (or a slot since reused) are
//! `TypeError`s, and no borrow is held while JS code (a clock that user code replaced, a
//! store) could run.

use crate::prelude::*;
use alloc::rc::Rc;
use alloc::sync::Arc;
use alloc::task::Wake;
use core::cell::{Cell, RefCell};
use core::task::Waker;

use wasm_bindgen::prelude::*;

use super::convert::{input_to_js, to_js, type_error};
use super::lock::CoreLock;
use super::runtime::JsRuntime;
use super::store::{answers, Backend};
use crate::attempt::{Attempt, Next};
use crate::error::Error;
use crate::grant::Grant;
use crate::input::{AcquireOptions, Key, Ttl};
use crate::lock::{Lock, TrackedHold};
use crate::memory::{MemoryLockStore, Parked, WaitStep};
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// Not acquired; or (release) the store refused: the hold was lost.
pub const REFUSED: f64 = 0.0;
/// Acquired, from a store without fences (a fenced hold answers its fence).
pub const HELD_UNFENCED: f64 = -1.0;
/// Make the store call; its bound in ms is `arg`.
pub const CALL: f64 = -2.0;
/// Pause `arg` ms, then [`retry`].
pub const SLEEP: f64 = -3.0;
/// The store call went unanswered for `arg` ms: a `LockStoreTimeoutError`.
pub const TIMED_OUT: f64 = -4.0;
/// (From [`check`]) a key that must be judged as the JS string it is.
pub const SLOW: f64 = -5.0;
/// (Memory store) queue for the key: call [`wait`].
pub const QUEUE: f64 = -6.0;
/// (Memory store) waiting in the key's queue; JS polls again when woken.
pub const PENDING: f64 = -7.0;
/// Call the JS store's `acquireOrWait` (it queues the caller and hands the key over), bounded
/// by `arg` ms; its `waitMs` and `pollMs` are the step's fourth and fifth numbers.
pub const CALL_WAIT: f64 = -8.0;
/// (Ending a run) released.
pub const RELEASED: f64 = 1.0;
/// (Ending a run) released, and the now idle handle let go of its slot, which closed.
pub const RELEASED_CLOSED: f64 = 3.0;
/// (Ending a run) released, and the now idle handle let go of its slot, now the spare.
pub const RELEASED_SPARED: f64 = 4.0;
/// The call failed: [`error`] has the JS error to throw. (The hot calls answer a plain number
/// rather than a `Result`, which wasm-bindgen returns through memory.)
pub const FAILED: f64 = -100.0;

/// The store a handle is bound to, as created by `setLockStore` (or the default).
#[wasm_bindgen(js_name = StoreBinding, skip_typescript)]
pub struct StoreBinding {
    backend: Backend,
}

#[wasm_bindgen(js_class = StoreBinding)]
impl StoreBinding {
    /// The built-in memory store: every call answers at once, inside the wasm.
    #[wasm_bindgen(getter)]
    pub fn memory(&self) -> bool {
        matches!(self.backend, Backend::Memory(_))
    }
}

impl StoreBinding {
    pub(crate) fn new(backend: Backend) -> Self {
        StoreBinding { backend }
    }

    pub(super) fn backend(&self) -> &Backend {
        &self.backend
    }
}

struct Entry {
    lock: Rc<CoreLock>,
    /// The acquisition in flight (a JS store's call is being awaited).
    attempt: Option<Attempt>,
    /// The owner token of the hold the handle's current `run` took.
    run_owner: Option<OwnerToken>,
    /// The last hold a run of this slot took, tracked from then on for its watcher.
    run_hold: Option<TrackedHold>,
    /// The wait in the memory store's queue, while there is one.
    waiting: Option<Waiting>,
}

/// Slot ids are `generation · 2^24 + index + 1`: an id kept after its slot was closed names
/// nothing, even once the index is reused.
const INDEX_BITS: f64 = 16_777_216.0;

struct Slots {
    entries: Vec<(u32, Option<Entry>)>,
    free: Vec<usize>,
}

per_thread! {
    static SLOTS: RefCell<Slots> = const {
        RefCell::new(Slots { entries: Vec::new(), free: Vec::new() })
    };
    /// What a step hands JS besides its code, read by JS straight from wasm memory (no call):
    /// `[arg, owner address, owner length, ttl, ticket]`. The owner is the token the store
    /// call a [`CALL`] is about carries, when it is 32 ASCII bytes (every minted token);
    /// otherwise its length is -1 and JS asks [`owner`]. The address is valid until the next
    /// call into the wasm. The last two are an extend's (`operations.rs`).
    static OUT: [Cell<f64>; 5] = const { [Cell::new(0.0), Cell::new(0.0), Cell::new(0.0), Cell::new(0.0), Cell::new(0.0)] };
    static ERROR: RefCell<Option<JsValue>> = const { RefCell::new(None) };
    /// The text a call answers (see [`text`]), kept until the next one.
    static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
    /// The id of the spare: the last slot that went idle, kept open rather than closed (0:
    /// none). JS, which knows the key, TTL and store of the slot it let go, hands that very id
    /// to the next handle on the same — `lock(key).run(fn)` in a loop then allocates nothing,
    /// passes no key and makes no call to reopen. A call that starts work on the spare's id
    /// ([`begin`], [`handle`]) takes it; the next slot to go idle closes a spare not taken.
    static SPARE: Cell<f64> = const { Cell::new(0.0) };
}

/// A hot call's answer: its number, or [`FAILED`] with the error kept for [`error`].
pub(super) fn plain(answer: Result<f64, JsValue>) -> f64 {
    match answer {
        Ok(value) => value,
        Err(error) => {
            ERROR.with(|e| *e.borrow_mut() = Some(error));
            FAILED
        }
    }
}

/// A call that answers nothing else: 0, or [`FAILED`] with the error kept for [`error`].
pub(super) fn done(answer: Result<(), JsValue>) -> f64 {
    plain(answer.map(|()| 0.0))
}

/// The error of the last call that answered [`FAILED`].
#[wasm_bindgen(js_name = __kError, skip_typescript)]
pub fn error() -> JsValue {
    ERROR
        .with(|e| e.borrow_mut().take())
        .unwrap_or_else(|| type_error("keel-lock: no error to report (internal error)"))
}

fn index_of(id: f64) -> Option<(usize, u32)> {
    if !(id >= 1.0 && crate::float::fract(id) == 0.0 && id <= 9_007_199_254_740_991.0) {
        return None;
    }
    let raw = id - 1.0;
    // `raw` is not negative, so its whole part rounds down.
    let generation = crate::float::trunc(raw / INDEX_BITS);
    let index = raw - generation * INDEX_BITS;
    Some((index as usize, generation as u32))
}

fn bad_id() -> JsValue {
    type_error("keel-lock: a lock handle's slot is gone (internal error)")
}

/// Runs `f` on the slot's entry, borrowed only for `f`'s duration: `f` must not call JS.
fn with_entry<T>(id: f64, f: impl FnOnce(&mut Entry) -> T) -> Result<T, JsValue> {
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let (index, generation) = index_of(id).ok_or_else(bad_id)?;
        match s.entries.get_mut(index) {
            Some((g, Some(entry))) if *g == generation => Ok(f(entry)),
            _ => Err(bad_id()),
        }
    })
}

pub(super) fn lock_of(id: f64) -> Result<Rc<CoreLock>, JsValue> {
    with_entry(id, |e| e.lock.clone())
}

/// The hold the slot's current `run` took, tracked since it was taken, if a run holds one.
pub(super) fn run_hold_of(id: f64) -> Result<Option<TrackedHold>, JsValue> {
    with_entry(id, |e| match (&e.run_owner, &e.run_hold) {
        (Some(owner), Some(hold)) if hold.owner() == owner => Some(hold.clone()),
        _ => None,
    })
}

pub(super) fn insert(lock: Rc<CoreLock>) -> f64 {
    let entry = Entry {
        lock,
        attempt: None,
        run_owner: None,
        run_hold: None,
        waiting: None,
    };
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let index = match s.free.pop() {
            Some(index) => {
                let slot = &mut s.entries[index];
                slot.0 = slot.0.wrapping_add(1) % (1 << 29);
                slot.1 = Some(entry);
                index
            }
            None => {
                s.entries.push((0, Some(entry)));
                s.entries.len() - 1
            }
        };
        let generation = s.entries[index].0;
        f64::from(generation) * INDEX_BITS + index as f64 + 1.0
    })
}

/// How many slots handles have open (for tests: an idle handle must not keep one). The spare
/// is no handle's.
#[wasm_bindgen(js_name = __kSlotsOpen, skip_typescript)]
pub fn slots_open() -> u32 {
    let spare = SPARE.with(Cell::get);
    SLOTS.with(|s| {
        let s = s.borrow();
        let open = s.entries.iter().filter(|(_, e)| e.is_some()).count() as u32;
        let spare_open = index_of(spare).is_some_and(|(index, generation)| {
            matches!(s.entries.get(index), Some((g, Some(_))) if *g == generation)
        });
        open - u32::from(spare_open)
    })
}

/// The wasm's memory and the address of the step's numbers (see `OUT`), for JS to read them.
#[wasm_bindgen(js_name = __kOut, skip_typescript)]
pub fn out() -> js_sys::Array {
    let at = OUT.with(|o| o.as_ptr() as usize);
    js_sys::Array::of2(&wasm_bindgen::memory(), &JsValue::from_f64(at as f64))
}

/// Sets the value a step code carries (a bound, a pause, a fence): JS reads it as `arg`.
pub(super) fn step(code: f64, value: f64) -> f64 {
    OUT.with(|o| o[0].set(value));
    code
}

/// Sets the fourth and fifth numbers a step carries (see `OUT`).
pub(super) fn set_extra(ttl: f64, ticket: f64) {
    OUT.with(|o| {
        o[3].set(ttl);
        o[4].set(ticket);
    });
}

/// A [`CALL`] about a store call made under `owner`, bounded by `bound_ms`.
pub(super) fn call(bound_ms: u64, owner: &OwnerToken) -> f64 {
    let token = owner.as_str();
    OUT.with(|o| {
        o[0].set(bound_ms as f64);
        if token.len() == 32 && token.is_ascii() {
            o[1].set(token.as_ptr() as usize as f64);
            o[2].set(32.0);
        } else {
            o[2].set(-1.0);
        }
    });
    CALL
}

/// A call's text answer: kept in `TEXT`, its address and UTF-8 length put where a [`CALL`]'s
/// owner goes in `OUT`, for JS to decode from memory; answers the length, or [`FAILED`].
/// (A `String` return would go through wasm-bindgen's shim and a copy into JS-owned memory.)
pub(super) fn text(answer: Result<String, JsValue>) -> f64 {
    let value = match answer {
        Ok(value) => value,
        Err(error) => return plain(Err(error)),
    };
    TEXT.with(|t| {
        let mut t = t.borrow_mut();
        *t = value;
        OUT.with(|o| {
            o[1].set(t.as_ptr() as usize as f64);
            o[2].set(t.len() as f64);
        });
        t.len() as f64
    })
}

/// A key and TTL checked as `lock()` checks them; answers the TTL in whole ms. `ttl` is `NaN`
/// for "not given" (a NaN the caller passed never gets here). A key with U+FFFD in it answers
/// [`SLOW`]: on the way in, a lone surrogate became U+FFFD, and only the JS string itself tells
/// one from the other (`lock()` then judges it as a value, which refuses lone surrogates) —
/// unless `well_formed`: JS found no lone surrogate in it, so every U+FFFD is the key's own.
#[wasm_bindgen(js_name = __kCheck, skip_typescript)]
pub fn check(key: &str, ttl: f64, well_formed: bool) -> f64 {
    // A byte scan: `str::contains` with a char pattern links a string searcher (9 KB raw).
    const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();
    if !well_formed && key.as_bytes().windows(3).any(|b| b == REPLACEMENT) {
        return SLOW;
    }
    plain(
        Key::check(key)
            .map_err(input_to_js)
            .and_then(|()| Ok(ttl_of(ttl)?.as_ms() as f64)),
    )
}

fn ttl_of(ttl: f64) -> Result<Ttl, JsValue> {
    match ttl.is_nan() {
        true => Ok(Ttl::default()),
        false => Ttl::from_f64(ttl).map_err(input_to_js),
    }
}

/// The store `lock()` binds to now.
#[wasm_bindgen(js_name = __kCurrent, skip_typescript)]
pub fn current() -> StoreBinding {
    StoreBinding::new(super::api::current_backend())
}

/// A slot for a handle on `key` (checked again) with `ttl` ms, bound to `store`.
#[wasm_bindgen(js_name = __kOpen, skip_typescript)]
pub fn open(key: &str, ttl: f64, store: &StoreBinding) -> f64 {
    plain((|| {
        let ttl = ttl_of(ttl)?;
        let key = Key::new(key).map_err(input_to_js)?;
        let lock = Lock::new(key, ttl, store.backend.clone(), JsRuntime);
        Ok(insert(Rc::new(lock)))
    })())
}

/// The spare is `id`'s from now on: it is no longer closed when another slot goes idle.
fn take_spare(id: f64) {
    SPARE.with(|s| {
        if s.get() == id {
            s.set(0.0);
        }
    });
}

/// Removes slot `id`'s entry, if `id` names one.
fn remove(id: f64) -> Option<Entry> {
    let (index, generation) = index_of(id)?;
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let entry = match s.entries.get_mut(index) {
            Some((g, entry @ Some(_))) if *g == generation => entry.take(),
            _ => return None,
        };
        s.free.push(index);
        entry
    })
}

/// The handle keeps its slot: it is not idle.
pub const KEPT: u32 = 0;
/// The handle let go of its slot, which closed.
pub const CLOSED: u32 = 1;
/// The handle let go of its slot, idle, which is now the spare.
pub const SPARED: u32 = 2;

/// Lets the handle go of its slot if it is idle (holds nothing, knows of no lost hold, acquires
/// nothing), or at once with `force` (the handle is gone). An idle slot whose core lock nothing
/// else shares stays open as the spare (see `SPARE`), closing the spare before it; any other
/// closes. Answers [`KEPT`], [`CLOSED`] or [`SPARED`].
#[wasm_bindgen(js_name = __kClose, skip_typescript)]
pub fn close(id: f64, force: bool) -> u32 {
    let Some((index, generation)) = index_of(id) else {
        return KEPT;
    };
    // None: the handle keeps the slot; Some(keep): it lets go, and the slot stays as the spare.
    let keep = SLOTS.with(|s| match s.borrow().entries.get(index) {
        Some((g, Some(e))) if *g == generation => {
            let idle = e.attempt.is_none()
                && e.waiting.is_none()
                && e.run_owner.is_none()
                && e.lock.is_idle();
            (force || idle).then(|| !force && Rc::strong_count(&e.lock) == 1)
        }
        _ => None,
    });
    let Some(keep) = keep else { return KEPT };
    let closed = if keep {
        let previous = SPARE.with(|s| s.replace(id));
        (previous != id).then(|| remove(previous)).flatten()
    } else {
        take_spare(id);
        remove(id)
    };
    // Dropped with no borrow held: dropping a core lock may drop JS values.
    drop(closed);
    if keep {
        SPARED
    } else {
        CLOSED
    }
}

/// The owner token of the acquisition in flight, or else of the run's hold.
/// (A [`text`] answer.)
#[wasm_bindgen(js_name = __kOwner, skip_typescript)]
pub fn owner(id: f64) -> f64 {
    text(with_entry(id, |e| match (&e.attempt, &e.run_owner) {
        (Some(a), _) => a.owner().as_str().to_owned(),
        (None, Some(o)) => o.as_str().to_owned(),
        (None, None) => e
            .lock
            .owner()
            .map(|o| o.as_str().to_owned())
            .unwrap_or_default(),
    }))
}

/// Starts a run's acquisition: `timeout`/`retryDelay` in ms, `NaN` for "not given"; `now` is
/// the monotonic clock as [`JsRuntime`] reads it (`performance.now()`), read by JS.
#[wasm_bindgen(js_name = __kBegin, skip_typescript)]
pub fn begin(id: f64, timeout: f64, retry_delay: f64, now: f64) -> f64 {
    take_spare(id);
    plain(start(id, timeout, retry_delay, mono(now)))
}

fn start(id: f64, timeout: f64, retry_delay: f64, mono: u64) -> Result<f64, JsValue> {
    let given = |v: f64| (!v.is_nan()).then_some(v);
    let options =
        AcquireOptions::from_f64(given(timeout), given(retry_delay)).map_err(input_to_js)?;
    let lock = lock_of(id)?;
    let (attempt, next) = Attempt::start(options, lock.ttl(), lock.store().hands_over(), mono)
        .map_err(|e| to_js(Error::from(e)))?;
    drive(id, &lock, attempt, next, mono)
}

/// Carries a step out: a memory store's calls are made here and now, anything else goes back to
/// JS as a step code (the attempt kept in the slot until the answer comes).
fn drive(
    id: f64,
    lock: &CoreLock,
    mut attempt: Attempt,
    mut next: Next,
    mono: u64,
) -> Result<f64, JsValue> {
    loop {
        next = match (next, lock.store()) {
            (Next::Held, _) => {
                let held = attempt.into_hold();
                let fence = held.as_ref().and_then(|h| h.fence);
                if let Some(held) = held {
                    let owner = held.owner.clone();
                    lock.take_hold(held);
                    with_entry(id, |e| {
                        let spent = e.run_hold.take();
                        e.run_hold = Some(lock.track_reusing(&owner, spent));
                        e.run_owner = Some(owner);
                    })?;
                }
                return Ok(fence.map_or(HELD_UNFENCED, |f| f.get() as f64));
            }
            (Next::Refused, _) => return Ok(step(REFUSED, 0.0)),
            (Next::TimedOut { after_ms }, _) => return Ok(step(TIMED_OUT, after_ms as f64)),
            (Next::Acquire { .. }, Backend::Memory(m)) => {
                let grant = m.acquire_at(lock.key(), attempt.owner(), lock.ttl(), mono);
                attempt.answered(grant, mono)
            }
            (Next::AcquireOrWait { .. }, Backend::Memory(m)) => {
                // The store's wait starts with this very take; only a caller that must queue
                // waits (`__kWait`).
                match m.acquire_at(lock.key(), attempt.owner(), lock.ttl(), mono) {
                    Some(grant) => attempt.answered(Some(grant), mono),
                    None => {
                        with_entry(id, |e| e.attempt = Some(attempt))?;
                        return Ok(step(QUEUE, 0.0));
                    }
                }
            }
            (Next::AcquireOrWait { wait, bound_ms }, Backend::Js(_)) => {
                call(bound_ms, attempt.owner());
                set_extra(wait.wait_ms as f64, wait.poll_ms as f64);
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(CALL_WAIT);
            }
            (Next::Acquire { bound_ms }, Backend::Js(_)) => {
                let code = call(bound_ms, attempt.owner());
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(code);
            }
            (Next::Sleep { ms }, _) => {
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(step(SLEEP, ms as f64));
            }
        };
    }
}

fn take_attempt(id: f64) -> Result<(Rc<CoreLock>, Attempt), JsValue> {
    let (lock, attempt) = with_entry(id, |e| (e.lock.clone(), e.attempt.take()))?;
    Ok((lock, attempt.ok_or_else(bad_id)?))
}

const ACQUIRE_ANSWER: &str = "lock store's acquire()";

/// A JS store's answer to the acquire in flight, already told apart by type: `kind` 0 is
/// `false`, 1 `true`, 2 an object whose `fence` is the number `fence` (and which has no
/// `waitedMs`). Any other answer goes to [`answered_value`].
#[wasm_bindgen(js_name = __kAnswered, skip_typescript)]
pub fn answered(id: f64, kind: u32, fence: f64) -> f64 {
    let grant = match kind {
        0 => Ok(None),
        1 => Ok(Some(Grant::unfenced())),
        _ => answers::fenced(ACQUIRE_ANSWER, fence),
    };
    plain(settle_answer(id, grant))
}

/// A JS store's answer to the acquire in flight, judged by the seam's rules.
#[wasm_bindgen(js_name = __kAnsweredValue, skip_typescript)]
pub fn answered_value(id: f64, value: JsValue) -> f64 {
    plain(settle_answer(id, answers::acquire(ACQUIRE_ANSWER, &value)))
}

/// A JS store's answer to the `acquireOrWait` in flight (not a boolean: those go to
/// [`answered`]), judged by the seam's rules.
#[wasm_bindgen(js_name = __kAnsweredWaited, skip_typescript)]
pub fn answered_waited(id: f64, value: JsValue) -> f64 {
    plain(settle_answer(
        id,
        answers::waited("lock store's acquireOrWait()", &value),
    ))
}

/// Feeds a judged answer to the acquisition; one outside the contract ends it.
fn settle_answer(id: f64, grant: Result<Option<Grant>, JsValue>) -> Result<f64, JsValue> {
    match grant {
        Ok(grant) => answer(id, grant),
        Err(error) => {
            with_entry(id, |e| e.attempt = None)?;
            Err(error)
        }
    }
}

fn answer(id: f64, grant: Option<Grant>) -> Result<f64, JsValue> {
    let (lock, mut attempt) = take_attempt(id)?;
    // Only a refusal is judged by the clock (pause or give up?).
    let mono = match grant {
        Some(_) => 0,
        None => JsRuntime.monotonic_ms(),
    };
    let next = attempt.answered(grant, mono);
    drive(id, &lock, attempt, next, mono)
}

/// The acquire in flight went unanswered for its bound (JS drops it and releases a late grant).
#[wasm_bindgen(js_name = __kUnanswered, skip_typescript)]
pub fn unanswered(id: f64) -> f64 {
    plain((|| {
        let (lock, mut attempt) = take_attempt(id)?;
        let mono = JsRuntime.monotonic_ms();
        let next = attempt
            .unanswered(mono)
            .map_err(|e| to_js(Error::from(e)))?;
        drive(id, &lock, attempt, next, mono)
    })())
}

/// The pause is over: the next attempt.
#[wasm_bindgen(js_name = __kRetry, skip_typescript)]
pub fn retry(id: f64) -> f64 {
    plain((|| {
        let (lock, mut attempt) = take_attempt(id)?;
        let mono = JsRuntime.monotonic_ms();
        let next = attempt.retry(mono);
        drive(id, &lock, attempt, next, mono)
    })())
}

/// A caller's wait in the memory store's queue, stepped from JS; it leaves the queue when
/// dropped, however the wait ended (a grant that arrived unclaimed is released).
struct Waiting {
    store: Rc<MemoryLockStore<JsRuntime>>,
    parked: Parked,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.store.leave(&self.parked);
    }
}

/// Wakes a waiting slot by telling JS (`wakeWaiter`), which steps it ([`poll_wait`]) in a
/// microtask and, once it is over, calls the caller's `fn` right there: a hand-over costs one
/// microtask, as it does for a promise-queue mutex.
struct WaiterWaker(f64);

impl Wake for WaiterWaker {
    fn wake(self: Arc<Self>) {
        wake_waiter(self.0);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        wake_waiter(self.0);
    }
}

#[wasm_bindgen(module = "/src/js/api.js")]
extern "C" {
    #[wasm_bindgen(js_name = wakeWaiter)]
    fn wake_waiter(id: f64);
}

/// Joins the memory store's queue for the key, after [`QUEUE`], and steps once: [`PENDING`],
/// or the step that follows (see [`poll_wait`]).
#[wasm_bindgen(js_name = __kWait, skip_typescript)]
pub fn wait(id: f64) -> f64 {
    plain((|| {
        let (lock, terms) = with_entry(id, |e| {
            let terms = e
                .attempt
                .as_ref()
                .and_then(|a| Some((a.wait()?, a.owner().clone())));
            (e.lock.clone(), terms)
        })?;
        let (Backend::Memory(store), Some((wait, owner))) = (lock.store(), terms) else {
            return Err(bad_id());
        };
        // `begin` was refused this very turn: straight into the queue, without taking again.
        let mono = JsRuntime.monotonic_ms();
        let Some(parked) = store.join(lock.key(), &owner, lock.ttl(), wait.wait_ms, mono) else {
            return answered_wait(id, None);
        };
        let waiting = Waiting {
            store: store.clone(),
            parked,
        };
        with_entry(id, |e| e.waiting = Some(waiting))?;
        poll_slot(id)
    })())
}

/// Steps the slot's wait (see [`wait`]): [`PENDING`] — JS steps it again when `wakeWaiter`
/// names the slot or, when `arg` is not -1, after `arg` ms (replacing any timer it set before)
/// — or the step that follows. A wake that comes after the wait ended answers [`PENDING`]
/// with no timer; JS ignores it.
#[wasm_bindgen(js_name = __kPoll, skip_typescript)]
pub fn poll_wait(id: f64) -> f64 {
    plain(poll_slot(id))
}

fn poll_slot(id: f64) -> Result<f64, JsValue> {
    let Ok(Some(waiting)) = with_entry(id, |e| e.waiting.take()) else {
        return Ok(step(PENDING, -1.0));
    };
    // Stepped with the slot not borrowed: a hand-over wakes other waiters.
    let mono = JsRuntime.monotonic_ms();
    match waiting.store.wait_step(&waiting.parked, mono) {
        WaitStep::Park { until } => {
            waiting
                .parked
                .listen(Waker::from(Arc::new(WaiterWaker(id))));
            with_entry(id, |e| e.waiting = Some(waiting))?;
            let ms = until.map_or(-1.0, |at| at.saturating_sub(mono).max(1) as f64);
            Ok(step(PENDING, ms))
        }
        WaitStep::Done(grant) => {
            drop(waiting);
            answered_wait(id, grant)
        }
    }
}

/// The wait ended with `grant` (`None`: it ran out): the acquisition's next step.
fn answered_wait(id: f64, grant: Option<Grant>) -> Result<f64, JsValue> {
    let (lock, mut attempt) = take_attempt(id)?;
    let mono = JsRuntime.monotonic_ms();
    let next = attempt.answered(grant, mono);
    drive(id, &lock, attempt, next, mono)
}

/// The acquisition in flight ended without an answer to feed (the store failed).
#[wasm_bindgen(js_name = __kAbandon, skip_typescript)]
pub fn abandon(id: f64) -> f64 {
    done(with_entry(id, |e| e.attempt = None))
}

/// The caller's abort signal fired while it waited: it stops waiting. On the memory store it
/// leaves the key's queue here (a grant that raced the abort is released) and this answers
/// [`REFUSED`]; on a JS store this answers [`CALL`] — JS calls the store's `withdraw(key,
/// owner)` (or, without one, `release`), bounded by `arg` ms.
#[wasm_bindgen(js_name = __kWithdraw, skip_typescript)]
pub fn withdraw(id: f64) -> f64 {
    plain((|| {
        let (lock, attempt, waiting) =
            with_entry(id, |e| (e.lock.clone(), e.attempt.take(), e.waiting.take()))?;
        // Dropped with no borrow held: leaving the queue may hand the key to the next waiter.
        drop(waiting);
        Ok(match (lock.store(), attempt) {
            (Backend::Js(_), Some(attempt)) => call(lock.ttl().as_ms(), attempt.owner()),
            _ => REFUSED,
        })
    })())
}

/// The error of run or acquire options (`run`: `run()`'s, which add `autoExtend`) that JS does
/// not drive itself — `autoExtend` checked first, then `timeout` and `retryDelay`, then
/// `signal` — or `undefined` when they are good.
#[wasm_bindgen(js_name = __kOptionsError, skip_typescript)]
pub fn options_error(options: JsValue, run: bool) -> JsValue {
    let checked = (|| -> Result<(), JsValue> {
        if run && options.is_object() {
            super::convert::keep_alive_option(&super::convert::get_prop!(&options, "autoExtend")?)?;
        }
        super::convert::acquire_options(&options)?;
        super::abort::check_signal(&options)?;
        Ok(())
    })();
    checked.err().unwrap_or(JsValue::UNDEFINED)
}

/// The `TypeError` for a `run(fn)` whose `fn` is `value`, not a function.
#[wasm_bindgen(js_name = __kNotAFunction, skip_typescript)]
pub fn not_a_function(value: JsValue) -> JsValue {
    type_error(
        [
            "run() needs a function, got ",
            &super::convert::describe(&value),
        ]
        .concat(),
    )
}

/// A second slot on slot `id`'s core lock, for an operation that starts while the handle is
/// busy with another (two runs of one handle at once, `release()` inside its own run).
#[wasm_bindgen(js_name = __kShare, skip_typescript)]
pub fn share(id: f64) -> f64 {
    plain(lock_of(id).map(insert))
}

/// The `LockStoreTimeoutError` for a call of `operation` (numbered as `operations.rs` numbers
/// them: 0 acquire, 1 release, …) unanswered for `after_ms` (a `TypeError` if `id` names no
/// slot).
#[wasm_bindgen(js_name = __kTimeoutError, skip_typescript)]
pub fn timeout_error(id: f64, operation: u32, after_ms: f64) -> JsValue {
    (|| {
        let operation =
            super::operations::operation(operation).ok_or_else(super::operations::bad_operation)?;
        let lock = lock_of(id)?;
        Ok(to_js(lock.store_timeout(operation, after_ms as u64)))
    })()
    .unwrap_or_else(|error: JsValue| error)
}

/// Ends the run's hold: on the memory store released here, at `now` ([`RELEASED`], or
/// [`RELEASED_CLOSED`] or [`RELEASED_SPARED`] when the now idle handle let go of its slot too;
/// [`REFUSED`]: the hold was lost); on a JS store [`CALL`]: JS calls `release(key, owner)`,
/// bounded by the TTL, and reports with [`released`]. Stops the run's watcher. `now` is the
/// monotonic clock read by JS for the memory store (`NaN`: not read; see [`mono`]).
#[wasm_bindgen(js_name = __kEnd, skip_typescript)]
pub fn end(id: f64, now: f64) -> f64 {
    plain(end_run(id, now))
}

/// The monotonic clock in whole ms: `now` as JS read it (`performance.now()`, as [`JsRuntime`]
/// reads it), or, for `NaN`, read here.
pub(super) fn mono(now: f64) -> u64 {
    if now.is_nan() {
        JsRuntime.monotonic_ms()
    } else {
        now as u64
    }
}

fn end_run(id: f64, now: f64) -> Result<f64, JsValue> {
    let (lock, owner) = with_entry(id, |e| (e.lock.clone(), e.run_owner.clone()))?;
    let Some(owner) = owner else {
        return Ok(step(REFUSED, 0.0));
    };
    match lock.store() {
        Backend::Memory(m) => {
            let released = m.release_at(lock.key(), &owner, mono(now));
            with_entry(id, |e| e.run_owner = None)?;
            Ok(hold_ended(id, lock, &owner, released))
        }
        Backend::Js(_) => {
            lock.releasing(&owner);
            Ok(call(lock.ttl().as_ms(), &owner))
        }
    }
}

/// The fence of the handle's hold, or `NaN` for none (nothing held, or a store without fences).
#[wasm_bindgen(js_name = __kFence, skip_typescript)]
pub fn fence(id: f64) -> f64 {
    lock_of(id)
        .ok()
        .and_then(|lock| lock.fence())
        .map_or(f64::NAN, |f| f.get() as f64)
}

/// Whether the handle held the key and lost it (see `Lock::is_expired`).
#[wasm_bindgen(js_name = __kExpired, skip_typescript)]
pub fn expired(id: f64) -> bool {
    lock_of(id).is_ok_and(|lock| lock.is_expired())
}

/// `acquire()` took the key: the hold is the handle's (its release is [`release`]'s), not a run's.
#[wasm_bindgen(js_name = __kKeep, skip_typescript)]
pub fn keep(id: f64) -> f64 {
    done(with_entry(id, |e| e.run_owner = None))
}

/// `release()`: ends the handle's hold as [`end`] ends a run's ([`REFUSED`] when it holds
/// nothing — never acquired, released, or known lost).
#[wasm_bindgen(js_name = __kRelease, skip_typescript)]
pub fn release(id: f64, now: f64) -> f64 {
    plain((|| {
        let owner = lock_of(id)?.owner();
        if owner.is_none() {
            return Ok(REFUSED);
        }
        with_entry(id, |e| e.run_owner = owner)?;
        end_run(id, now)
    })())
}

/// The hold under `owner` ended — `released`, or refused (it was lost) — and is recorded so;
/// a handle now idle lets go of its slot: [`RELEASED`], [`RELEASED_CLOSED`],
/// [`RELEASED_SPARED`] or [`REFUSED`].
fn hold_ended(id: f64, lock: Rc<CoreLock>, owner: &OwnerToken, released: bool) -> f64 {
    lock.released(owner, released);
    // Dropped first: an idle slot goes to the spare only when nothing else shares its lock.
    drop(lock);
    match (released, close(id, false)) {
        (false, _) => REFUSED,
        (true, KEPT) => RELEASED,
        (true, SPARED) => RELEASED_SPARED,
        (true, _) => RELEASED_CLOSED,
    }
}

/// A JS store's boolean answer to the release [`end`] or [`release`] asked for: as [`end`]
/// answers on the memory store.
#[wasm_bindgen(js_name = __kReleased, skip_typescript)]
pub fn released(id: f64, released: bool) -> f64 {
    plain((|| {
        let (lock, owner) = with_entry(id, |e| (e.lock.clone(), e.run_owner.take()))?;
        Ok(match owner {
            Some(owner) => hold_ended(id, lock, &owner, released),
            None => return Err(bad_id()),
        })
    })())
}

/// The `TypeError` for a JS store's release that answered `value`, not a boolean.
#[wasm_bindgen(js_name = __kReleaseAnswerError, skip_typescript)]
pub fn release_answer_error(value: JsValue) -> JsValue {
    match answers::boolean("lock store's release()", &value) {
        Err(error) => error,
        Ok(_) => type_error("keel-lock: that release answer is a boolean (internal error)"),
    }
}

/// The run's release failed or went unanswered: the run's hold is no longer tracked by it.
#[wasm_bindgen(js_name = __kForget, skip_typescript)]
pub fn forget(id: f64) -> f64 {
    done(with_entry(id, |e| e.run_owner = None))
}
