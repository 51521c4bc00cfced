//! The shared-hold properties (semaphore permits, read locks): written against
//! [`LockStore::acquire_shared`], not applicable to a store that keeps no shared holds.

use std::fmt::Debug;
use std::future::Future;
use std::task::Poll;

use super::{join_all, Ctx, Verdict, Violation};
use crate::grant::Fence;
use crate::input::{Key, Ttl};
use crate::runtime::Runtime;
use crate::share::{Share, SharedGrant};
use crate::store::{LockStore, Wait};
use crate::token::OwnerToken;

impl<S: LockStore, R: Runtime> Ctx<'_, S, R>
where
    S::Error: Debug,
{
    /// `acquire_shared` of `weight` out of `limit`.
    pub(super) async fn shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        weight: u32,
        limit: u32,
    ) -> Result<SharedGrant, Violation> {
        let share = Share::new(weight, limit).map_err(|e| self.fail(e.to_string()))?;
        self.store
            .acquire_shared(key, owner, ttl, share)
            .await
            .map_err(self.store_failed("acquireShared"))
    }

    /// Whether the store keeps shared holds: its answer to one permit on a fresh key (given
    /// back at once). `Err` with the verdict for a store without them.
    pub(super) async fn keeps_shared_holds(&self) -> Result<Result<(), Verdict>, Violation> {
        let (key, owner) = (self.key()?, self.owner()?);
        match self.shared(&key, &owner, self.long(), 1, 2).await? {
            SharedGrant::Unsupported => Ok(Err(Verdict::NotApplicable(
                "the store keeps no shared holds (no acquireShared): semaphores and read locks \
                 are refused on it"
                    .into(),
            ))),
            SharedGrant::Granted(_) => {
                self.release(&key, &owner).await?;
                Ok(Ok(()))
            }
            other => Err(self.fail(format!(
                "acquireShared of a free key answered {other:?}, not a grant"
            ))),
        }
    }

    pub(super) async fn shared_holds_stay_within_the_limit(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        let key = self.key()?;
        let owners: Vec<_> = (0..8).map(|_| self.owner()).collect::<Result<_, _>>()?;
        let races = owners
            .iter()
            .map(|o| self.shared(&key, o, self.long(), 1, 3));
        let mut granted = 0;
        for answer in join_all(races.collect()).await {
            granted += usize::from(matches!(answer?, SharedGrant::Granted(_)));
        }
        let result = self.check(
            granted == 3,
            &format!("8 concurrent permits of a limit-3 key: {granted} granted, expected 3"),
        );
        for o in &owners {
            self.release(&key, o).await?;
        }
        result?;
        // Weights count: 2 + 2 does not fit in 3.
        let (a, b) = (self.owner()?, self.owner()?);
        self.shared(&key, &a, self.long(), 2, 3).await?;
        let second = self.shared(&key, &b, self.long(), 2, 3).await?;
        self.release(&key, &a).await?;
        self.release(&key, &b).await?;
        self.check(
            second == SharedGrant::Busy,
            &format!("2 permits beside 2 held of 3 answered {second:?}, expected busy"),
        )?;
        Ok(Verdict::Holds)
    }

    pub(super) async fn each_permit_is_its_own_lease(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        let (key, short, long, stranger) =
            (self.key()?, self.owner()?, self.owner()?, self.owner()?);
        let granted = |a: SharedGrant| matches!(a, SharedGrant::Granted(_));
        self.check(
            granted(self.shared(&key, &short, self.short(), 1, 2).await?)
                && granted(self.shared(&key, &long, self.long(), 1, 2).await?),
            "two permits of a limit-2 key were not both granted",
        )?;
        self.check(
            !self.release(&key, &stranger).await?
                && !self.extend(&key, &stranger, self.long()).await?,
            "a stranger released or extended a permit",
        )?;
        self.outlive_short_ttl().await;
        self.check(
            !self.extend(&key, &short, self.long()).await?,
            "a permit whose TTL passed was extended",
        )?;
        self.check(
            self.is_locked(&key).await?,
            "the live permit no longer reads as held after another expired",
        )?;
        let third = self.owner()?;
        let refilled = self.shared(&key, &third, self.long(), 1, 2).await?;
        self.check(
            self.extend(&key, &long, self.long()).await?,
            "the live permit could not be extended after another expired",
        )?;
        self.release(&key, &third).await?;
        self.check(
            self.release(&key, &long).await?,
            "the live permit's owner could not release it",
        )?;
        self.check(
            granted(refilled),
            &format!("the expired permit's place was not free again: {refilled:?}"),
        )?;
        Ok(Verdict::Holds)
    }

    pub(super) async fn shared_and_exclusive_holds_exclude(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        let (key, reader, writer) = (self.key()?, self.owner()?, self.owner()?);
        self.shared(&key, &reader, self.long(), 1, Share::READ.limit())
            .await?;
        let writer_got_in = self.acquire(&key, &writer, self.long()).await?;
        self.release(&key, &reader).await?;
        self.check(
            !writer_got_in,
            "an exclusive acquire was granted beside a shared hold",
        )?;
        self.check(
            self.acquire(&key, &writer, self.long()).await?,
            "the key was not free for a lock after its last shared hold was released",
        )?;
        let reader_got_in = self
            .shared(&key, &reader, self.long(), 1, Share::READ.limit())
            .await?;
        self.release(&key, &writer).await?;
        self.check(
            reader_got_in == SharedGrant::Busy,
            &format!("a shared acquire beside a lock answered {reader_got_in:?}, expected busy"),
        )?;
        Ok(Verdict::Holds)
    }

    pub(super) async fn a_second_limit_is_refused(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        let (key, a, b) = (self.key()?, self.owner()?, self.owner()?);
        self.shared(&key, &a, self.long(), 1, 3).await?;
        let other = self.shared(&key, &b, self.long(), 1, 4).await?;
        self.release(&key, &a).await?;
        self.release(&key, &b).await?;
        self.check(
            other == SharedGrant::LimitMismatch { held: 3 },
            &format!("a limit-4 permit beside limit-3 permits answered {other:?}, expected a limit mismatch naming 3"),
        )?;
        Ok(Verdict::Holds)
    }

    pub(super) async fn shared_fences_increase(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        let key = self.key()?;
        let owners: Vec<_> = (0..3).map(|_| self.owner()).collect::<Result<_, _>>()?;
        let mut last: Option<Fence> = None;
        for (i, owner) in owners.iter().enumerate() {
            let fence = match self.shared(&key, owner, self.long(), 1, 3).await? {
                SharedGrant::Granted(grant) => grant.fence(),
                other => return Err(self.fail(format!("permit {i} answered {other:?}"))),
            };
            let Some(fence) = fence else {
                for o in &owners {
                    self.release(&key, o).await?;
                }
                return Ok(Verdict::NotApplicable("the store keeps no fences".into()));
            };
            if let Some(before) = last {
                self.increases(before, fence, "a later permit")?;
            }
            last = Some(fence);
        }
        for o in &owners {
            self.release(&key, o).await?;
        }
        let writer = self.owner()?;
        let after = self.grant(&key, &writer, self.long()).await?;
        self.release(&key, &writer).await?;
        if let Some(before) = last {
            self.increases(
                before,
                self.fence_of(after, "the lock after the permits")?,
                "the lock after the permits",
            )?;
        }
        Ok(Verdict::Holds)
    }

    pub(super) async fn nobody_passes_a_queued_waiter(&self) -> Result<Verdict, Violation> {
        if let Err(verdict) = self.keeps_shared_holds().await? {
            return Ok(verdict);
        }
        if !self.store.hands_over_shared() {
            return Ok(Verdict::NotApplicable(
                "the store has no queue for shared holds (it is polled)".into(),
            ));
        }
        let (key, single_a, single_b, heavy, newcomer) = (
            self.key()?,
            self.owner()?,
            self.owner()?,
            self.owner()?,
            self.owner()?,
        );
        self.shared(&key, &single_a, self.long(), 1, 3).await?;
        self.shared(&key, &single_b, self.long(), 1, 3).await?;
        let wait = Wait {
            wait_ms: 10_000,
            poll_ms: 50,
        };
        let share = Share::new(2, 3).map_err(|e| self.fail(e.to_string()))?;
        let waiting = async {
            self.store
                .acquire_shared_or_wait(&key, &heavy, self.long(), share, wait)
                .await
                .map_err(self.store_failed("acquireSharedOrWait"))
        };
        let meanwhile = async {
            // Give the heavy waiter time to join the queue.
            self.runtime.sleep(self.options.settle_ms.max(20)).await;
            let passed = self.shared(&key, &newcomer, self.long(), 1, 3).await?;
            self.release(&key, &single_a).await?;
            Ok::<_, Violation>(passed)
        };
        let (heavy_answer, passed) = join2(waiting, meanwhile).await;
        let (heavy_answer, passed) = (heavy_answer?, passed?);
        for o in [&single_b, &heavy, &newcomer] {
            self.release(&key, o).await?;
        }
        self.check(
            passed == SharedGrant::Busy,
            &format!(
                "a single permit that would fit passed a waiter queued for two first: {passed:?}"
            ),
        )?;
        self.check(
            matches!(heavy_answer, SharedGrant::Granted(_)),
            &format!("the queued waiter was not handed its permits on a release: {heavy_answer:?}"),
        )?;
        Ok(Verdict::Holds)
    }
}

/// Polls two futures of different types until both are done.
pub(super) async fn join2<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (Box::pin(a), Box::pin(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(move |cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                Poll::Pending
            }
        }
    })
    .await
}
