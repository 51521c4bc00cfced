//! Waiting without polling on the memory store: the store parks waiters in a FIFO queue per key
//! and hands the key over on release or expiry. Virtual time makes every interleaving exact.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{key, ttl, Task};

use std::cell::{Cell, RefCell};
use std::future::Future;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{AcquireOptions, Error, Lock, LockStore, MemoryLockStore, Runtime};

/// Wait up to `timeout_ms`, looking every 50 ms.
fn queued(timeout_ms: u64) -> AcquireOptions {
    common::wait(timeout_ms, 50)
}

#[test]
fn waiters_acquire_in_arrival_order_one_at_a_time_right_at_each_release() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let order = RefCell::new(Vec::new());
    let inside = Cell::new(0);
    let start = rt.now_ms();
    let mut tasks: Vec<Task> = Vec::new();
    for i in 0..8u64 {
        let (store, rt, order, inside) = (&store, rt.clone(), &order, &inside);
        tasks.push(Box::pin(async move {
            rt.sleep(i + 1).await; // arrive in order 0, 1, 2, … one ms apart
            let l = Lock::new(key("k"), ttl(10_000), store, rt.clone());
            let ran = l
                .run(queued(60_000), |_| async {
                    inside.set(inside.get() + 1);
                    assert_eq!(inside.get(), 1, "two holders inside at once");
                    order.borrow_mut().push((i, rt.now_ms() - start));
                    rt.sleep(10).await;
                    inside.set(inside.get() - 1);
                })
                .await
                .unwrap();
            assert!(ran.is_some());
        }));
    }
    tasks.push(Box::pin(async {
        rt.sleep(100).await;
        assert!(holder.release().await.unwrap());
    }));
    rt.join_all(tasks);
    let order = order.into_inner();
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>(),
        "not first come, first served"
    );
    // Hand-overs happen at the release itself: no retry delay between holders.
    let times: Vec<u64> = order.iter().map(|(_, t)| *t).collect();
    assert_eq!(times, vec![100, 110, 120, 130, 140, 150, 160, 170]);
    assert_eq!(store.waiting(), 0, "queue not cleaned");
}

#[test]
fn a_newcomer_never_overtakes_a_waiter_even_as_the_holder_expires() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(100), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let newcomer = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let newcomer_won = Cell::new(None);
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            assert!(waiter.acquire(queued(5_000)).await.unwrap());
        }),
        Box::pin(async {
            // Exactly when the holder's TTL ends, before or after the waiter's timer fires.
            rt.sleep(100).await;
            newcomer_won.set(Some(
                newcomer.acquire(AcquireOptions::default()).await.unwrap(),
            ));
        }),
    ];
    rt.join_all(tasks);
    assert_eq!(
        newcomer_won.get(),
        Some(false),
        "the newcomer overtook the waiter"
    );
    assert!(waiter.owner().is_some(), "the waiter does not hold the key");
}

#[test]
fn a_crashed_holder_hands_over_at_its_expiry_not_a_retry_later() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let crashed = Lock::new(key("k"), ttl(250), &store, rt.clone());
    assert!(rt
        .block_on(crashed.acquire(AcquireOptions::default()))
        .unwrap());
    let start = rt.now_ms();
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let options = AcquireOptions {
        timeout_ms: 10_000,
        retry_delay_ms: 5_000, // would be a long poll; the hand-over does not wait for it
    };
    assert!(rt.block_on(waiter.acquire(options)).unwrap());
    assert_eq!(rt.now_ms() - start, 250);
    // The waiter's TTL runs from the grant: it is not already expired.
    assert!(!waiter.is_expired());
    rt.advance(999);
    assert!(!waiter.is_expired());
}

#[test]
fn a_waiter_whose_timeout_passes_leaves_the_queue() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    assert!(!rt.block_on(waiter.acquire(queued(300))).unwrap());
    assert_eq!(rt.now_ms() - start, 300);
    assert_eq!(store.waiting(), 0);
    // Releasing later hands the key to nobody: it is simply free.
    assert!(rt.block_on(holder.release()).unwrap());
    assert!(!rt.block_on(waiter.is_locked()).unwrap());
}

#[test]
fn a_release_at_a_waiters_deadline_does_not_hand_it_the_key_before_its_timer_fires() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    // Both wake at +300; the release runs first, before the waiter's timer is acted on — as
    // when a host runs a timer late.
    let outcomes = rt.join_all::<std::pin::Pin<Box<dyn Future<Output = bool>>>>(vec![
        Box::pin(async {
            rt.sleep(300).await;
            holder.release().await.unwrap()
        }),
        Box::pin(async { waiter.acquire(queued(300)).await.unwrap() }),
    ]);
    assert_eq!(outcomes, [true, false], "a wait that ran out was granted");
    assert_eq!(rt.now_ms() - start, 300);
    assert_eq!(store.waiting(), 0);
    assert!(!rt.block_on(waiter.is_locked()).unwrap());
}

#[test]
fn aborting_a_queued_waiter_leaves_no_trace_and_the_next_waiter_gets_the_key() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let aborted = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let patient = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let abort_result = RefCell::new(None);
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            let outcome = aborted.acquire_until(queued(60_000), rt.sleep(30)).await;
            *abort_result.borrow_mut() = Some(outcome);
        }),
        Box::pin(async {
            rt.sleep(1).await;
            assert!(patient.acquire(queued(60_000)).await.unwrap());
        }),
        Box::pin(async {
            rt.sleep(50).await;
            assert_eq!(store.waiting(), 1, "the aborted waiter is still queued");
            assert!(holder.release().await.unwrap());
        }),
    ];
    rt.join_all(tasks);
    assert!(matches!(
        abort_result.into_inner(),
        Some(Err(Error::Aborted))
    ));
    assert!(aborted.owner().is_none());
    assert!(
        patient.owner().is_some(),
        "the key went past the patient waiter"
    );
    assert_eq!(store.waiting(), 0);
}

#[test]
fn a_waiter_dropped_after_its_grant_releases_the_key_to_the_next() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let owner_a = keel_lock::OwnerToken::mint().unwrap();
    let owner_b = keel_lock::OwnerToken::mint().unwrap();
    let holder = keel_lock::OwnerToken::mint().unwrap();
    let k = key("k");
    assert!(store.acquire_sync(&k, &holder, ttl(10_000)).is_some());
    let b_got = Cell::new(false);
    {
        // A queues first, then is granted by the release, but its future is dropped before
        // it runs again (its caller went away).
        let mut a = Box::pin(store.acquire_or_wait_ms(&k, &owner_a, ttl(1_000), 60_000));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        let b = store.acquire_or_wait_ms(&k, &owner_b, ttl(1_000), 60_000);
        let tasks: Vec<Task> = vec![
            Box::pin(async {
                b_got.set(b.await.is_some());
            }),
            Box::pin(async {
                rt.sleep(10).await;
                assert!(store.release_sync(&k, &holder)); // hands over to A
                drop(a); // A never takes it: it must pass on to B
            }),
        ];
        rt.join_all(tasks);
    }
    assert!(b_got.get(), "the key stayed with the dropped waiter");
    assert_eq!(store.waiting(), 0);
}

#[test]
fn an_already_cancelled_acquire_touches_nothing() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let l = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let holder = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let outcome = rt.block_on(l.acquire_until(queued(1_000), std::future::ready(())));
    assert!(matches!(outcome, Err(Error::Aborted)));
    assert_eq!(store.waiting(), 0);
    assert!(rt.block_on(holder.release()).unwrap());
}

#[test]
fn the_memory_store_says_it_hands_over() {
    let rt = VirtualRuntime::new();
    assert!(MemoryLockStore::new(rt).hands_over());
}

#[test]
fn every_waiter_times_out_at_its_own_deadline_whatever_the_order_of_deadlines() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("k"), ttl(60_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let start = rt.now_ms();
    let gave_up = RefCell::new(Vec::new());
    let mut tasks: Vec<Task> = Vec::new();
    // Arrival order 0..5, deadlines out of order (a later arrival may give up first).
    for (i, timeout) in [(0u64, 500u64), (1, 100), (2, 300), (3, 50), (4, 400)] {
        let (store, rt, gave_up) = (&store, rt.clone(), &gave_up);
        tasks.push(Box::pin(async move {
            rt.sleep(i).await;
            let l = Lock::new(key("k"), ttl(1_000), store, rt.clone());
            assert!(!l.acquire(queued(timeout)).await.unwrap());
            gave_up.borrow_mut().push((i, rt.now_ms() - start));
        }));
    }
    rt.join_all(tasks);
    let mut seen = gave_up.into_inner();
    seen.sort_unstable();
    assert_eq!(seen, vec![(0, 500), (1, 101), (2, 302), (3, 53), (4, 404)]);
    assert_eq!(store.waiting(), 0);
}

#[test]
fn a_busy_queue_keeps_one_timer_not_one_per_waiter() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let before = rt.timers_started();
    let mut tasks: Vec<Task> = Vec::new();
    for _ in 0..20 {
        let (store, rt) = (&store, rt.clone());
        tasks.push(Box::pin(async move {
            for _ in 0..5 {
                let l = Lock::new(key("busy"), ttl(10_000), store, rt.clone());
                let ran = l
                    .run(queued(60_000), |_| async { rt.sleep(1).await })
                    .await
                    .unwrap();
                assert!(ran.is_some());
            }
        }));
    }
    rt.join_all(tasks);
    let timers = rt.timers_started() - before;
    // 100 runs: 100 timers are the tasks' own 1 ms sleeps; the queue adds a handful more.
    assert!(timers < 100 + 20, "{timers} timers for 100 waited runs");
    assert_eq!(store.waiting(), 0);
}

/// A holder that never releases; waiters joined at once in the order of `timeouts`. Answers
/// when each waiter's wait ended (ms from the start) and whether it got the key.
fn waits_behind_a_stuck_holder(holder_ttl: u64, timeouts: &[u64]) -> Vec<(u64, bool)> {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("stuck"), ttl(holder_ttl), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let start = rt.now_ms();
    let tasks: Vec<_> = timeouts
        .iter()
        .map(|&timeout| {
            let (store, rt) = (&store, rt.clone());
            Box::pin(async move {
                let l = Lock::new(key("stuck"), ttl(1_000), store, rt.clone());
                let got = l.acquire(queued(timeout)).await.unwrap();
                (rt.now_ms() - start, got)
            })
        })
        .collect();
    let ended = rt.join_all(tasks);
    assert_eq!(store.waiting(), 0);
    ended
}

#[test]
fn the_queue_keeps_its_timer_when_the_waiter_keeping_it_and_the_one_told_to_take_it_over_both_time_out(
) {
    // The first waiter keeps the queue's timer; the last, poked to take it over as the first
    // leaves, has timed out at the same moment: the one in the middle must still be timed.
    assert_eq!(
        waits_behind_a_stuck_holder(10_000, &[100, 1_000, 100]),
        vec![(100, false), (1_000, false), (100, false)]
    );
    // ... and still be handed the key when the stuck holder's TTL runs out.
    assert_eq!(
        waits_behind_a_stuck_holder(10_000, &[100, 20_000, 100]),
        vec![(100, false), (10_000, true), (100, false)]
    );
}

#[test]
fn a_holder_that_shortens_its_ttl_is_taken_over_at_the_new_expiry() {
    let rt = VirtualRuntime::new();
    let store = MemoryLockStore::new(rt.clone());
    let holder = Lock::new(key("short"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let start = rt.now_ms();
    let took_over = Cell::new(None);
    let waiter = async {
        let l = Lock::new(key("short"), ttl(1_000), &store, rt.clone());
        assert!(l.acquire(queued(60_000)).await.unwrap());
        took_over.set(Some(rt.now_ms() - start));
    };
    let shorten = async {
        rt.sleep(100).await; // the waiter keeps the queue's timer for the holder's 10 s by now
        holder.extend(Some(ttl(200))).await.unwrap(); // then stops extending: expires at 300
    };
    rt.join_all(vec![
        Box::pin(waiter) as std::pin::Pin<Box<dyn Future<Output = ()>>>,
        Box::pin(shorten),
    ]);
    assert_eq!(took_over.get(), Some(300));
}

/// A store that hands over (the memory store's queue) but, `lose` times, loses a caller's place
/// in it — as Redis restarted without persistence would — and answers that wait no after 20 ms
/// (or at its end, if sooner). Counts the waits asked for, and the time each was asked to last.
struct LosingPlaces {
    inner: MemoryLockStore<VirtualRuntime>,
    rt: VirtualRuntime,
    lose: Cell<u32>,
    waits: RefCell<Vec<u64>>,
}

impl LosingPlaces {
    fn new(rt: &VirtualRuntime, lose: u32) -> Self {
        LosingPlaces {
            inner: MemoryLockStore::new(rt.clone()),
            rt: rt.clone(),
            lose: Cell::new(lose),
            waits: RefCell::new(Vec::new()),
        }
    }
}

impl LockStore for LosingPlaces {
    type Error = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "losing-places"
    }
    fn hands_over(&self) -> bool {
        true
    }
    async fn acquire(
        &self,
        key: &keel_lock::Key,
        owner: &keel_lock::OwnerToken,
        ttl: keel_lock::Ttl,
    ) -> Result<Option<keel_lock::Grant>, Self::Error> {
        self.inner.acquire(key, owner, ttl).await
    }
    async fn release(
        &self,
        key: &keel_lock::Key,
        owner: &keel_lock::OwnerToken,
    ) -> Result<bool, Self::Error> {
        self.inner.release(key, owner).await
    }
    async fn extend(
        &self,
        key: &keel_lock::Key,
        owner: &keel_lock::OwnerToken,
        ttl: keel_lock::Ttl,
    ) -> Result<bool, Self::Error> {
        self.inner.extend(key, owner, ttl).await
    }
    async fn is_locked(&self, key: &keel_lock::Key) -> Result<bool, Self::Error> {
        self.inner.is_locked(key).await
    }
    async fn remaining_time(&self, key: &keel_lock::Key) -> Result<Option<u64>, Self::Error> {
        self.inner.remaining_time(key).await
    }
    async fn acquire_or_wait(
        &self,
        key: &keel_lock::Key,
        owner: &keel_lock::OwnerToken,
        ttl: keel_lock::Ttl,
        wait: keel_lock::Wait,
    ) -> Result<Option<keel_lock::Grant>, Self::Error> {
        self.waits.borrow_mut().push(wait.wait_ms);
        if self.lose.get() > 0 {
            self.lose.set(self.lose.get() - 1);
            if let Some(grant) = self.inner.acquire(key, owner, ttl).await? {
                return Ok(Some(grant));
            }
            self.rt.sleep(wait.wait_ms.min(20)).await;
            return Ok(None);
        }
        self.inner.acquire_or_wait(key, owner, ttl, wait).await
    }
}

#[test]
fn a_wait_the_store_answers_no_early_queues_again_for_what_is_left() {
    let rt = VirtualRuntime::new();
    let store = LosingPlaces::new(&rt, 1);
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    let tasks: Vec<Task> = vec![
        Box::pin(async {
            assert!(waiter.acquire(queued(1_000)).await.unwrap());
        }),
        Box::pin(async {
            rt.sleep(300).await;
            assert!(holder.release().await.unwrap());
        }),
    ];
    rt.join_all(tasks);
    // Lost at 20 ms, asked again after one 50 ms pause for the 930 ms left, handed the key at
    // the release.
    assert_eq!(*store.waits.borrow(), vec![1_000, 930]);
    assert_eq!(rt.now_ms() - start, 300);
    assert!(waiter.owner().is_some());
}

#[test]
fn a_store_that_keeps_answering_no_early_is_asked_once_a_pause_until_the_timeout() {
    let rt = VirtualRuntime::new();
    let store = LosingPlaces::new(&rt, u32::MAX);
    let holder = Lock::new(key("k"), ttl(10_000), &store, rt.clone());
    assert!(rt
        .block_on(holder.acquire(AcquireOptions::default()))
        .unwrap());
    let waiter = Lock::new(key("k"), ttl(1_000), &store, rt.clone());
    let start = rt.now_ms();
    assert!(!rt.block_on(waiter.acquire(queued(500))).unwrap());
    // Each wait is lost after 20 ms and asked again 50 ms later, for what is left, while more
    // than a pause is left: at 0, 70, …, 490 ms; the last one's no comes at the timeout.
    let waits = store.waits.borrow().clone();
    assert_eq!(waits, vec![500, 430, 360, 290, 220, 150, 80, 10]);
    assert_eq!(rt.now_ms() - start, 500);
}
