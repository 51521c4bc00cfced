//! The slots: each JS handle that acquires, holds or releases has its core lock here, named
//! by a number (`generation · 2^24 + index + 1`, so an id kept after its slot closed names
//! nothing); and the spare, the last idle slot kept open for the next handle on the same key.

use super::*;

pub(super) struct Entry {
    pub(super) lock: Rc<CoreLock>,
    /// The acquisition in flight (a JS store's call is being awaited).
    pub(super) attempt: Option<Attempt>,
    /// The owner token of the hold the handle's current `run` took.
    pub(super) run_owner: Option<OwnerToken>,
    /// The last hold a run of this slot took, tracked from then on for its watcher.
    pub(super) run_hold: Option<TrackedHold>,
    /// The wait in the memory store's queue, while there is one.
    pub(super) waiting: Option<Waiting>,
    /// What wakes the slot's waits (`wakeWaiter` with its id), made at its first wait.
    pub(super) waker: Option<Waker>,
}

/// Slot ids are `generation · 2^24 + index + 1`: an id kept after its slot was closed names
/// nothing, even once the index is reused.
pub(super) const INDEX_BITS: f64 = 16_777_216.0;

pub(super) struct Slots {
    pub(super) entries: Vec<(u32, Option<Entry>)>,
    pub(super) free: Vec<usize>,
}

per_thread! {
    static SLOTS: RefCell<Slots> = const {
        RefCell::new(Slots { entries: Vec::new(), free: Vec::new() })
    };
    /// The id of the spare: the last slot that went idle, kept open rather than closed (0:
    /// none). JS, which knows the key, TTL and store of the slot it let go, hands that very id
    /// to the next handle on the same — `lock(key).run(fn)` in a loop then allocates nothing,
    /// passes no key and makes no call to reopen. A call that starts work on the spare's id
    /// ([`begin`], [`handle`]) takes it; the next slot to go idle closes a spare not taken.
    static SPARE: Cell<f64> = const { Cell::new(0.0) };
}

pub(super) fn index_of(id: f64) -> Option<(usize, u32)> {
    if !(id >= 1.0 && crate::float::fract(id) == 0.0 && id <= 9_007_199_254_740_991.0) {
        return None;
    }
    let raw = id - 1.0;
    // `raw` is not negative, so its whole part rounds down.
    let generation = crate::float::trunc(raw / INDEX_BITS);
    let index = raw - generation * INDEX_BITS;
    Some((index as usize, generation as u32))
}

pub(super) fn bad_id() -> JsValue {
    type_error("keel-lock: a lock handle's slot is gone (internal error)")
}

/// Runs `f` on the slot's entry, borrowed only for `f`'s duration: `f` must not call JS.
pub(super) fn with_entry<T>(id: f64, f: impl FnOnce(&mut Entry) -> T) -> Result<T, JsValue> {
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let (index, generation) = index_of(id).ok_or_else(bad_id)?;
        match s.entries.get_mut(index) {
            Some((g, Some(entry))) if *g == generation => Ok(f(entry)),
            _ => Err(bad_id()),
        }
    })
}

pub(in crate::js) fn lock_of(id: f64) -> Result<Rc<CoreLock>, JsValue> {
    with_entry(id, |e| e.lock.clone())
}

/// The hold the slot's current `run` took, tracked since it was taken, if a run holds one.
pub(in crate::js) fn run_hold_of(id: f64) -> Result<Option<TrackedHold>, JsValue> {
    with_entry(id, |e| match (&e.run_owner, &e.run_hold) {
        (Some(owner), Some(hold)) if hold.owner() == owner => Some(hold.clone()),
        _ => None,
    })
}

pub(in crate::js) fn insert(lock: Rc<CoreLock>) -> f64 {
    let entry = Entry {
        lock,
        attempt: None,
        run_owner: None,
        run_hold: None,
        waiting: None,
        waker: None,
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

/// A slot for a handle on `key` (checked again) with `ttl` ms, bound to `store`.
#[wasm_bindgen(js_name = __kOpen, skip_typescript)]
pub fn open(key: &str, ttl: f64, store: &StoreBinding) -> f64 {
    number_or_failed((|| {
        let ttl = ttl_of(ttl)?;
        let key = Key::new(key).map_err(input_to_js)?;
        let lock = Lock::new(key, ttl, store.backend.clone(), JsRuntime);
        Ok(insert(Rc::new(lock)))
    })())
}

/// The spare is `id`'s from now on: it is no longer closed when another slot goes idle.
pub(super) fn take_spare(id: f64) {
    SPARE.with(|s| {
        if s.get() == id {
            s.set(0.0);
        }
    });
}

/// Removes slot `id`'s entry, if `id` names one.
pub(super) fn remove(id: f64) -> Option<Entry> {
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

/// Lets the handle go of its slot if it is idle (holds nothing, knows of no lost hold, acquires
/// nothing), or at once with `force` (the handle is gone). An idle slot whose core lock nothing
/// else shares stays open as the spare (see `SPARE`), closing the spare before it; any other
/// closes. Answers [`KEPT`], [`CLOSED`] or [`SPARED`].
#[wasm_bindgen(js_name = __kClose, skip_typescript)]
pub fn close(id: f64, force: bool) -> f64 {
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

/// A twin of slot `id`: a second slot on its core lock, for an operation that starts while the
/// handle is busy with another (two runs of one handle at once, `release()` inside its own run).
#[wasm_bindgen(js_name = __kTwin, skip_typescript)]
pub fn twin(id: f64) -> f64 {
    number_or_failed(lock_of(id).map(insert))
}
