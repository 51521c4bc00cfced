//! A caller waiting in the memory store's FIFO queue, stepped from JS: woken through
//! `wakeWaiter` when the key may be its, or when the queue's timekeeper says.

use super::*;

/// A caller's wait in the memory store's queue, stepped from JS; it leaves the queue when
/// dropped, however the wait ended (a grant that arrived unclaimed is released).
pub(super) struct Waiting {
    pub(super) store: Rc<MemoryLockStore<JsRuntime>>,
    pub(super) parked: Parked,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.store.leave(&self.parked);
    }
}

/// Wakes a waiting slot by telling JS (`wakeWaiter`), which steps it ([`poll_wait`]) in a
/// microtask and, once it is over, calls the caller's `fn` right there: a hand-over costs one
/// microtask, as it does for a promise-queue mutex.
pub(super) struct WaiterWaker(f64);

impl Wake for WaiterWaker {
    fn wake(self: Arc<Self>) {
        wake_waiter(self.0);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        wake_waiter(self.0);
    }
}

#[wasm_bindgen(module = "/src/js/promises.js")]
extern "C" {
    #[wasm_bindgen(js_name = wakeWaiter)]
    fn wake_waiter(id: f64);
}

/// Keeps `waiting` in slot `id`'s entry `e`, listening with the slot's waker, until it is woken
/// or, when `until` is given (the queue's timekeeper), until then: [`STILL_QUEUED`] with the ms
/// to sleep, or -1.
pub(super) fn park(e: &mut Entry, id: f64, waiting: Waiting, until: Option<u64>, mono: u64) -> f64 {
    // One waker per slot, made at its first wait: the slot's id is all it carries.
    let waker = e
        .waker
        .get_or_insert_with(|| Waker::from(Arc::new(WaiterWaker(id))));
    waiting.parked.listen(waker.clone());
    e.waiting = Some(waiting);
    let ms = until.map_or(-1.0, |at| at.saturating_sub(mono).max(1) as f64);
    code_with_arg(STILL_QUEUED, ms)
}

/// Steps the slot's wait, as [`begin`] left it queued ([`STILL_QUEUED`]), at `now` (the
/// monotonic clock read by JS; `NaN`: read here): [`STILL_QUEUED`] again — JS steps it again
/// when `wakeWaiter` names the slot or, when `arg` is not -1, after `arg` ms (replacing any
/// timer it set before) — or the step that follows. A wake that comes after the wait ended
/// answers [`STILL_QUEUED`] with no timer; JS ignores it.
#[wasm_bindgen(js_name = __kPoll, skip_typescript)]
pub fn poll_wait(id: f64, now: f64) -> f64 {
    number_or_failed((|| {
        let Ok(Some(waiting)) = with_entry(id, |e| e.waiting.take()) else {
            return Ok(code_with_arg(STILL_QUEUED, -1.0));
        };
        // Stepped with the slot not borrowed: a hand-over wakes other waiters.
        let mono = mono(now);
        match waiting.store.wait_step(&waiting.parked, mono) {
            WaitStep::Park { until } => with_entry(id, |e| park(e, id, waiting, until, mono)),
            WaitStep::Done(grant) => {
                // Out of the queue before the acquisition goes on.
                drop(waiting);
                let (lock, mut attempt) = take_attempt(id)?;
                let next = attempt.answered(grant, mono);
                drive(id, &lock, attempt, next, mono)
            }
        }
    })())
}
