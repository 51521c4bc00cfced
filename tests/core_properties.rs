//! Property tests of the retry / timeout / TTL logic, on virtual time so that every case runs
//! minutes of lock time in microseconds. The RNG seed is fixed, so runs are reproducible.
// Native only: virtual time and proptest are native dev-dependencies; the wasm suites live in
// tests/wasm_*.rs.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::cell::Cell;

use common::ScriptedStore;

use keel_lock::virtual_time::VirtualRuntime;
use keel_lock::{AcquireOptions, Key, Lock, MemoryLockStore, Runtime, Ttl};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x6b65_656c),
        failure_persistence: None,
        // A broken retry loop panics in every case; keep the failing run short.
        max_shrink_iters: 64,
        ..Config::default()
    }
}

fn key() -> Key {
    Key::new("prop").unwrap()
}

fn ttl(ms: u64) -> Ttl {
    Ttl::from_ms(ms).unwrap()
}

fn wait(timeout_ms: u64, retry_delay_ms: u64) -> AcquireOptions {
    AcquireOptions {
        timeout_ms,
        retry_delay_ms,
    }
}

fn timeouts() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 6 => 0u64..3_000]
}

fn retry_delays() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 6 => 0u64..400]
}

proptest! {
    #![proptest_config(config(512))]

    /// A holder takes the key with `ttl` and works for `work` ms (then releases), so the key
    /// frees at `min(work, ttl)`. A waiter that starts at the same instant with
    /// (`timeout`, `retry_delay`) tries at 0, d, 2d, … and once more at the deadline
    /// (d = max(retry_delay, 1)). It acquires iff the key frees no later than the deadline, and
    /// then at the first attempt at or after the moment it frees; otherwise it gives up exactly
    /// at the deadline after ceil(timeout / d) + 1 attempts.
    #[test]
    fn waiter_acquires_iff_the_key_frees_by_the_deadline(
        holder_ttl in 1u64..3_000,
        work in 1u64..5_000,
        timeout in timeouts(),
        retry_delay in retry_delays(),
    ) {
        let rt = VirtualRuntime::new();
        let store = ScriptedStore::new(&rt);
        let holder = Lock::new(key(), ttl(holder_ttl), &store, rt.clone());
        let waiter = Lock::new(key(), ttl(10_000_000), &store, rt.clone());
        let start = rt.now_ms();
        let outcome = Cell::new(None);
        let holder_ran = Cell::new(false);
        // The holder comes first: when it frees the key at the very instant of the waiter's
        // attempt, the executor polls it first, so "frees at the deadline" counts as "by".
        let tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>> = vec![
            Box::pin(async {
                let ran = holder
                    .run(AcquireOptions::immediately(), |_| rt.sleep(work))
                    .await
                    .unwrap();
                holder_ran.set(ran.is_some());
            }),
            Box::pin(async {
                let won = waiter.acquire(wait(timeout, retry_delay)).await.unwrap();
                outcome.set(Some((won, rt.now_ms() - start)));
            }),
        ];
        rt.join_all(tasks);
        prop_assert!(holder_ran.get());

        let (won, at) = outcome.get().unwrap();
        let frees_at = work.min(holder_ttl);
        let d = retry_delay.max(1);
        prop_assert_eq!(won, frees_at <= timeout, "won at {} ms", at);
        if won {
            let expected = (frees_at.div_ceil(d) * d).min(timeout);
            prop_assert_eq!(at, expected);
            prop_assert!(!waiter.is_expired());
            // The holder's release (possibly late, after its TTL) left the waiter's hold alone.
            prop_assert!(rt.block_on(waiter.release()).unwrap());
        } else {
            prop_assert_eq!(at, timeout);
            // One attempt by the holder, the rest by the waiter.
            prop_assert_eq!(u64::from(store.acquires.get()) - 1, timeout.div_ceil(d) + 1);
            prop_assert!(waiter.owner().is_none());
        }
    }

    /// Under memory-store latency of zero, the local deadline behind is_expired() is exact:
    /// after any sequence of waits and extends it says "expired" exactly when the store no
    /// longer holds the key for this handle.
    #[test]
    fn is_expired_agrees_with_the_store(
        initial in 1u64..500,
        steps in prop::collection::vec((0u64..300, prop::option::of(1u64..500)), 1..20),
    ) {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let lock = Lock::new(key(), ttl(initial), &store, rt.clone());
        prop_assert!(rt.block_on(lock.acquire(AcquireOptions::immediately())).unwrap());
        for (advance, extend) in steps {
            rt.advance(advance);
            let held = store.remaining_time_sync(&key()).is_some();
            prop_assert_eq!(lock.is_expired(), !held);
            if let Some(ms) = extend {
                let extended = rt.block_on(lock.extend(Some(ttl(ms)))).is_ok();
                prop_assert_eq!(extended, held);
                prop_assert_eq!(lock.is_expired(), !extended);
                if extended {
                    prop_assert_eq!(store.remaining_time_sync(&key()), Some(ms));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// N callers (one handle each, staggered starts) run() on one key with generous timeouts:
    /// every task runs exactly once and never two at a time.
    #[test]
    fn concurrent_runs_all_run_once_and_never_overlap(
        callers in prop::collection::vec((1u64..100, 0u64..50), 2..30),
        retry_delay in 0u64..100,
    ) {
        let rt = VirtualRuntime::new();
        let store = ScriptedStore::new(&rt);
        let locks: Vec<_> = callers
            .iter()
            .map(|_| Lock::new(key(), ttl(1_000), &store, rt.clone()))
            .collect();
        let inside = Cell::new(0u32);
        let most_inside = Cell::new(0u32);
        let runs: Vec<Cell<u32>> = callers.iter().map(|_| Cell::new(0)).collect();
        let busy_ms = Cell::new(0u64);
        let start = rt.now_ms();
        let futures: Vec<_> = callers
            .iter()
            .enumerate()
            .map(|(i, &(work, delay))| {
                let (rt, lock, inside, most_inside, runs, busy_ms) =
                    (&rt, &locks[i], &inside, &most_inside, &runs, &busy_ms);
                async move {
                    rt.sleep(delay).await;
                    lock.run(wait(600_000, retry_delay), |_| async move {
                        inside.set(inside.get() + 1);
                        most_inside.set(most_inside.get().max(inside.get()));
                        rt.sleep(work).await;
                        busy_ms.set(busy_ms.get() + work);
                        inside.set(inside.get() - 1);
                        runs[i].set(runs[i].get() + 1);
                    })
                    .await
                    .unwrap()
                }
            })
            .collect();
        let outcomes = rt.join_all(futures);
        prop_assert!(outcomes.iter().all(Option::is_some), "a caller timed out: {:?}", outcomes);
        prop_assert!(runs.iter().all(|r| r.get() == 1));
        prop_assert_eq!(most_inside.get(), 1, "two tasks inside at once");
        // Serialised work takes at least the sum of the tasks' durations.
        prop_assert!(rt.now_ms() - start >= busy_ms.get());
        prop_assert!(store.inner.remaining_time_sync(&key()).is_none(), "key left held");
    }

    /// With timeout 0, exactly one of N simultaneous run() calls runs; the rest answer None.
    #[test]
    fn with_timeout_zero_exactly_one_of_n_runs(
        works in prop::collection::vec(1u64..100, 2..30),
        retry_delay in 0u64..100,
    ) {
        let rt = VirtualRuntime::new();
        let store = ScriptedStore::new(&rt);
        let locks: Vec<_> = works
            .iter()
            .map(|_| Lock::new(key(), ttl(1_000), &store, rt.clone()))
            .collect();
        let ran = Cell::new(0u32);
        let futures: Vec<_> = works
            .iter()
            .zip(&locks)
            .map(|(&work, lock)| {
                let (rt, ran) = (&rt, &ran);
                async move {
                    lock.run(wait(0, retry_delay), |_| async move {
                        ran.set(ran.get() + 1);
                        rt.sleep(work).await;
                    })
                    .await
                    .unwrap()
                }
            })
            .collect();
        let outcomes = rt.join_all(futures);
        prop_assert_eq!(outcomes.iter().filter(|o| o.is_some()).count(), 1);
        prop_assert_eq!(ran.get(), 1);
        prop_assert!(store.inner.remaining_time_sync(&key()).is_none(), "key left held");
    }
}
