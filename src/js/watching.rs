//! A hold's watcher on the numeric face: the core's [`Watch`] machine, driven from JS timers.
//! It watches a run's hold once the run's context has its `signal` read, a run's hold with
//! `autoExtend`, and the hold `autoExtend()` keeps alive. The core says when the hold is lost
//! and when to extend it; JS sleeps, makes a JS store's extend call, and aborts the context.
//!
//! Each watcher is named by a number and holds its core lock, so it outlives the slot of the handle
//! that started it.

use alloc::rc::Rc;
use core::cell::{Cell, RefCell};

use wasm_bindgen::prelude::*;

use super::convert::{keep_alive_option, not_held_error};
use super::handle::{code_with_arg, lock_of, mono, number_or_failed, run_hold_of};
use super::ids::{id_map, IdMap};
use super::lock::CoreLock;
use super::operations::{extend_lock, not_held};
use super::protocol::*;
use crate::error::HoldOperation;
use crate::holding::{KeepAlive, LossReason, Watch, WatchStep};
use crate::lock::TrackedHold;

struct Watching {
    lock: Rc<CoreLock>,
    hold: TrackedHold,
    watch: Watch,
}

per_thread! {
    static WATCHING: RefCell<IdMap<Watching>> = const { RefCell::new(id_map()) };
    static NEXT_WATCH: Cell<u32> = const { Cell::new(1) };
}

fn reason_code(reason: LossReason) -> f64 {
    f64::from(match reason {
        LossReason::Expired => LOST_EXPIRED,
        LossReason::HoldCapReached => LOST_HOLD_CAP,
        _ => LOST_REFUSED,
    })
}

fn reason_of(code: u32) -> LossReason {
    match code {
        LOST_EXPIRED => LossReason::Expired,
        LOST_HOLD_CAP => LossReason::HoldCapReached,
        _ => LossReason::Refused,
    }
}

/// Checks an `autoExtend` option as `run()` and `autoExtend()` read it: 0, or `FAILED`
/// (see `protocol.rs`) with its `TypeError` or `RangeError`.
#[wasm_bindgen(js_name = __kKeepAliveCheck, skip_typescript)]
pub fn keep_alive_check(value: JsValue) -> f64 {
    number_or_failed(keep_alive_option(&value).map(|_| 0.0))
}

/// Starts watching the hold of slot `id`'s lock at `now`: with `keeps`, the handle's hold,
/// extending it as `options` (`autoExtend`'s value: `undefined`, `true` or `{ every,
/// maxHoldMs }`) says; otherwise only the deadline of the hold the slot's run took (or else
/// the handle's). Answers the watcher's number, or `FAILED` with the error (a
/// `LockNotHeldError` when nothing is held).
#[wasm_bindgen(js_name = __kWatch, skip_typescript)]
pub fn watch(id: f64, keeps: bool, options: JsValue, now: f64) -> f64 {
    number_or_failed((|| {
        let keep_alive = match keeps {
            true => Some(keep_alive_option(&options)?.unwrap_or_default()),
            false => None::<KeepAlive>,
        };
        let lock = lock_of(id)?;
        let run_hold = match keeps {
            true => None,
            false => run_hold_of(id)?,
        };
        let hold = match run_hold {
            Some(hold) => hold,
            None => lock
                .owner()
                .map(|owner| lock.track(&owner))
                .ok_or_else(|| not_held(lock.key().as_str(), HoldOperation::Extend))?,
        };
        let watching = Watching {
            watch: Watch::new(lock.ttl().as_ms(), keep_alive, mono(now)),
            hold,
            lock,
        };
        let watcher = NEXT_WATCH.with(|n| {
            let t = n.get();
            n.set(t.wrapping_add(1).max(1));
            t
        });
        WATCHING.with(|w| w.borrow_mut().insert(watcher, watching));
        Ok(f64::from(watcher))
    })())
}

/// What watcher `watcher` does at `now`: [`WATCH_SLEEP`], [`WATCH_EXTEND`] or [`WATCH_LOST`]
/// (also for a number that names no watcher: it was stopped).
#[wasm_bindgen(js_name = __kWatchNext, skip_typescript)]
pub fn watch_next(watcher: u32, now: f64) -> f64 {
    let next = WATCHING.with(|w| {
        let w = w.borrow();
        let watching = w.get(&watcher)?;
        let hold = watching.lock.hold_state(&watching.hold);
        Some(watching.watch.next(hold, mono(now)))
    });
    match next {
        Some(WatchStep::Extend) => WATCH_EXTEND,
        Some(WatchStep::Sleep { ms }) => code_with_arg(WATCH_SLEEP, ms as f64),
        Some(WatchStep::Lost(reason)) => {
            watch_stop(watcher);
            code_with_arg(WATCH_LOST, reason_code(reason))
        }
        // Released by its holder: the watch ends with nothing to tell.
        Some(WatchStep::Ended) => {
            watch_stop(watcher);
            code_with_arg(WATCH_LOST, f64::from(LOST_NOTHING))
        }
        None => code_with_arg(WATCH_LOST, f64::from(LOST_NOTHING)),
    }
}

/// Extends the watched hold by the lock's TTL, as `extend()` does: `EXTENDED`, `CALL` (a JS
/// store: JS makes the call and reports it as for `extend()`), or `FAILED`.
#[wasm_bindgen(js_name = __kWatchExtend, skip_typescript)]
pub fn watch_extend(watcher: u32) -> f64 {
    number_or_failed((|| {
        let lock = WATCHING.with(|w| w.borrow().get(&watcher).map(|x| x.lock.clone()));
        let lock = lock.ok_or_else(|| {
            super::convert::type_error("keel-lock: no such watcher (internal error)")
        })?;
        let ttl = lock.ttl();
        extend_lock(lock, ttl)
    })())
}

/// The extend [`WATCH_EXTEND`] asked for finished at `now`: `ok`, or it failed.
#[wasm_bindgen(js_name = __kWatchExtended, skip_typescript)]
pub fn watch_extended(watcher: u32, ok: bool, now: f64) {
    WATCHING.with(|w| {
        if let Some(watching) = w.borrow_mut().get_mut(&watcher) {
            watching.watch.extended(ok, mono(now));
        }
    });
}

/// Stops watcher `watcher` (if it still runs).
#[wasm_bindgen(js_name = __kWatchStop, skip_typescript)]
pub fn watch_stop(watcher: u32) {
    let gone = WATCHING.with(|w| w.borrow_mut().remove(&watcher));
    // Dropped with no borrow held: it may hold the last reference to its core lock.
    drop(gone);
}

/// The `LockNotHeldError` a lost hold's context is aborted with (`reason`: a `LOST_*` code).
#[wasm_bindgen(js_name = __kLostError, skip_typescript)]
pub fn lost_error(key: &str, reason: u32) -> JsValue {
    let reason = reason_of(reason).as_str();
    not_held_error(key, &["lock \"", key, "\" was lost: ", reason].concat())
}

/// How many watchers run (for tests: none may outlive its hold's run or `stopAutoExtend`).
#[wasm_bindgen(js_name = __kWatchers, skip_typescript)]
pub fn watchers() -> u32 {
    WATCHING.with(|w| w.borrow().len() as u32)
}
