//! The `LockStore` contract as executable properties, one function per property. Every store
//! keel-lock ships runs these in its tests, and the JS kit `keel-lock/testing` runs the same
//! functions against any JS store — one source of truth for what "is a lock" means.
//!
//! Each property uses fresh random keys under [`ConformanceOptions::key_prefix`], so it can run
//! against a shared, live store. Expiry properties really wait (by the runtime's clock) for a
//! short TTL to pass.

use std::cell::Cell;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::input::{Key, Ttl};
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// Knobs for a conformance run.
#[derive(Debug, Clone)]
pub struct ConformanceOptions {
    /// Prefix of every key the run touches.
    pub key_prefix: String,
    /// Short TTL used by the expiry properties, in ms.
    pub short_ttl_ms: u64,
    /// Extra wait past the short TTL before a key must be free (clock granularity, latency).
    pub settle_ms: u64,
    /// Concurrent acquirers racing for one key.
    pub contenders: usize,
}

impl Default for ConformanceOptions {
    fn default() -> Self {
        ConformanceOptions {
            key_prefix: "keel-lock-conformance:".into(),
            short_ttl_ms: 150,
            settle_ms: 100,
            contenders: 50,
        }
    }
}

/// A property the store broke, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The property's name (the function's name).
    pub property: &'static str,
    /// What was observed.
    pub message: String,
}

/// The outcome of one property.
pub type PropertyResult = Result<(), Violation>;

struct Ctx<'a, S, R> {
    store: &'a S,
    runtime: &'a R,
    options: &'a ConformanceOptions,
    property: &'static str,
}

impl<S: LockStore, R: Runtime> Ctx<'_, S, R>
where
    S::Error: Debug,
{
    fn fail(&self, message: impl Into<String>) -> Violation {
        Violation {
            property: self.property,
            message: message.into(),
        }
    }

    fn check(&self, ok: bool, message: &str) -> PropertyResult {
        if ok {
            Ok(())
        } else {
            Err(self.fail(message))
        }
    }

    fn key(&self) -> Result<Key, Violation> {
        let token = OwnerToken::mint().map_err(|e| self.fail(format!("no randomness: {e}")))?;
        Key::new(format!(
            "{}{}:{}",
            self.options.key_prefix,
            self.property,
            token.as_str().get(..12).unwrap_or_default()
        ))
        .map_err(|e| self.fail(format!("key prefix unusable: {e}")))
    }

    fn owner(&self) -> Result<OwnerToken, Violation> {
        OwnerToken::mint().map_err(|e| self.fail(format!("no randomness: {e}")))
    }

    fn short(&self) -> Ttl {
        Ttl::from_ms(self.options.short_ttl_ms.max(1)).unwrap_or_default()
    }

    fn long(&self) -> Ttl {
        Ttl::from_ms(60_000).unwrap_or_default()
    }

    async fn outlive_short_ttl(&self) {
        let wait = self.options.short_ttl_ms + self.options.settle_ms;
        self.runtime.sleep(wait).await;
    }

    fn store_failed(&self, op: &str) -> impl FnOnce(S::Error) -> Violation + '_ {
        let op = op.to_owned();
        move |e| self.fail(format!("store.{op} failed: {e:?}"))
    }

    async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Violation> {
        self.store
            .acquire(key, owner, ttl)
            .await
            .map_err(self.store_failed("acquire"))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Violation> {
        self.store
            .release(key, owner)
            .await
            .map_err(self.store_failed("release"))
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Violation> {
        self.store
            .extend(key, owner, ttl)
            .await
            .map_err(self.store_failed("extend"))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Violation> {
        self.store
            .is_locked(key)
            .await
            .map_err(self.store_failed("isLocked"))
    }
    async fn remaining(&self, key: &Key) -> Result<Option<u64>, Violation> {
        self.store
            .remaining_time(key)
            .await
            .map_err(self.store_failed("remainingTime"))
    }

    async fn acquire_is_exclusive(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.check(
            self.acquire(&key, &a, self.long()).await?,
            "acquire of a free key answered false",
        )?;
        self.check(
            !self.acquire(&key, &b, self.long()).await?,
            "a second owner acquired a held key",
        )?;
        self.check(
            !self.acquire(&key, &a, self.long()).await?,
            "the holder re-acquired its own held key (acquire must be set-if-absent)",
        )?;
        self.release(&key, &a).await.map(drop)
    }

    async fn concurrent_acquires_have_one_winner(&self) -> PropertyResult {
        let key = self.key()?;
        let owners = (0..self.options.contenders.max(2))
            .map(|_| self.owner())
            .collect::<Result<Vec<_>, _>>()?;
        let winners = Cell::new(0usize);
        let races = owners.iter().map(|o| {
            let (key, winners) = (&key, &winners);
            async move {
                if self.acquire(key, o, self.long()).await? {
                    winners.set(winners.get() + 1);
                }
                Ok::<(), Violation>(())
            }
        });
        for r in join_all(races.collect()).await {
            r?;
        }
        let n = winners.get();
        let result = self.check(
            n == 1,
            &format!(
                "{} concurrent acquires of one free key: {n} won, expected exactly 1",
                owners.len()
            ),
        );
        for o in &owners {
            self.release(&key, o).await?;
        }
        result
    }

    async fn release_requires_owner(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.acquire(&key, &a, self.long()).await?;
        self.check(
            !self.release(&key, &b).await?,
            "a stranger's release answered true",
        )?;
        self.check(
            self.is_locked(&key).await?,
            "a stranger's release freed the key",
        )?;
        self.check(
            self.release(&key, &a).await?,
            "the owner's release answered false",
        )?;
        self.check(
            !self.release(&key, &a).await?,
            "a second release by the owner answered true",
        )
    }

    async fn extend_requires_owner(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.check(
            !self.extend(&key, &a, self.long()).await?,
            "extend of a free key answered true",
        )?;
        self.acquire(&key, &a, self.short()).await?;
        self.check(
            !self.extend(&key, &b, self.long()).await?,
            "a stranger's extend answered true",
        )?;
        self.check(
            self.extend(&key, &a, self.long()).await?,
            "the owner's extend answered false",
        )?;
        self.release(&key, &a).await.map(drop)
    }

    async fn released_key_is_free(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.acquire(&key, &a, self.long()).await?;
        self.release(&key, &a).await?;
        self.check(
            !self.is_locked(&key).await?,
            "isLocked is true after release",
        )?;
        self.check(
            self.acquire(&key, &b, self.long()).await?,
            "a released key could not be acquired",
        )?;
        self.release(&key, &b).await.map(drop)
    }

    async fn expired_key_is_free(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.acquire(&key, &a, self.short()).await?;
        self.outlive_short_ttl().await;
        self.check(
            !self.is_locked(&key).await?,
            "isLocked is true after the TTL passed",
        )?;
        self.check(
            self.remaining(&key).await?.is_none(),
            "remainingTime is not null after the TTL passed",
        )?;
        self.check(
            self.acquire(&key, &b, self.long()).await?,
            "an expired key could not be acquired",
        )?;
        self.release(&key, &b).await.map(drop)
    }

    async fn extend_after_expiry_fails(&self) -> PropertyResult {
        let (key, a) = (self.key()?, self.owner()?);
        self.acquire(&key, &a, self.short()).await?;
        self.outlive_short_ttl().await;
        self.check(
            !self.extend(&key, &a, self.long()).await?,
            "extend of an expired lock answered true",
        )?;
        self.check(
            !self.is_locked(&key).await?,
            "extend of an expired lock revived it",
        )
    }

    async fn late_release_keeps_new_holder(&self) -> PropertyResult {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.acquire(&key, &a, self.short()).await?;
        self.outlive_short_ttl().await;
        self.check(
            self.acquire(&key, &b, self.long()).await?,
            "an expired key could not be acquired",
        )?;
        self.check(
            !self.release(&key, &a).await?,
            "the expired holder's release answered true",
        )?;
        self.check(
            !self.extend(&key, &a, self.long()).await?,
            "the expired holder's extend answered true",
        )?;
        self.check(
            self.is_locked(&key).await?,
            "the expired holder's release freed the new holder's lock",
        )?;
        self.check(
            self.release(&key, &b).await?,
            "the new holder could not release",
        )
    }

    async fn extend_pushes_expiry_out(&self) -> PropertyResult {
        let (key, a) = (self.key()?, self.owner()?);
        self.acquire(&key, &a, self.short()).await?;
        self.check(
            self.extend(&key, &a, self.long()).await?,
            "the owner's extend answered false",
        )?;
        self.outlive_short_ttl().await;
        self.check(
            self.is_locked(&key).await?,
            "the key expired at its old deadline despite extend",
        )?;
        let left = self.remaining(&key).await?.unwrap_or(0);
        self.check(
            left > self.options.short_ttl_ms,
            &format!("remainingTime {left} ms after extending to 60000 ms"),
        )?;
        self.release(&key, &a).await.map(drop)
    }

    async fn inspection_agrees(&self) -> PropertyResult {
        let (key, a) = (self.key()?, self.owner()?);
        self.check(
            !self.is_locked(&key).await?,
            "isLocked is true for a never-used key",
        )?;
        self.check(
            self.remaining(&key).await?.is_none(),
            "remainingTime is not null for a never-used key",
        )?;
        let ttl = self.long();
        self.acquire(&key, &a, ttl).await?;
        self.check(
            self.is_locked(&key).await?,
            "isLocked is false for a held key",
        )?;
        match self.remaining(&key).await? {
            Some(ms) if ms > 0 && ms <= ttl.as_ms() => {}
            other => {
                // Spelled out rather than `{other:?}`: the same text without `Debug` machinery in
                // every wasm build that carries the properties.
                let was = match other {
                    Some(ms) => format!("Some({ms})"),
                    None => "None".to_owned(),
                };
                return Err(self.fail(format!(
                    "remainingTime of a key held for {} ms was {was}",
                    ttl.as_ms()
                )));
            }
        }
        self.release(&key, &a).await?;
        self.check(
            self.remaining(&key).await?.is_none(),
            "remainingTime is not null after release",
        )
    }
}

macro_rules! properties {
    ($($name:ident: $doc:literal),* $(,)?) => {
        /// Names of every property, in the order [`check_all`] runs them.
        pub const PROPERTIES: &[&str] = &[$(stringify!($name)),*];

        $(
            #[doc = $doc]
            pub async fn $name<S: LockStore, R: Runtime>(store: &S, runtime: &R, options: &ConformanceOptions) -> PropertyResult
            where
                S::Error: Debug,
            {
                Ctx { store, runtime, options, property: stringify!($name) }.$name().await
            }
        )*

        /// Runs every property in [`PROPERTIES`] order, one after another, and returns each outcome.
        pub async fn check_all<S: LockStore, R: Runtime>(
            store: &S,
            runtime: &R,
            options: &ConformanceOptions,
        ) -> Vec<(&'static str, PropertyResult)>
        where
            S::Error: Debug,
        {
            vec![$((stringify!($name), $name(store, runtime, options).await)),*]
        }
    };
}

properties! {
    acquire_is_exclusive: "A held key cannot be acquired again, not even by its holder: acquire is set-if-absent.",
    concurrent_acquires_have_one_winner: "Many concurrent acquires of one free key: exactly one wins (atomicity).",
    release_requires_owner: "Only the owner's release frees the key; a stranger's answers false and changes nothing.",
    extend_requires_owner: "Only the owner's extend succeeds; extending a free key fails.",
    released_key_is_free: "After release, the key is free for anyone.",
    expired_key_is_free: "After the TTL passes, the key is free and reads as unheld.",
    extend_after_expiry_fails: "Extending a lock whose TTL passed fails and does not revive it.",
    late_release_keeps_new_holder: "An expired holder's release and extend fail and leave the new holder's lock in place.",
    extend_pushes_expiry_out: "Extend moves the expiry: the key outlives its original TTL.",
    inspection_agrees: "isLocked and remainingTime agree with the lock's state; remainingTime is within the TTL.",
}

/// Polls every future in turn until all are done: concurrency without an executor dependency,
/// so the properties run the same natively, in wasm and in a component.
fn join_all<F: Future>(futures: Vec<F>) -> impl Future<Output = Vec<F::Output>> {
    struct JoinAll<F: Future> {
        futures: Vec<Pin<Box<F>>>,
        outputs: Vec<Option<F::Output>>,
    }
    // Futures are boxed (pinned on the heap) and outputs are plain values: moving the struct is fine.
    impl<F: Future> Unpin for JoinAll<F> {}
    impl<F: Future> Future for JoinAll<F> {
        type Output = Vec<F::Output>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let this = self.get_mut();
            for (fut, out) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
                if out.is_none() {
                    if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                        *out = Some(v);
                    }
                }
            }
            if this.outputs.iter().all(Option::is_some) {
                Poll::Ready(this.outputs.iter_mut().filter_map(Option::take).collect())
            } else {
                Poll::Pending
            }
        }
    }
    let outputs = futures.iter().map(|_| None).collect();
    JoinAll {
        futures: futures.into_iter().map(Box::pin).collect(),
        outputs,
    }
}
