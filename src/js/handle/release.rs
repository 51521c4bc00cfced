//! Ending a hold: a run's release, `release()`, and what the handle's slot becomes after.

use super::*;

/// Ends the run's hold: on the memory store released here, at `now` ([`RELEASED`], or
/// [`CLOSED`] or [`SPARED`] when the now idle handle let go of its slot too;
/// [`REFUSED`]: the hold was lost); on a JS store [`CALL`]: JS calls `release(key, owner)`,
/// bounded by the TTL, and reports with [`released`]. Stops the run's watcher. `now` is the
/// monotonic clock read by JS for the memory store (`NaN`: not read; see [`mono`]).
#[wasm_bindgen(js_name = __kEnd, skip_typescript)]
pub fn end(id: f64, now: f64) -> f64 {
    number_or_failed(end_run(id, now))
}

pub(super) fn end_run(id: f64, now: f64) -> Result<f64, JsValue> {
    let (lock, owner) = with_entry(id, |e| (e.lock.clone(), e.run_owner.clone()))?;
    let Some(owner) = owner else {
        return Ok(code_with_arg(REFUSED, 0.0));
    };
    match lock.store() {
        Backend::Memory(m) => {
            let released = m.release_at(lock.key(), &owner, mono(now));
            with_entry(id, |e| e.run_owner = None)?;
            Ok(hold_ended(id, lock, &owner, released))
        }
        Backend::Js(_) => {
            lock.releasing(&owner);
            Ok(call_step(lock.ttl().as_ms(), &owner))
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

/// `acquire()` took the key: the handle adopts the hold (its release is [`release`]'s), not a run.
#[wasm_bindgen(js_name = __kAdopt, skip_typescript)]
pub fn adopt(id: f64) -> f64 {
    unit_or_failed(with_entry(id, |e| e.run_owner = None))
}

/// `release()`: ends the handle's hold as [`end`] ends a run's ([`REFUSED`] when it holds
/// nothing — never acquired, released, or known lost).
#[wasm_bindgen(js_name = __kRelease, skip_typescript)]
pub fn release(id: f64, now: f64) -> f64 {
    number_or_failed((|| {
        let owner = lock_of(id)?.owner();
        if owner.is_none() {
            return Ok(REFUSED);
        }
        with_entry(id, |e| e.run_owner = owner)?;
        end_run(id, now)
    })())
}

/// The hold under `owner` ended — `released`, or refused (it was lost) — and is recorded so;
/// a handle now idle lets go of its slot: [`RELEASED`], [`CLOSED`],
/// [`SPARED`] or [`REFUSED`].
pub(super) fn hold_ended(id: f64, lock: Rc<CoreLock>, owner: &OwnerToken, released: bool) -> f64 {
    lock.released(owner, released);
    // Dropped first: an idle slot goes to the spare only when nothing else shares its lock.
    drop(lock);
    match (released, close(id, false)) {
        (false, _) => REFUSED,
        (true, fate) if fate == KEPT => RELEASED,
        (true, fate) => fate,
    }
}

/// A JS store's boolean answer to the release [`end`] or [`release`] asked for: as [`end`]
/// answers on the memory store.
#[wasm_bindgen(js_name = __kReleased, skip_typescript)]
pub fn released(id: f64, released: bool) -> f64 {
    number_or_failed((|| {
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
    unit_or_failed(with_entry(id, |e| e.run_owner = None))
}
