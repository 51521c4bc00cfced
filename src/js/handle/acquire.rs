//! A run's or an acquire's acquisition, stepped from JS: the core's machine ([`Attempt`])
//! says what to do next — a memory store's call is made here and now, a JS store's goes back
//! to JS as a step code — and a JS store's answers are judged by the seam's rules.

use super::*;

/// Starts a run's acquisition: `timeout`/`retryDelay` in ms, `NaN` for "not given"; `now` is
/// the monotonic clock as [`JsRuntime`] reads it (`performance.now()`), read by JS. On the
/// memory store a run that waits and is refused joins the key's queue here: [`STILL_QUEUED`]
/// (see [`poll_wait`]).
#[wasm_bindgen(js_name = __kBegin, skip_typescript)]
pub fn begin(id: f64, timeout: f64, retry_delay: f64, now: f64) -> f64 {
    take_spare(id);
    number_or_failed(start(id, timeout, retry_delay, mono(now)))
}

pub(super) fn start(id: f64, timeout: f64, retry_delay: f64, mono: u64) -> Result<f64, JsValue> {
    let given = |v: f64| (!v.is_nan()).then_some(v);
    let options =
        AcquireOptions::from_f64(given(timeout), given(retry_delay)).map_err(input_to_js)?;
    let lock = lock_of(id)?;
    if lock.holds_shared_already(mono) {
        return Ok(code_with_arg(REFUSED, 0.0));
    }
    let (attempt, next) = Attempt::start(options, lock.ttl(), lock.store_hands_over(), mono)
        .map_err(|e| to_js(Error::from(e)))?;
    drive(id, &lock, attempt, next, mono)
}

/// Carries a step out: a memory store's calls are made here and now, anything else goes back to
/// JS as a step code (the attempt kept in the slot until the answer comes).
pub(super) fn drive(
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
            (Next::Refused, _) => return Ok(code_with_arg(REFUSED, 0.0)),
            (Next::TimedOut { after_ms }, _) => {
                return Ok(code_with_arg(TIMED_OUT, after_ms as f64))
            }
            (Next::Acquire { .. }, Backend::Memory(m)) => {
                let grant = memory_take(lock, m, attempt.owner(), mono)?;
                attempt.answered(grant, mono)
            }
            (Next::AcquireOrWait { wait, .. }, Backend::Memory(m)) => {
                // The store's wait starts with this very take; a caller refused joins the
                // key's queue in the same turn (nothing can have changed since) and parks.
                let holding = lock.current_holding();
                let owner = attempt.owner();
                let joined = match memory_take(lock, m, owner, mono)? {
                    Some(grant) => Err(Some(grant)),
                    None => m
                        .join(lock.key(), owner, lock.ttl(), holding, wait.wait_ms, mono)
                        .ok_or(None),
                };
                match joined {
                    Err(grant) => attempt.answered(grant, mono),
                    Ok((parked, until)) => {
                        let waiting = Waiting {
                            store: m.clone(),
                            parked,
                        };
                        return with_entry(id, |e| {
                            e.attempt = Some(attempt);
                            park(e, id, waiting, until, mono)
                        });
                    }
                }
            }
            (Next::AcquireOrWait { wait, bound_ms }, Backend::Js(_)) => {
                call_step(bound_ms, attempt.owner());
                set_wait(wait.wait_ms as f64, wait.poll_ms as f64);
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(CALL_ACQUIRE_OR_WAIT);
            }
            (Next::Acquire { bound_ms }, Backend::Js(_)) => {
                let code = call_step(bound_ms, attempt.owner());
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(code);
            }
            (Next::Sleep { ms }, _) => {
                with_entry(id, |e| e.attempt = Some(attempt))?;
                return Ok(code_with_arg(SLEEP, ms as f64));
            }
        };
    }
}

/// The memory store's take for `lock`'s holding: a lock's set-if-absent, or permits.
fn memory_take(
    lock: &CoreLock,
    m: &MemoryLockStore<JsRuntime>,
    owner: &OwnerToken,
    mono: u64,
) -> Result<Option<Grant>, JsValue> {
    match lock.current_holding() {
        Holding::Exclusive => Ok(m.acquire_at(lock.key(), owner, lock.ttl(), mono)),
        Holding::Shared(share) => {
            let answer = m.acquire_shared_at(lock.key(), owner, lock.ttl(), share, mono);
            lock.shared_answer(answer).map_err(to_js)
        }
    }
}

pub(super) fn take_attempt(id: f64) -> Result<(Rc<CoreLock>, Attempt), JsValue> {
    let (lock, attempt) = with_entry(id, |e| (e.lock.clone(), e.attempt.take()))?;
    Ok((lock, attempt.ok_or_else(bad_id)?))
}

pub(super) const ACQUIRE_ANSWER: &str = "lock store's acquire()";

/// A JS store's answer to the acquire in flight, already told apart by type: `kind` is
/// [`ANSWER_FALSE`], [`ANSWER_TRUE`], or [`ANSWER_FENCE`] (an object whose `fence` is the number
/// `fence`, and which has no `waitedMs`). Any other answer goes to [`answered_value`].
#[wasm_bindgen(js_name = __kAnswered, skip_typescript)]
pub fn answered(id: f64, kind: u32, fence: f64) -> f64 {
    let grant = match kind {
        ANSWER_FALSE => Ok(None),
        ANSWER_TRUE => Ok(Some(Grant::unfenced())),
        ANSWER_FENCE => answers::fenced(ACQUIRE_ANSWER, fence),
        _ => Err(type_error(
            "keel-lock: no such answer kind (internal error)",
        )),
    };
    number_or_failed(settle_answer(id, grant))
}

/// A JS store's answer to the acquire in flight, judged by the seam's rules.
#[wasm_bindgen(js_name = __kAnsweredValue, skip_typescript)]
pub fn answered_value(id: f64, value: JsValue) -> f64 {
    let grant = match shared_lock(id) {
        Some(lock) => shared_answer(&lock, "lock store's acquireShared()", &value, false),
        None => answers::acquire(ACQUIRE_ANSWER, &value),
    };
    number_or_failed(settle_answer(id, grant))
}

/// The slot's lock, when it takes shared holds.
fn shared_lock(id: f64) -> Option<Rc<CoreLock>> {
    lock_of(id)
        .ok()
        .filter(|lock| lock.current_holding() != Holding::Exclusive)
}

/// A JS store's shared answer, judged (`{ heldLimit }` is the lock's `LimitMismatch`).
fn shared_answer(
    lock: &CoreLock,
    method: &str,
    value: &JsValue,
    waited: bool,
) -> Result<Option<Grant>, JsValue> {
    let answer = answers::shared(method, value, waited)?;
    lock.shared_answer(answer).map_err(to_js)
}

/// A JS store's answer to the `acquireOrWait` in flight (not a boolean: those go to
/// [`answered`]), judged by the seam's rules.
#[wasm_bindgen(js_name = __kAnsweredWaited, skip_typescript)]
pub fn answered_waited(id: f64, value: JsValue) -> f64 {
    let grant = match shared_lock(id) {
        Some(lock) => shared_answer(&lock, "lock store's acquireSharedOrWait()", &value, true),
        None => answers::waited("lock store's acquireOrWait()", &value),
    };
    number_or_failed(settle_answer(id, grant))
}

/// Feeds a judged answer to the acquisition; one outside the contract ends it.
pub(super) fn settle_answer(
    id: f64,
    grant: Result<Option<Grant>, JsValue>,
) -> Result<f64, JsValue> {
    match grant {
        Ok(grant) => answer(id, grant),
        Err(error) => {
            with_entry(id, |e| e.attempt = None)?;
            Err(error)
        }
    }
}

pub(super) fn answer(id: f64, grant: Option<Grant>) -> Result<f64, JsValue> {
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
    number_or_failed((|| {
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
    number_or_failed((|| {
        let (lock, mut attempt) = take_attempt(id)?;
        let mono = JsRuntime.monotonic_ms();
        let next = attempt.retry(mono);
        drive(id, &lock, attempt, next, mono)
    })())
}

/// The acquisition in flight ended without an answer to feed (the store failed).
#[wasm_bindgen(js_name = __kAbandon, skip_typescript)]
pub fn abandon(id: f64) -> f64 {
    unit_or_failed(with_entry(id, |e| e.attempt = None))
}

/// The caller's abort signal fired while it waited: it stops waiting. On the memory store it
/// leaves the key's queue here (a grant that raced the abort is released) and this answers
/// [`REFUSED`]; on a JS store this answers [`CALL`] — JS calls the store's `withdraw(key,
/// owner)` (or, without one, `release`), bounded by `arg` ms.
#[wasm_bindgen(js_name = __kWithdraw, skip_typescript)]
pub fn withdraw(id: f64) -> f64 {
    number_or_failed((|| {
        let (lock, attempt, waiting) =
            with_entry(id, |e| (e.lock.clone(), e.attempt.take(), e.waiting.take()))?;
        // Dropped with no borrow held: leaving the queue may hand the key to the next waiter.
        drop(waiting);
        Ok(match (lock.store(), attempt) {
            (Backend::Js(_), Some(attempt)) => call_step(lock.ttl().as_ms(), attempt.owner()),
            _ => REFUSED,
        })
    })())
}

/// The `LockStoreTimeoutError` for a call of `operation` (numbered as `operations.rs` numbers
/// them: the `OP_*` codes) unanswered for `after_ms` (a `TypeError` if `id` names no
/// slot).
#[wasm_bindgen(js_name = __kTimeoutError, skip_typescript)]
pub fn timeout_error(id: f64, operation: u32, after_ms: f64) -> JsValue {
    (|| {
        let operation = crate::js::convert::operation(operation)
            .ok_or_else(crate::js::convert::bad_operation)?;
        let lock = lock_of(id)?;
        Ok(to_js(lock.store_timeout(operation, after_ms as u64)))
    })()
    .unwrap_or_else(|error: JsValue| error)
}
