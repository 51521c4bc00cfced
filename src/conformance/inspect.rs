//! The properties of hold metadata and `inspect`: a store that keeps metadata gives back each
//! hold's own, through extend and a hand-over, and drops it with the hold; `inspect` agrees
//! with the holds and never shows an owner token.

use std::fmt::Debug;

use super::shared::join2;
use super::{Ctx, Verdict, Violation};
use crate::grant::Grant;
use crate::input::Key;
use crate::inspect::LockInfo;
use crate::runtime::Runtime;
use crate::share::SharedGrant;
use crate::store::{LockStore, Wait};
use crate::token::{Metadata, OwnerToken};

impl<S: LockStore, R: Runtime> Ctx<'_, S, R>
where
    S::Error: Debug,
{
    /// The store's `inspect` of `key`; `None` when it cannot say.
    async fn look(&self, key: &Key) -> Result<Option<LockInfo>, Violation> {
        self.store
            .inspect(key)
            .await
            .map_err(self.store_failed("inspect"))
    }

    /// `inspect` of `key` from a store that answered it before.
    async fn info(&self, key: &Key) -> Result<LockInfo, Violation> {
        self.look(key).await?.ok_or_else(|| {
            self.fail("inspect answered nothing for a key after answering for another")
        })
    }

    /// A fresh owner carrying `text` as its metadata.
    fn owner_saying(&self, text: &str) -> Result<OwnerToken, Violation> {
        let metadata = Metadata::new(text).map_err(|e| self.fail(e.to_string()))?;
        Ok(self.owner()?.with_metadata(Some(metadata)))
    }

    /// What `info` shows of its holders: (metadata, fence) each, in order.
    fn shown(info: &LockInfo) -> Vec<(Option<&str>, Option<u64>)> {
        info.holders
            .iter()
            .map(|h| {
                (
                    h.metadata.as_ref().map(Metadata::as_str),
                    h.fence.map(|f| f.get()),
                )
            })
            .collect()
    }

    pub(super) async fn inspect_agrees_with_the_holds(&self) -> Result<Verdict, Violation> {
        let key = self.key()?;
        let Some(free) = self.look(&key).await? else {
            return Ok(Verdict::NotApplicable(
                "the store does not answer inspect: who holds a key cannot be asked".into(),
            ));
        };
        self.check(
            !free.is_held(),
            &format!(
                "inspect of a free key shows holders: {:?}",
                Self::shown(&free)
            ),
        )?;
        // Held without metadata: one holder, the grant's fence, nothing said about it — in
        // particular not its owner token.
        let owner = self.owner()?;
        let grant = self.grant(&key, &owner, self.long()).await?;
        let fence = grant.and_then(|g: Grant| g.fence()).map(|f| f.get());
        let info = self.info(&key).await?;
        self.check(
            Self::shown(&info) == [(None, fence)],
            &format!(
                "inspect of a key held without metadata (fence {fence:?}) shows {:?}",
                Self::shown(&info)
            ),
        )?;
        let left = info.holders[0].remaining_ms;
        self.check(
            left <= self.long().as_ms() && left > 0,
            &format!(
                "inspect shows {left} ms left of a {} ms hold",
                self.long().as_ms()
            ),
        )?;
        self.release(&key, &owner).await?;
        self.check(
            !self.info(&key).await?.is_held(),
            "inspect shows a holder after its release",
        )?;
        // Expired: gone from inspect too.
        let brief = self.owner()?;
        self.grant(&key, &brief, self.short()).await?;
        self.outlive_short_ttl().await;
        let info = self.info(&key).await?;
        self.check(
            !info.is_held(),
            &format!("inspect shows an expired hold: {:?}", Self::shown(&info)),
        )?;
        Ok(Verdict::Holds)
    }

    pub(super) async fn metadata_is_kept_per_hold(&self) -> Result<Verdict, Violation> {
        if !self.store.keeps_metadata() {
            return Ok(Verdict::NotApplicable(
                "the store keeps no hold metadata (no inspect): metadata is refused on it".into(),
            ));
        }
        let key = self.key()?;
        let holder = self.owner_saying("conformance: the first holder")?;
        let grant = self.grant(&key, &holder, self.long()).await?;
        let fence = grant.and_then(|g| g.fence()).map(|f| f.get());
        let expected = [(Some("conformance: the first holder"), fence)];
        self.check(
            Self::shown(&self.info(&key).await?) == expected,
            "inspect does not show the metadata the hold was taken with",
        )?;
        // Extended by its plain token: the metadata stays.
        self.check(
            self.extend(&key, &self.plain(&holder), self.long()).await?,
            "the owner's extend was refused",
        )?;
        self.check(
            Self::shown(&self.info(&key).await?) == expected,
            "an extend dropped or changed the hold's metadata",
        )?;
        // A waiter's metadata becomes its grant's when the store hands the key over.
        if self.store.hands_over() {
            let waiter = self.owner_saying("conformance: the waiter")?;
            let wait = Wait {
                wait_ms: 10_000,
                poll_ms: 20,
            };
            let queued = self.store.acquire_or_wait(&key, &waiter, self.long(), wait);
            let release_later = async {
                self.runtime.sleep(self.options.settle_ms.max(50)).await;
                let waiting = self.info(&key).await.map(|info| info.waiting);
                self.release(&key, &holder).await.map(|_| waiting)
            };
            let (granted, waiting) = join2(queued, release_later).await;
            let granted = granted.map_err(self.store_failed("acquireOrWait"))?;
            let waiting = waiting??;
            self.check(
                matches!(waiting, Some(1) | None),
                &format!("inspect counted {waiting:?} waiting with one caller queued"),
            )?;
            let Some(grant) = granted else {
                return Err(self.fail("the waiter was not handed the key on release"));
            };
            let info = self.info(&key).await?;
            self.check(
                Self::shown(&info)
                    == [(
                        Some("conformance: the waiter"),
                        grant.fence().map(|f| f.get()),
                    )],
                &format!(
                    "after the hand-over inspect shows {:?}, not the waiter's metadata",
                    Self::shown(&info)
                ),
            )?;
            self.release(&key, &waiter).await?;
        } else {
            self.release(&key, &holder).await?;
        }
        self.check(
            !self.info(&key).await?.is_held(),
            "inspect shows a holder after every release",
        )?;
        // Each permit carries its own.
        if self.keeps_shared_holds().await?.is_ok() {
            let (a, b) = (
                self.owner_saying("permit a")?,
                self.owner_saying("permit b")?,
            );
            let mut fences = Vec::new();
            for owner in [&a, &b] {
                let SharedGrant::Granted(grant) =
                    self.shared(&key, owner, self.long(), 1, 3).await?
                else {
                    return Err(self.fail("a permit on a free key was not granted"));
                };
                fences.push(grant.fence().map(|f| f.get()));
            }
            let info = self.info(&key).await?;
            let shown = Self::shown(&info);
            self.check(
                shown == [(Some("permit a"), fences[0]), (Some("permit b"), fences[1])],
                &format!("two permits with their own metadata show as {shown:?}"),
            )?;
            self.release(&key, &self.plain(&a)).await?;
            let info = self.info(&key).await?;
            let shown = Self::shown(&info);
            self.check(
                shown == [(Some("permit b"), fences[1])],
                &format!("after one permit's release inspect shows {shown:?}"),
            )?;
            self.release(&key, &b).await?;
        }
        Ok(Verdict::Holds)
    }

    /// `owner`'s token without its metadata, as release and extend send it.
    fn plain(&self, owner: &OwnerToken) -> OwnerToken {
        owner.clone().with_metadata(None)
    }
}
