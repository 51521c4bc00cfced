//! The memory store's shared holds (semaphore permits, read locks): a second map beside the
//! exclusive rows, so a store that never sees a shared hold pays one `is_empty` per exclusive
//! acquire for it. The grant rule is [`crate::share::fit`]; the queue is the key's one FIFO.

use super::*;
use crate::share::{fit, Fit, Holding, LiveHolds, Share, SharedGrant};

/// One owner's permits on a key.
pub(super) struct SharedHold {
    owner: OwnerToken,
    expires_at: u64,
    weight: u32,
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

    pub(super) fn is_live(&self, now: u64) -> bool {
        self.live(now).next().is_some()
    }

    fn position(&self, owner: &OwnerToken, now: u64) -> Option<usize> {
        self.holds
            .iter()
            .position(|h| h.expires_at > now && h.owner == *owner)
    }
}

/// One pass over a key's live shared holds.
#[derive(Default, Clone, Copy)]
pub(super) struct Scan {
    pub(super) limit: Option<u32>,
    pub(super) weight: u64,
    pub(super) first: Option<u64>,
    pub(super) last: Option<u64>,
}

impl<R: Runtime> MemoryLockStore<R> {
    /// The one lookup of `key` in the shared map (kept out of line: every reader shares it).
    #[inline(never)]
    pub(super) fn shared_scan(&self, key: &Key, now: u64) -> Scan {
        let shared = self.shared.borrow();
        let mut scan = Scan::default();
        if shared.is_empty() {
            return scan;
        }
        if let Some(row) = shared.get(key.as_str()) {
            for hold in row.live(now) {
                scan.limit = Some(row.limit);
                scan.weight += u64::from(hold.weight);
                scan.first = Some(
                    scan.first
                        .map_or(hold.expires_at, |f| f.min(hold.expires_at)),
                );
                scan.last = Some(
                    scan.last
                        .map_or(hold.expires_at, |f| f.max(hold.expires_at)),
                );
            }
        }
        scan
    }

    /// What is live on `key` at `now`.
    pub(super) fn live_holds(&self, key: &Key, now: u64) -> LiveHolds {
        let exclusive = self
            .rows
            .borrow()
            .get(key.as_str())
            .is_some_and(|row| row.expires_at > now);
        let scan = self.shared_scan(key, now);
        LiveHolds {
            exclusive,
            limit: scan.limit,
            weight: scan.weight,
        }
    }

    /// Whether `key` has a live shared hold (false at once on a store that never had one).
    #[inline]
    pub(super) fn shared_live(&self, key: &Key, now: u64) -> bool {
        self.shared_scan(key, now).limit.is_some()
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
        match fit(self.live_holds(key, now), holding) {
            Fit::Fits => {}
            Fit::Full => return SharedGrant::Busy,
            Fit::Mismatch { held } => return SharedGrant::LimitMismatch { held },
        }
        self.hasher.keys();
        let mut shared = self.shared.borrow_mut();
        let row = shared.entry(key.clone()).or_insert_with(|| SharedRow {
            limit: share.limit(),
            holds: Vec::new(),
        });
        row.holds.retain(|h| h.expires_at > now);
        // Every live hold had this limit (or none was live): the row takes it.
        row.limit = share.limit();
        row.holds.push(SharedHold {
            owner: owner.clone(),
            expires_at: now.saturating_add(ttl.as_ms()),
            weight: share.weight(),
        });
        drop(shared);
        SharedGrant::Granted(Grant::new(self.next_fence()))
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
        self.hand_over(key, now);
        let holding = Holding::Shared(share);
        if let Fit::Mismatch { held } = fit(self.live_holds(key, now), holding) {
            return SharedGrant::LimitMismatch { held };
        }
        if self.has_waiters(key) {
            return SharedGrant::Busy;
        }
        self.take_holding(key, owner, ttl, holding, now)
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

    /// Frees `owner`'s live shared hold on `key`; answers whether it had one.
    pub(super) fn release_shared(&self, key: &Key, owner: &OwnerToken, now: u64) -> bool {
        let mut shared = self.shared.borrow_mut();
        let Some(row) = shared.get_mut(key.as_str()) else {
            return false;
        };
        let Some(at) = row.position(owner, now) else {
            return false;
        };
        row.holds.swap_remove(at);
        if !row.is_live(now) {
            shared.remove(key.as_str());
        }
        true
    }

    /// Moves `owner`'s live shared hold on `key` to expire `ttl` from `now`.
    pub(super) fn extend_shared(&self, key: &Key, owner: &OwnerToken, ttl: Ttl, now: u64) -> bool {
        let mut shared = self.shared.borrow_mut();
        let Some(row) = shared.get_mut(key.as_str()) else {
            return false;
        };
        match row.position(owner, now) {
            Some(at) => {
                row.holds[at].expires_at = now.saturating_add(ttl.as_ms());
                true
            }
            None => false,
        }
    }

    /// Milliseconds until the last live shared hold on `key` expires.
    pub(super) fn shared_remaining(&self, key: &Key, now: u64) -> Option<u64> {
        self.shared_scan(key, now).last.map(|at| at - now)
    }

    /// Drops every shared hold on `key`; answers whether one was live.
    pub(super) fn force_release_shared(&self, key: &Key, now: u64) -> bool {
        let mut shared = self.shared.borrow_mut();
        !shared.is_empty() && shared.remove(key.as_str()).is_some_and(|r| r.is_live(now))
    }

    /// Drops expired shared holds, and keys left without a live one.
    pub(super) fn purge_shared(&self, now: u64) -> usize {
        let mut shared = self.shared.borrow_mut();
        let before = shared.len();
        shared.retain(|_, row| {
            row.holds.retain(|h| h.expires_at > now);
            !row.holds.is_empty()
        });
        before - shared.len()
    }

    /// Keys holding shared holds right now, expired ones included (for cleanup tests).
    pub fn stored_shared_keys(&self) -> usize {
        self.shared.borrow().len()
    }
}
