//! The memory store's shared holds (semaphore permits, read locks). They live in the key's one
//! row: while a key is held shared its row is their header (an owner nobody matches, the last
//! hold's expiry), so the lock rules refuse every exclusive request, `remaining_time` and purging
//! work unchanged, and an exclusive acquire pays nothing for shared holds existing. The grant
//! rule is [`crate::share::fit`]; the queue is the key's one FIFO.

use super::*;
use crate::inspect::HolderInfo;
use crate::share::{fit, Fit, Holding, LiveHolds, Share, SharedGrant};
use crate::token::Metadata;

/// One owner's permits on a key.
struct SharedHold {
    owner: OwnerToken,
    expires_at: u64,
    weight: u32,
    fence: Option<Fence>,
}

/// A key's shared holds, all under one limit.
pub(super) struct SharedRow {
    limit: u32,
    holds: Vec<SharedHold>,
}

impl SharedRow {
    fn live(&self, now: u64) -> impl Iterator<Item = &SharedHold> {
        self.holds.iter().filter(move |h| h.expires_at > now)
    }

    /// The earliest expiry of a live hold: when room may next appear.
    pub(super) fn first_expiry(&self, now: u64) -> Option<u64> {
        self.live(now).map(|h| h.expires_at).min()
    }

    /// The last expiry of a live hold: the header's.
    fn last_expiry(&self, now: u64) -> Option<u64> {
        self.live(now).map(|h| h.expires_at).max()
    }

    fn position(&self, owner: &OwnerToken, now: u64) -> Option<usize> {
        self.holds
            .iter()
            .position(|h| h.expires_at > now && h.owner == *owner)
    }
}

impl Row {
    /// What is live in this row at `now` (kept out of line: every reader shares it).
    #[inline(never)]
    fn live(&self, now: u64) -> LiveHolds {
        let mut live = LiveHolds::default();
        if self.expires_at <= now {
            return live;
        }
        match &self.shared {
            None => live.exclusive = true,
            Some(shared) => {
                for hold in shared.live(now) {
                    live.limit = Some(shared.limit);
                    live.weight += u64::from(hold.weight);
                }
            }
        }
        live
    }

    /// Records `owner`'s shared hold with its `fence`, which the caller found fits beside what
    /// is live at `now`.
    fn put_shared(
        &mut self,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        now: u64,
        fence: Option<Fence>,
    ) {
        let expires_at = now.saturating_add(ttl.as_ms());
        let hold = SharedHold {
            owner: owner.clone(),
            expires_at,
            weight: share.weight(),
            fence,
        };
        // It fits: the row is free, or the header of holds under this limit.
        let shared = self.shared.get_or_insert_with(|| {
            Box::new(SharedRow {
                limit: share.limit(),
                holds: Vec::new(),
            })
        });
        shared.holds.retain(|h| h.expires_at > now);
        shared.limit = share.limit();
        shared.holds.push(hold);
        self.expires_at = self.expires_at.max(expires_at);
    }

    /// Changes `owner`'s live shared hold in this header: ends it (`ttl` `None`) or moves its
    /// expiry to `ttl` from `now`; the header follows. Answers whether `owner` had one.
    pub(super) fn change_shared(&mut self, owner: &OwnerToken, ttl: Option<Ttl>, now: u64) -> bool {
        let Some(shared) = self.shared.as_mut() else {
            return false;
        };
        let Some(at) = shared.position(owner, now) else {
            return false;
        };
        match ttl {
            None => drop(shared.holds.swap_remove(at)),
            Some(ttl) => {
                if let Some(hold) = shared.holds.get_mut(at) {
                    hold.expires_at = now.saturating_add(ttl.as_ms());
                }
            }
        }
        // With no live hold left the header expires now: free, and its allocations kept for
        // the key's next shared hold (the sweep drops it if none comes).
        self.expires_at = shared.last_expiry(now).unwrap_or(now);
        true
    }
}

impl Row {
    /// Calls `f` with each live hold of this row at `now`: its owner, fence and expiry.
    pub(super) fn each_live(&self, now: u64, mut f: impl FnMut(&OwnerToken, Option<Fence>, u64)) {
        if self.expires_at <= now {
            return;
        }
        match &self.shared {
            None => f(&self.owner, self.fence, self.expires_at),
            Some(shared) => {
                for hold in shared.live(now) {
                    f(&hold.owner, hold.fence, hold.expires_at);
                }
            }
        }
    }

    /// The live holds of this row at `now`, as `inspect` shows them.
    pub(super) fn holders(&self, now: u64) -> Vec<HolderInfo> {
        let mut holders = Vec::new();
        self.each_live(now, |owner, fence, expires_at| {
            let metadata = owner.metadata().and_then(|m| Metadata::new(m).ok());
            holders.push(HolderInfo::new(metadata, fence, expires_at - now));
        });
        holders
    }
}

impl<R: Runtime> MemoryLockStore<R> {
    /// What is live on `key` at `now`.
    pub(super) fn live_holds(&self, key: &Key, now: u64) -> LiveHolds {
        self.rows
            .borrow()
            .get(key.as_str())
            .map_or_else(LiveHolds::default, |row| row.live(now))
    }

    /// Takes `key` for `owner` as `holding` says, if it fits, without looking at the queue.
    pub(super) fn take_holding(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        now: u64,
    ) -> SharedGrant {
        let share = match holding {
            Holding::Exclusive => return self.take(key, owner, ttl, now).into(),
            Holding::Shared(share) => share,
        };
        // One lookup of the row: read what is live, and put the hold if it fits.
        self.hasher.keys();
        let mut rows = self.rows.borrow_mut();
        let row = rows.entry(key.clone()).or_insert_with(|| Row {
            owner: owner.clone(),
            expires_at: 0,
            fence: None,
            shared: None,
        });
        // A row put here is free (expired at 0), so the request fits and the row is kept.
        let fence = match fit(row.live(now), holding) {
            Fit::Fits => self.next_fence(),
            Fit::Full => return SharedGrant::Busy,
            Fit::Mismatch { held } => return SharedGrant::LimitMismatch { held },
        };
        row.put_shared(owner, ttl, share, now, fence);
        SharedGrant::Granted(Grant::new(fence))
    }

    /// Records `owner`'s shared hold on `key`, which the caller found fits, and draws its fence.
    pub(super) fn put_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        now: u64,
    ) -> Grant {
        self.hasher.keys();
        let fence = self.next_fence();
        self.rows
            .borrow_mut()
            .entry(key.clone())
            .or_insert_with(|| Row {
                owner: owner.clone(),
                expires_at: 0,
                fence: None,
                shared: None,
            })
            .put_shared(owner, ttl, share, now, fence);
        Grant::new(fence)
    }

    /// [`LockStore::acquire_shared`] at `now`: FIFO first (a queued waiter is never passed),
    /// then the grant rule.
    pub(crate) fn acquire_shared_at(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
        now: u64,
    ) -> SharedGrant {
        let holding = Holding::Shared(share);
        let Some(live) = self.hand_over(key, now) else {
            return self.take_holding(key, owner, ttl, holding, now);
        };
        // Queued callers come first; a mismatch is still said at once.
        match fit(live, holding) {
            Fit::Mismatch { held } => SharedGrant::LimitMismatch { held },
            _ => SharedGrant::Busy,
        }
    }

    /// Synchronous [`LockStore::acquire_shared`].
    pub fn acquire_shared_sync(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> SharedGrant {
        self.acquire_shared_at(key, owner, ttl, share, self.runtime.monotonic_ms())
    }

    /// Keys held shared right now, expired ones not yet swept included (for cleanup tests).
    pub fn stored_shared_keys(&self) -> usize {
        self.rows
            .borrow()
            .values()
            .filter(|row| row.shared.is_some())
            .count()
    }
}
