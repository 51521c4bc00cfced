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

/// Joins the memory store's queue for the key, after [`QUEUE`], and steps once: [`STILL_QUEUED`],
/// or the step that follows (see [`poll_wait`]).
#[wasm_bindgen(js_name = __kWait, skip_typescript)]
pub fn wait(id: f64) -> f64 {
    number_or_failed((|| {
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
        let Some(parked) = store.join(
            lock.key(),
            &owner,
            lock.ttl(),
            lock.current_holding(),
            wait.wait_ms,
            mono,
        ) else {
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

/// Steps the slot's wait (see [`wait`]): [`STILL_QUEUED`] — JS steps it again when `wakeWaiter`
/// names the slot or, when `arg` is not -1, after `arg` ms (replacing any timer it set before)
/// — or the step that follows. A wake that comes after the wait ended answers [`STILL_QUEUED`]
/// with no timer; JS ignores it.
#[wasm_bindgen(js_name = __kPoll, skip_typescript)]
pub fn poll_wait(id: f64) -> f64 {
    number_or_failed(poll_slot(id))
}

pub(super) fn poll_slot(id: f64) -> Result<f64, JsValue> {
    let Ok(Some(waiting)) = with_entry(id, |e| e.waiting.take()) else {
        return Ok(code_with_arg(STILL_QUEUED, -1.0));
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
            Ok(code_with_arg(STILL_QUEUED, ms))
        }
        WaitStep::Done(grant) => {
            drop(waiting);
            answered_wait(id, grant)
        }
    }
}

/// The wait ended with `grant` (`None`: it ran out): the acquisition's next step.
pub(super) fn answered_wait(id: f64, grant: Option<Grant>) -> Result<f64, JsValue> {
    let (lock, mut attempt) = take_attempt(id)?;
    let mono = JsRuntime.monotonic_ms();
    let next = attempt.answered(grant, mono);
    drive(id, &lock, attempt, next, mono)
}
