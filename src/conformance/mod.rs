//! The `LockStore` contract as executable properties, one function per property. Every store
//! keel-lock ships runs these in its tests, and the JS kit `keel-lock/testing` runs the same
//! functions against any JS store — one source of truth for what "is a lock" means.
//!
//! Each property uses fresh random keys under [`ConformanceOptions::key_prefix`], so it can run
//! against a shared, live store. Expiry properties really wait (by the runtime's clock) for a
//! short TTL to pass.
//!
//! Two properties need the owner's extend to reach the store while a short-TTL lock is still
//! live. When that extend is refused, but the whole short TTL passed between sending the acquire
//! and the extend's answer and the key no longer reads as held, the refusal proves nothing (the
//! lock may really have expired in flight), so the property is tried again with fresh keys, up
//! to [`TRIES_WITHIN_SHORT_TTL`] times. A store that is that slow every time fails with a message
//! saying so, not with a false violation.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl};
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

mod inspect;
mod multi;
mod shared;

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

/// How many times a property whose steps must land inside the short TTL is tried when the store
/// was too slow to judge it.
pub const TRIES_WITHIN_SHORT_TTL: u32 = 3;

/// Stores count their clocks in whole milliseconds: an answer this close to the short TTL is
/// treated as having outlasted it.
const CLOCK_SLACK_MS: u64 = 2;

/// One try of a property that must land inside the short TTL.
enum Try {
    /// The store's answers could be judged, and kept the property.
    Judged,
    /// The owner's extend was refused this many ms after the acquire was sent, the whole short
    /// TTL, and the key no longer reads as held: the try proves nothing.
    TooSlow(u64),
}

/// A property the store broke, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The property's name (the function's name).
    pub property: &'static str,
    /// What was observed.
    pub message: String,
}

/// A property that was not broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The store kept the property.
    Holds,
    /// The property does not apply to this store, and why: a finding, not a failure (a store
    /// without fences is still a lock, just one whose holders cannot fence their writes).
    NotApplicable(String),
}

impl From<()> for Verdict {
    fn from((): ()) -> Self {
        Verdict::Holds
    }
}

/// The outcome of one property.
pub type PropertyResult = Result<Verdict, Violation>;

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

    fn check(&self, ok: bool, message: &str) -> Result<(), Violation> {
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

    /// Runs `once` until a try can be judged, at most [`TRIES_WITHIN_SHORT_TTL`] times.
    async fn within_short_ttl<F, Fut>(&self, mut once: F) -> Result<(), Violation>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Try, Violation>>,
    {
        let mut fastest = u64::MAX;
        for _ in 0..TRIES_WITHIN_SHORT_TTL {
            match once().await? {
                Try::Judged => return Ok(()),
                Try::TooSlow(ms) => fastest = fastest.min(ms),
            }
        }
        Err(self.fail(format!(
            "the owner's extend answered false, but in each of {TRIES_WITHIN_SHORT_TTL} tries \
             {fastest} ms or more passed from sending the acquire to the extend's answer, the \
             whole short TTL of {} ms: too slow to judge; give the check a longer short TTL",
            self.short().as_ms()
        )))
    }

    /// The owner's extend of its short-TTL lock on a fresh `key`, whose acquire was sent at
    /// `started`: `Ok(None)` when granted. A refusal is a violation when it came inside the short
    /// TTL, or when the key still reads as held after it (only this owner took the key);
    /// otherwise the lock may have expired in flight, and the try is too slow to judge.
    async fn owner_extends(
        &self,
        key: &Key,
        owner: &OwnerToken,
        started: u64,
    ) -> Result<Option<Try>, Violation> {
        if self.extend(key, owner, self.long()).await? {
            return Ok(None);
        }
        let elapsed = self.runtime.monotonic_ms().saturating_sub(started);
        let short = self.short().as_ms();
        let violation = if elapsed + CLOCK_SLACK_MS < short {
            format!(
                "the owner's extend answered false {elapsed} ms after its acquire was sent, \
                 inside the short TTL of {short} ms"
            )
        } else if self.is_locked(key).await? {
            "the owner's extend answered false while its lock was still held (isLocked answered \
             true after the refusal)"
                .to_owned()
        } else {
            return Ok(Some(Try::TooSlow(elapsed)));
        };
        // Best effort: the refused extend is what gets reported, even if this release fails too.
        let _ = self.release(key, owner).await;
        Err(self.fail(violation))
    }

    async fn outlive_short_ttl(&self) {
        let wait = self.options.short_ttl_ms + self.options.settle_ms;
        self.runtime.sleep(wait).await;
    }

    fn store_failed(&self, op: &str) -> impl FnOnce(S::Error) -> Violation + '_ {
        let op = op.to_owned();
        move |e| self.fail(format!("store.{op} failed: {e:?}"))
    }

    async fn grant(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Violation> {
        self.store
            .acquire(key, owner, ttl)
            .await
            .map_err(self.store_failed("acquire"))
    }
    async fn acquire(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Violation> {
        Ok(self.grant(key, owner, ttl).await?.is_some())
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

    async fn acquire_is_exclusive(&self) -> Result<(), Violation> {
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

    async fn concurrent_acquires_have_one_winner(&self) -> Result<(), Violation> {
        let key = self.key()?;
        let owners = self.contenders()?;
        let winners = self.race(&key, &owners).await?.len();
        let result = self.check(
            winners == 1,
            &format!(
                "{} concurrent acquires of one free key: {winners} won, expected exactly 1",
                owners.len()
            ),
        );
        for o in &owners {
            self.release(&key, o).await?;
        }
        result
    }

    /// Every owner in `owners` tries `key` at once; answers the grants of the winners.
    async fn race(&self, key: &Key, owners: &[OwnerToken]) -> Result<Vec<Grant>, Violation> {
        let races = owners.iter().map(|o| self.grant(key, o, self.long()));
        let mut grants = Vec::new();
        for outcome in join_all(races.collect()).await {
            grants.extend(outcome?);
        }
        Ok(grants)
    }

    fn contenders(&self) -> Result<Vec<OwnerToken>, Violation> {
        (0..self.options.contenders.max(2))
            .map(|_| self.owner())
            .collect()
    }

    async fn concurrent_acquires_of_expired_key_have_one_winner(&self) -> Result<(), Violation> {
        let (key, first) = (self.key()?, self.owner()?);
        self.acquire(&key, &first, self.short()).await?;
        self.outlive_short_ttl().await;
        let owners = self.contenders()?;
        let winners = self.race(&key, &owners).await?.len();
        let result = self.check(
            winners == 1,
            &format!(
                "{} concurrent acquires of one expired key: {winners} won, expected exactly 1",
                owners.len()
            ),
        );
        for o in &owners {
            self.release(&key, o).await?;
        }
        result
    }

    async fn keys_are_independent(&self) -> Result<(), Violation> {
        let (one, two, a, b) = (self.key()?, self.key()?, self.owner()?, self.owner()?);
        self.check(
            self.acquire(&one, &a, self.long()).await?,
            "acquire of a free key answered false",
        )?;
        self.check(
            self.acquire(&two, &b, self.long()).await?,
            "holding one key kept another key from being acquired",
        )?;
        self.check(
            !self.release(&two, &a).await? && !self.extend(&two, &a, self.long()).await?,
            "the holder of one key released or extended another key",
        )?;
        self.check(
            self.release(&one, &a).await?,
            "the owner's release answered false",
        )?;
        self.check(
            self.is_locked(&two).await?,
            "releasing one key freed another",
        )?;
        self.release(&two, &b).await.map(drop)
    }

    /// The fence of a grant, or a violation when this store gives fences to some grants only.
    fn fence_of(&self, grant: Option<Grant>, what: &str) -> Result<Fence, Violation> {
        match grant {
            Some(g) => g.fence().ok_or_else(|| {
                self.fail(format!(
                    "{what} came without a fence, though the store fenced an earlier grant"
                ))
            }),
            None => Err(self.fail(format!("{what}: acquire of a free key answered false"))),
        }
    }

    fn increases(&self, before: Fence, after: Fence, what: &str) -> Result<(), Violation> {
        self.check(
            after > before,
            &format!("{what}: fence {after} after fence {before}; fences must strictly increase"),
        )
    }

    async fn fences_increase(&self) -> Result<Verdict, Violation> {
        let key = self.key()?;
        let first = self.owner()?;
        let Some(grant) = self.grant(&key, &first, self.long()).await? else {
            return Err(self.fail("acquire of a free key answered false"));
        };
        let Some(mut last) = grant.fence() else {
            self.release(&key, &first).await?;
            return Ok(Verdict::NotApplicable(
                "the store hands out no fences: its locks have fence null".into(),
            ));
        };
        // After a release.
        self.release(&key, &first).await?;
        let second = self.owner()?;
        let fence = self.fence_of(
            self.grant(&key, &second, self.short()).await?,
            "acquire after release",
        )?;
        self.increases(last, fence, "acquire after release")?;
        last = fence;
        // After expiry (the holder never released).
        self.outlive_short_ttl().await;
        let owners = self.contenders()?;
        let grants = self.race(&key, &owners).await?;
        let [grant] = grants[..] else {
            return Err(self.fail(format!(
                "{} concurrent acquires of an expired key: {} won, expected exactly 1",
                owners.len(),
                grants.len()
            )));
        };
        let fence = self.fence_of(Some(grant), "acquire after expiry")?;
        self.increases(
            last,
            fence,
            "acquire after expiry by one of many contenders",
        )?;
        last = fence;
        for o in &owners {
            self.release(&key, o).await?;
        }
        // Another key's acquisitions in between do not reset this key's fences.
        let (other, third) = (self.key()?, self.owner()?);
        self.acquire(&other, &third, self.long()).await?;
        self.release(&other, &third).await?;
        let fourth = self.owner()?;
        let fence = self.fence_of(
            self.grant(&key, &fourth, self.long()).await?,
            "acquire after another key's use",
        )?;
        self.increases(last, fence, "acquire after release, again")?;
        self.release(&key, &fourth).await?;
        Ok(Verdict::Holds)
    }

    async fn release_requires_owner(&self) -> Result<(), Violation> {
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

    async fn extend_requires_owner(&self) -> Result<(), Violation> {
        self.within_short_ttl(|| self.extend_requires_owner_once())
            .await
    }

    async fn extend_requires_owner_once(&self) -> Result<Try, Violation> {
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.check(
            !self.extend(&key, &a, self.long()).await?,
            "extend of a free key answered true",
        )?;
        let started = self.runtime.monotonic_ms();
        self.acquire(&key, &a, self.short()).await?;
        self.check(
            !self.extend(&key, &b, self.long()).await?,
            "a stranger's extend answered true",
        )?;
        if let Some(slow) = self.owner_extends(&key, &a, started).await? {
            return Ok(slow);
        }
        self.release(&key, &a).await?;
        Ok(Try::Judged)
    }

    async fn released_key_is_free(&self) -> Result<(), Violation> {
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

    async fn expired_key_is_free(&self) -> Result<(), Violation> {
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

    async fn extend_after_expiry_fails(&self) -> Result<(), Violation> {
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

    async fn late_release_keeps_new_holder(&self) -> Result<(), Violation> {
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

    async fn extend_pushes_expiry_out(&self) -> Result<(), Violation> {
        self.within_short_ttl(|| self.extend_pushes_expiry_out_once())
            .await
    }

    async fn extend_pushes_expiry_out_once(&self) -> Result<Try, Violation> {
        let (key, a) = (self.key()?, self.owner()?);
        let started = self.runtime.monotonic_ms();
        self.acquire(&key, &a, self.short()).await?;
        if let Some(slow) = self.owner_extends(&key, &a, started).await? {
            return Ok(slow);
        }
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
        self.release(&key, &a).await?;
        Ok(Try::Judged)
    }

    async fn inspection_agrees(&self) -> Result<(), Violation> {
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
                Ctx { store, runtime, options, property: stringify!($name) }.$name().await.map(Into::into)
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
    concurrent_acquires_of_expired_key_have_one_winner: "Many concurrent acquires of one expired key: exactly one wins (expiry and acquire are one atomic step).",
    release_requires_owner: "Only the owner's release frees the key; a stranger's answers false and changes nothing.",
    extend_requires_owner: "Only the owner's extend succeeds; extending a free key fails.",
    released_key_is_free: "After release, the key is free for anyone.",
    expired_key_is_free: "After the TTL passes, the key is free and reads as unheld.",
    extend_after_expiry_fails: "Extending a lock whose TTL passed fails and does not revive it.",
    late_release_keeps_new_holder: "An expired holder's release and extend fail and leave the new holder's lock in place.",
    extend_pushes_expiry_out: "Extend moves the expiry: the key outlives its original TTL.",
    inspection_agrees: "isLocked and remainingTime agree with the lock's state; remainingTime is within the TTL.",
    keys_are_independent: "Holding, releasing or extending one key does nothing to another.",
    shared_holds_stay_within_the_limit: "Many concurrent permits of one key: exactly `limit` are granted, and weights count (not applicable to a store without shared holds).",
    each_permit_is_its_own_lease: "A permit expires alone at its own TTL, its place is free again, the others stay; a stranger can neither release nor extend one.",
    shared_and_exclusive_holds_exclude: "A lock is refused beside a shared hold, and a shared hold beside a lock.",
    a_second_limit_is_refused: "A permit under another limit than the live permits' is refused as a limit mismatch naming the held limit, never granted.",
    shared_fences_increase: "Every permit's fence is higher than the one before, and a lock after the permits higher still.",
    nobody_passes_a_queued_waiter: "A permit that would fit is refused while a waiter asking for more is queued first; a release hands the waiter its permits (stores that queue shared holds).",
    several_keys_all_or_nothing: "A multi-key lock refused for one held key leaves none of its others held; granted, it holds them all; released, none.",
    opposite_order_sets_complete: "Multi-key locks over overlapping sets, given in opposite orders and run at once, all complete: no deadlock.",
    sets_taken_in_one_step_are_atomic: "A store's one-step acquireMany grants every key to its owner or changes nothing: refused beside a held key or a permit, exactly one of several overlapping sets raced at once (not applicable to a store without it).",
    inspect_agrees_with_the_holds: "inspect shows no holder of a free, released or expired key, and one holder with the grant's fence and no metadata — never its token — of a key held without any (not applicable to a store without inspect).",
    metadata_is_kept_per_hold: "A hold's metadata is shown by inspect, kept through extend and a hand-over to a waiter (whose own it becomes), and each permit shows its own (not applicable to a store that keeps none).",
    fences_increase: "Each grant's fence is higher than every earlier one for its key, across release, expiry and competing acquirers (not applicable to a store without fences).",
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
