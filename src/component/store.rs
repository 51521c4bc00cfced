//! [`KeyValueLockStore`]: the store seam over the host's `wasi:keyvalue@0.2.0-draft2`
//! (`store` + `atomics`).
//!
//! Each lock is one key whose value holds every hold of the key — owner, expiry, fence and
//! metadata of each — and the key's last fence ([`super::value`] has the format), so one
//! compare-and-swap judges a request against all of them ([`crate::share::fit`]) and takes
//! its fence with it. Every change is one compare-and-swap (`atomics.cas` + `swap`) against
//! the value just read, and what to write is decided by the core's [`crate::rows`] rules, so
//! acquire is set-if-free and release/extend are compare-owner-and-write, with no window
//! between check and write. Expiry is judged by `wasi:clocks/wall-clock`, so the host needs no
//! TTL support; `inspect` is one read of the value.
//!
//! Draft2 has no compare-and-delete, and the fence counter must outlive the hold, so release
//! writes `2:0:<last fence>:` (free, counter kept) instead of deleting: released and expired
//! keys stay in the bucket as small values.

use std::fmt;

use super::bindings::wasi::keyvalue::atomics::{self, Cas, CasError};
use super::bindings::wasi::keyvalue::store::{self, Bucket};
use super::runtime::wall_clock_ms;
use super::value::{metadata_of, Hold, SharedHold, Slot};
use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl};
use crate::inspect::LockInfo;
use crate::rows::{self, Change, Decision, RowView};
use crate::share::{fit, Fit, Holding, Share, SharedGrant};
use crate::store::LockStore;
use crate::token::OwnerToken;

/// Compare-and-swap attempts per operation before giving up. A failed swap means another
/// writer got in first; after re-reading, almost every operation is decided at once.
const MAX_CAS_ATTEMPTS: usize = 16;

/// A failure of the host's key-value store, or a value at the key that keel-lock did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValueError(pub String);

impl fmt::Display for KeyValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<store::Error> for KeyValueError {
    fn from(e: store::Error) -> Self {
        KeyValueError(match e {
            store::Error::NoSuchStore => "no such store".to_owned(),
            store::Error::AccessDenied => "access denied".to_owned(),
            store::Error::Other(msg) => msg,
        })
    }
}

/// A [`LockStore`] over one `wasi:keyvalue` bucket provided by the host. Any host whose
/// `atomics.swap` is a true compare-and-swap (fails when the value changed since `cas.new`)
/// makes this a correct lock, across any number of component instances sharing the bucket.
pub struct KeyValueLockStore {
    bucket: Bucket,
}

impl KeyValueLockStore {
    /// Opens the bucket the host knows as `identifier` (`wasi:keyvalue/store.open`).
    pub fn open(identifier: &str) -> Result<Self, KeyValueError> {
        let bucket = store::open(identifier).map_err(|e| {
            KeyValueError(format!(
                "cannot open bucket {identifier:?}: {}",
                KeyValueError::from(e)
            ))
        })?;
        Ok(KeyValueLockStore { bucket })
    }

    /// Reads the key, asks `decide` what to answer and whether to write the slot it changed,
    /// and writes that with compare-and-swap; re-reads and decides again whenever another
    /// writer got in between. Answers `None` when the attempts ran out.
    fn update<T>(
        &self,
        key: &Key,
        decide: impl Fn(&mut Slot, u64) -> (T, bool),
    ) -> Result<Option<T>, KeyValueError> {
        let mut cas = Cas::new(&self.bucket, key.as_str())?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let mut slot = read_value(cas.current()?)?;
            let now = wall_clock_ms();
            let (answer, write) = decide(&mut slot, now);
            if !write {
                return Ok(Some(answer));
            }
            match atomics::swap(cas, &slot.encode(now)) {
                Ok(()) => return Ok(Some(answer)),
                Err(CasError::CasFailed(next)) => cas = next,
                Err(CasError::StoreError(e)) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// A change to the holder's own hold (release, extend): the exclusive row by `rule`
    /// (one of [`crate::rows`], given the caller's owner), else the caller's shared hold by
    /// `shared`. Answers whether it was granted. The hold keeps its metadata and fence.
    fn update_hold(
        &self,
        key: &Key,
        rule: impl Fn(Option<RowView<'_>>, u64) -> Decision,
        shared: impl Fn(&mut Slot, u64) -> bool,
    ) -> Result<bool, KeyValueError> {
        self.update(key, |slot, now| {
            let decision = rule(slot.view(), now);
            match decision.change {
                Change::Keep => {
                    let changed = shared(slot, now);
                    (changed, changed)
                }
                Change::Put { expires_at } => {
                    // Only the live holder's extend puts: its hold, with a new expiry.
                    if let Some(hold) = slot.hold.as_mut() {
                        hold.expires_at = expires_at;
                    }
                    (decision.granted, true)
                }
                Change::Delete => {
                    slot.hold = None;
                    (decision.granted, true)
                }
            }
        })?
        .ok_or_else(contended)
    }

    /// [`LockStore::inspect`], answered at once: one read of the key's value.
    pub fn look(&self, key: &Key) -> Result<LockInfo, KeyValueError> {
        let slot = self.read(key)?;
        Ok(LockInfo::new(slot.holders(wall_clock_ms()), None))
    }

    fn read(&self, key: &Key) -> Result<Slot, KeyValueError> {
        read_value(self.bucket.get(key.as_str())?)
    }
}

/// A key's value as the bucket answered it.
fn read_value(value: Option<Vec<u8>>) -> Result<Slot, KeyValueError> {
    Slot::read(value.as_deref())
        .map_err(|_| KeyValueError("the key holds a value keel-lock did not write".to_owned()))
}

fn contended() -> KeyValueError {
    KeyValueError(format!(
        "compare-and-swap failed {MAX_CAS_ATTEMPTS} times in a row (the key kept changing)"
    ))
}

impl LockStore for KeyValueLockStore {
    type Error = KeyValueError;

    fn name(&self) -> &'static str {
        "wasi-keyvalue"
    }

    async fn acquire(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
    ) -> Result<Option<Grant>, KeyValueError> {
        let outcome = self.update(key, |slot, now| {
            // Refused while shared holds are live (no read of them on a v2 value: none).
            if !slot.shared.is_empty() && slot.live(now).limit.is_some() {
                return (None, false);
            }
            match rows::acquire(slot.view(), now, ttl).change {
                Change::Put { expires_at } => {
                    slot.hold = Some(Hold {
                        owner: owner.as_str().to_owned(),
                        expires_at,
                        metadata: metadata_of(owner),
                    });
                    (Some(Grant::new(slot.next_fence())), true)
                }
                _ => (None, false),
            }
        })?;
        // Attempts ran out: others kept taking and freeing the key. Not winning is a correct
        // answer to a contended acquire (a waiting caller simply tries again).
        Ok(outcome.flatten())
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, KeyValueError> {
        self.update_hold(
            key,
            |row, now| rows::release(row, now, owner),
            |slot, now| {
                let before = slot.shared.len();
                slot.shared
                    .retain(|h| !(h.expires_at > now && h.owner == owner.as_str()));
                slot.shared.len() < before
            },
        )
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, KeyValueError> {
        self.update_hold(
            key,
            |row, now| rows::extend(row, now, owner, ttl),
            |slot, now| match slot.shared_of(owner, now) {
                Some(hold) => {
                    hold.expires_at = now.saturating_add(ttl.as_ms());
                    true
                }
                None => false,
            },
        )
    }

    /// One compare-and-swap: the share is added to the key's value when it fits
    /// ([`crate::share::fit`]). No queue: a waiting caller polls, so nobody is ever queued
    /// ahead of a request here.
    async fn acquire_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        share: Share,
    ) -> Result<SharedGrant, KeyValueError> {
        let outcome = self.update(key, |slot, now| {
            match fit(slot.live(now), Holding::Shared(share)) {
                Fit::Fits => {}
                Fit::Full => return (SharedGrant::Busy, false),
                Fit::Mismatch { held } => return (SharedGrant::LimitMismatch { held }, false),
            }
            // Whatever else is there has expired (or is a shared hold under this limit).
            slot.hold = None;
            slot.shared
                .retain(|h| h.expires_at > now && h.owner != owner.as_str());
            slot.limit = share.limit();
            let fence = slot.next_fence();
            slot.shared.push(SharedHold {
                owner: owner.as_str().to_owned(),
                expires_at: now.saturating_add(ttl.as_ms()),
                weight: share.weight(),
                fence: fence.map(Fence::get),
                metadata: metadata_of(owner),
            });
            (SharedGrant::Granted(Grant::new(fence)), true)
        })?;
        Ok(outcome.unwrap_or(SharedGrant::Busy))
    }

    fn keeps_metadata(&self) -> bool {
        true
    }

    /// One read of the key's value. `waiting` is `None`: waiters poll, nobody is queued here.
    async fn inspect(&self, key: &Key) -> Result<Option<LockInfo>, KeyValueError> {
        self.look(key).map(Some)
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, KeyValueError> {
        Ok(self.remaining_time(key).await?.is_some())
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, KeyValueError> {
        let slot = self.read(key)?;
        let now = wall_clock_ms();
        let exclusive = rows::remaining_time(slot.view(), now);
        let shared = slot
            .shared
            .iter()
            .map(|h| h.expires_at)
            .filter(|at| *at > now)
            .max()
            .map(|at| at - now);
        Ok(exclusive.max(shared))
    }
}
