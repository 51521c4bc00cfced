//! The in-process store: a map from key to (owner, expiry). Per-isolate: it coordinates the
//! callers that share it and nothing more — right for tests and single-process apps.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::convert::Infallible;

use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl};
use crate::rows::{self, Change, Decision, RowView};
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// Expired rows are swept when the map reaches this many rows, and from then on whenever it
/// doubles the size left by the previous sweep: amortised O(1) per acquire, and the map never
/// holds more than about twice the live keys (plus this floor), however many keys expire.
const SWEEP_FLOOR: usize = 64;

struct Row {
    owner: OwnerToken,
    expires_at: u64,
}

impl Row {
    fn view(&self) -> RowView<'_> {
        RowView {
            owner: self.owner.as_str(),
            expires_at: self.expires_at,
        }
    }
}

/// An in-memory [`LockStore`]. Every operation completes synchronously (the futures are ready
/// at once), so driving it from the core costs no event-loop round trip.
///
/// Fences come from one counter per store: strictly increasing across all keys, so per key too,
/// and nothing per key outlives its row.
pub struct MemoryLockStore<R: Runtime> {
    rows: RefCell<HashMap<String, Row>>,
    next_sweep_at: Cell<usize>,
    last_fence: Cell<Option<Fence>>,
    runtime: R,
}

impl<R: Runtime> MemoryLockStore<R> {
    /// An empty store whose expiry is judged by `runtime`'s clock.
    pub fn new(runtime: R) -> Self {
        MemoryLockStore {
            rows: RefCell::new(HashMap::new()),
            next_sweep_at: Cell::new(SWEEP_FLOOR),
            last_fence: Cell::new(None),
            runtime,
        }
    }

    /// Rows currently stored, expired ones included (for tests of the cleanup bound).
    pub fn stored_rows(&self) -> usize {
        self.rows.borrow().len()
    }

    /// Deletes every expired row now and answers how many went.
    pub fn purge_expired(&self) -> usize {
        let now = self.runtime.now_ms();
        let mut rows = self.rows.borrow_mut();
        let before = rows.len();
        rows.retain(|_, row| row.expires_at > now);
        let removed = before - rows.len();
        self.next_sweep_at.set((rows.len() * 2).max(SWEEP_FLOOR));
        removed
    }

    /// Reads `key`'s row, asks [`crate::rows`] what to do, applies it, answers `granted`.
    fn decide(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rule: impl FnOnce(Option<RowView<'_>>) -> Decision,
    ) -> bool {
        let mut rows = self.rows.borrow_mut();
        let decision = rule(rows.get(key.as_str()).map(Row::view));
        match decision.change {
            Change::Keep => {}
            Change::Delete => {
                rows.remove(key.as_str());
            }
            Change::Put { expires_at } => match rows.get_mut(key.as_str()) {
                Some(row) => {
                    row.owner = owner.clone();
                    row.expires_at = expires_at;
                }
                None => {
                    rows.insert(
                        key.as_str().to_owned(),
                        Row {
                            owner: owner.clone(),
                            expires_at,
                        },
                    );
                }
            },
        }
        decision.granted
    }

    /// Synchronous [`LockStore::acquire`]: the operations are public in this form so bindings
    /// can skip the future machinery entirely.
    pub fn acquire_sync(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Option<Grant> {
        let now = self.runtime.now_ms();
        if self.rows.borrow().len() >= self.next_sweep_at.get() {
            self.purge_expired();
        }
        if !self.decide(key, owner, |row| rows::acquire(row, now, ttl)) {
            return None;
        }
        // After 2^53 − 1 grants (centuries at a million a second) the counter is spent and
        // grants carry no fence rather than a repeated one.
        let fence = match self.last_fence.get() {
            None => Some(Fence::FIRST),
            Some(last) => last.next(),
        };
        if fence.is_some() {
            self.last_fence.set(fence);
        }
        Some(Grant::new(fence))
    }

    /// Synchronous [`LockStore::release`].
    pub fn release_sync(&self, key: &Key, owner: &OwnerToken) -> bool {
        let now = self.runtime.now_ms();
        self.decide(key, owner, |row| rows::release(row, now, owner))
    }

    /// Synchronous [`LockStore::extend`].
    pub fn extend_sync(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> bool {
        let now = self.runtime.now_ms();
        self.decide(key, owner, |row| rows::extend(row, now, owner, ttl))
    }

    /// Synchronous [`LockStore::remaining_time`].
    pub fn remaining_time_sync(&self, key: &Key) -> Option<u64> {
        let now = self.runtime.now_ms();
        rows::remaining_time(self.rows.borrow().get(key.as_str()).map(Row::view), now)
    }
}

impl<R: Runtime> LockStore for MemoryLockStore<R> {
    type Error = Infallible;

    fn name(&self) -> &'static str {
        "memory"
    }
    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, Infallible> {
        Ok(self.acquire_sync(key, owner, ttl))
    }
    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, Infallible> {
        Ok(self.release_sync(key, owner))
    }
    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, Infallible> {
        Ok(self.extend_sync(key, owner, ttl))
    }
    async fn is_locked(&self, key: &Key) -> Result<bool, Infallible> {
        Ok(self.remaining_time_sync(key).is_some())
    }
    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, Infallible> {
        Ok(self.remaining_time_sync(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtual_time::VirtualRuntime;

    #[test]
    fn expired_rows_do_not_accumulate() {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let ttl = Ttl::from_ms(10).unwrap();
        let mut peak = 0;
        for i in 0..100_000 {
            let key = Key::new(format!("job:{i}")).unwrap();
            assert!(store
                .acquire_sync(&key, &OwnerToken::mint().unwrap(), ttl)
                .is_some());
            rt.advance(20); // every key expires before the next one is taken
            peak = peak.max(store.stored_rows());
        }
        assert!(peak <= SWEEP_FLOOR, "peak {peak} rows for 1 live key");
    }

    #[test]
    fn live_rows_survive_sweeps() {
        let rt = VirtualRuntime::new();
        let store = MemoryLockStore::new(rt.clone());
        let long = Ttl::from_ms(1_000_000).unwrap();
        let owners: Vec<_> = (0..500).map(|_| OwnerToken::mint().unwrap()).collect();
        for (i, o) in owners.iter().enumerate() {
            assert!(store
                .acquire_sync(&Key::new(format!("k{i}")).unwrap(), o, long)
                .is_some());
        }
        assert_eq!(store.purge_expired(), 0);
        for (i, o) in owners.iter().enumerate() {
            assert!(store.release_sync(&Key::new(format!("k{i}")).unwrap(), o));
        }
    }
}
