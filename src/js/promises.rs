//! Awaiting JS promises and returning JS promises without a wasm closure per call. The glue
//! `wasm-bindgen-futures` provides (`JsFuture`, `future_to_promise`) and `gloo-timers` create
//! two or three wasm closures per await, each registered for finalization; on a contended lock
//! that is most of the cost of a hand-over. Here JS calls back through one function set once
//! (`src/js/promises.js`), naming the waiting future by a number. The futures handed to JS as
//! promises run on the small task queue at the end of this file, woken through that same
//! function.

use core::cell::RefCell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

#[cfg(any(feature = "testing", feature = "workerd"))]
use js_sys::Promise;
use wasm_bindgen::prelude::*;

use super::ids::{id_map, IdMap};

#[wasm_bindgen(module = "/src/js/promises.js")]
extern "C" {
    #[wasm_bindgen(js_name = setSettled)]
    fn set_settled(f: &JsValue);
    #[wasm_bindgen(js_name = whenSettled)]
    fn when_settled(value: &JsValue, id: u32);
    #[wasm_bindgen(js_name = sleep)]
    fn start_sleep(ms: f64, id: u32);
    fn cancel(id: u32);
    #[cfg(any(feature = "testing", feature = "workerd"))]
    fn deferred(id: u32) -> Promise;
    #[cfg(any(feature = "testing", feature = "workerd"))]
    fn settle(id: u32, ok: bool, value: &JsValue);
    #[wasm_bindgen(js_name = monotonicNow)]
    pub(crate) fn monotonic_now() -> f64;
    #[wasm_bindgen(js_name = releaseLateGrant)]
    pub(crate) fn release_late_grant(answer: &JsValue, target: &JsValue, key: &str, owner: &str);
}

/// What a waiting future knows: its waker, and the outcome once JS reported it.
#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    outcome: Option<Result<JsValue, JsValue>>,
}

struct Slots {
    next: u32,
    slots: IdMap<Slot>,
}

per_thread! {
    static SLOTS: RefCell<Slots> = const { RefCell::new(Slots { next: 0, slots: id_map() }) };
}

/// Called by JS when the promise (or timer) behind `id` settles; an id with no slot is a task
/// (see [`promise_of`]) that was woken.
fn on_settled(id: u32, ok: bool, value: JsValue) {
    let waker = SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        let Some(slot) = s.slots.get_mut(&id) else {
            return Err(());
        };
        slot.outcome = Some(if ok { Ok(value) } else { Err(value) });
        Ok(slot.waker.take())
    });
    match waker {
        Ok(Some(waker)) => waker.wake(),
        Ok(None) => {}
        #[cfg(any(feature = "testing", feature = "workerd"))]
        Err(()) => poll_task(id),
        #[cfg(not(any(feature = "testing", feature = "workerd")))]
        Err(()) => {}
    }
}

/// A fresh id with an empty slot (and, on first use, the callback JS reports through).
fn open_slot() -> u32 {
    SLOTS.with(|s| {
        let mut s = s.borrow_mut();
        if s.next == 0 {
            set_settled(&Closure::<dyn Fn(u32, bool, JsValue)>::new(on_settled).into_js_value());
        }
        s.next = s.next.wrapping_add(1).max(1);
        let id = s.next;
        s.slots.insert(id, Slot::default());
        id
    })
}

/// The future of one slot; forgets the slot when dropped (a late outcome is then ignored).
struct Settled {
    id: u32,
}

impl Future for Settled {
    type Output = Result<JsValue, JsValue>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        SLOTS.with(|s| {
            let mut s = s.borrow_mut();
            let Some(slot) = s.slots.get_mut(&self.id) else {
                return Poll::Pending;
            };
            match slot.outcome.take() {
                Some(outcome) => Poll::Ready(outcome),
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

impl Drop for Settled {
    fn drop(&mut self) {
        SLOTS.with(|s| s.borrow_mut().slots.remove(&self.id));
    }
}

/// Awaits `value` the way `await` would: a thenable's outcome, or the value itself.
pub(crate) fn settled(value: &JsValue) -> impl Future<Output = Result<JsValue, JsValue>> {
    let id = open_slot();
    when_settled(value, id);
    Settled { id }
}

/// Whether `await value` would wait: an object or function with a callable `then`.
pub(crate) fn is_thenable(value: &JsValue) -> bool {
    (value.is_object() || value.is_function())
        && get_prop!(value, "then").is_ok_and(|t| t.is_function())
}

/// Resolves a value a JS callback answered: a thenable is awaited (its rejection comes back as
/// the same JS value), anything else is returned as is.
pub(crate) async fn resolve_answer(answer: JsValue) -> Result<JsValue, JsValue> {
    if is_thenable(&answer) {
        settled(&answer).await
    } else {
        Ok(answer)
    }
}

/// Settles an acquire's answer (see [`settled`]). If the future is dropped first — the core
/// abandoned the call — a grant the answer brings later is released with
/// `target.release(key, owner)`.
pub(crate) async fn grant_answer(
    answer: JsValue,
    target: &JsValue,
    key: &str,
    owner: &str,
) -> Result<JsValue, JsValue> {
    if !is_thenable(&answer) {
        return Ok(answer);
    }
    struct Abandoned<'a> {
        answer: Option<JsValue>,
        target: &'a JsValue,
        key: &'a str,
        owner: &'a str,
    }
    impl Drop for Abandoned<'_> {
        fn drop(&mut self) {
            if let Some(answer) = self.answer.take() {
                release_late_grant(&answer, self.target, self.key, self.owner);
            }
        }
    }
    let watching = settled(&answer);
    let mut abandoned = Abandoned {
        answer: Some(answer),
        target,
        key,
        owner,
    };
    let outcome = watching.await;
    abandoned.answer = None;
    outcome
}

/// [`grant_answer`] for an answer granting `keys` (`acquireMany`'s): a late grant is released
/// key by key, each with its owner.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) async fn grants_answer(
    answer: JsValue,
    target: &JsValue,
    keys: &[crate::input::Key],
    owners: &[crate::token::OwnerToken],
) -> Result<JsValue, JsValue> {
    settled_or(answer, |late| {
        for (key, owner) in keys.iter().zip(owners) {
            release_late_grant(late, target, key.as_str(), owner.as_str());
        }
    })
    .await
}

/// Settles `answer` (see [`settled`]); if the future is dropped before it settles,
/// `abandoned` gets the answer, to undo what it may still bring.
async fn settled_or(answer: JsValue, abandoned: impl FnOnce(&JsValue)) -> Result<JsValue, JsValue> {
    if !is_thenable(&answer) {
        return Ok(answer);
    }
    struct Abandoned<F: FnOnce(&JsValue)> {
        answer: Option<JsValue>,
        abandoned: Option<F>,
    }
    impl<F: FnOnce(&JsValue)> Drop for Abandoned<F> {
        fn drop(&mut self) {
            if let (Some(answer), Some(abandoned)) = (self.answer.take(), self.abandoned.take()) {
                abandoned(&answer);
            }
        }
    }
    let watching = settled(&answer);
    let mut guard = Abandoned {
        answer: Some(answer),
        abandoned: Some(abandoned),
    };
    let outcome = watching.await;
    guard.answer = None;
    outcome
}

/// A one-shot JS event (a timer firing) as a future; dropping it before the event clears the
/// timer, so nothing outlives the wait.
pub(crate) struct Event {
    settled: Settled,
}

impl Future for Event {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.settled).poll(cx).map(drop)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let fired = SLOTS.with(|s| {
            s.borrow()
                .slots
                .get(&self.settled.id)
                .is_none_or(|slot| slot.outcome.is_some())
        });
        if !fired {
            cancel(self.settled.id);
        }
    }
}

/// Completes after `ms` milliseconds.
pub(crate) fn sleep(ms: u64) -> Event {
    let id = open_slot();
    // A store call's bound can exceed setTimeout's 2^31 - 1 ms (a timeout plus a retry delay);
    // the JS side caps each host timer at that and re-arms.
    start_sleep(ms as f64, id);
    Event {
        settled: Settled { id },
    }
}

/// A future of a JS value, boxed: what [`promise_of`] takes, so that it is in the wasm once.
#[cfg(any(feature = "testing", feature = "workerd"))]
pub(crate) type JsFuture = Pin<alloc::boxed::Box<dyn Future<Output = Result<JsValue, JsValue>>>>;

#[cfg(any(feature = "testing", feature = "workerd"))]
per_thread! {
    /// The futures [`promise_of`] runs, by the id of the promise each settles. A task is out of
    /// the map while it is polled, so a wake during its poll finds nothing to poll twice.
    static TASKS: RefCell<IdMap<JsFuture>> = const { RefCell::new(id_map()) };
}

/// Wakes a task: JS calls back `settled(id, …)` in a microtask, which polls it (a task is
/// polled in a microtask of its own, never inside the code that woke it).
#[cfg(any(feature = "testing", feature = "workerd"))]
struct TaskWaker {
    id: u32,
}

#[cfg(any(feature = "testing", feature = "workerd"))]
impl alloc::task::Wake for TaskWaker {
    fn wake(self: alloc::sync::Arc<Self>) {
        when_settled(&JsValue::UNDEFINED, self.id);
    }
}

/// Polls task `id` once, if it is queued; settles its promise when it completes.
#[cfg(any(feature = "testing", feature = "workerd"))]
fn poll_task(id: u32) {
    let Some(mut task) = TASKS.with(|t| t.borrow_mut().remove(&id)) else {
        return;
    };
    let waker = Waker::from(alloc::sync::Arc::new(TaskWaker { id }));
    match task.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(Ok(value)) => settle(id, true, &value),
        Poll::Ready(Err(error)) => settle(id, false, &error),
        Poll::Pending => {
            TASKS.with(|t| t.borrow_mut().insert(id, task));
        }
    }
}

/// A promise settled by `future`, which runs on the task queue above (`checkLockStore`'s, and
/// the Durable Object client store's waiting pair). Its first poll is in a microtask, as every
/// later one is.
#[cfg(any(feature = "testing", feature = "workerd"))]
pub(crate) fn promise_of(future: JsFuture) -> Promise {
    let id = open_slot();
    // The slot is only used for its id here: the promise is settled through `settle`.
    SLOTS.with(|s| s.borrow_mut().slots.remove(&id));
    let promise = deferred(id);
    TASKS.with(|t| t.borrow_mut().insert(id, future));
    when_settled(&JsValue::UNDEFINED, id);
    promise
}
