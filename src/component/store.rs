//! [`KeyValueLockStore`]: the store seam over the host's `wasi:keyvalue@0.2.0-draft2`
//! (`store` + `atomics`).
//!
//! Each lock is one key whose value is `2:<expiry, epoch ms>:<last fence>:<owner token>` (ASCII);
//! while shared holds (semaphore permits, read locks) are live it is
//! `3:<last fence>:<limit>:<expiry>,<weight>,<owner>` with one such hold per owner, separated by
//! spaces — every holder of a key in one value, so one compare-and-swap judges a request
//! against all of them ([`crate::share::fit`]).
//! Every change is one compare-and-swap (`atomics.cas` + `swap`) against the value just read,
//! and what to write is decided by the core's [`crate::rows`] rules, so acquire is set-if-free
//! and release/extend are compare-owner-and-write, with no window between check and write.
//! Expiry is judged by `wasi:clocks/wall-clock`, so the host needs no TTL support.
//!
//! The fence counter lives in the same value, so one compare-and-swap takes the lock and its
//! fence together. Draft2 has no compare-and-delete, and the counter must outlive the hold, so
//! release writes `2:0:<last fence>:` (free, counter kept) instead of deleting: released and
//! expired keys stay in the bucket as small values. Values written by earlier versions
//! (`1:<expiry>:<owner>`, or empty once released) are read as holds with no fence yet.

use std::fmt;

use super::bindings::wasi::keyvalue::atomics::{self, Cas, CasError};
use super::bindings::wasi::keyvalue::store::{self, Bucket};
use super::runtime::wall_clock_ms;
use crate::grant::{Fence, Grant};
use crate::input::{Key, Ttl};
use crate::rows::{self, Change, Decision, RowView};
use crate::share::{fit, Fit, Holding, LiveHolds, Share, SharedGrant};
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

/// One shared hold (semaphore permits, a read lock) in a key's value.
struct SharedHold {
    owner: String,
    expires_at: u64,
    weight: u32,
}

/// A key's value as read from the bucket: its holds and the last fence handed out.
struct Slot {
    /// The exclusive holder and the hold's expiry; `None` once released (or never taken).
    hold: Option<(String, u64)>,
    /// The shared holds, all under `limit` (empty for an exclusive or free key).
    shared: Vec<SharedHold>,
    limit: u32,
    /// The last fence handed out for this key; 0 before the first.
    fence: u64,
}

impl Slot {
    fn read(value: Option<Vec<u8>>) -> Result<Slot, KeyValueError> {
        let mut slot = Slot {
            hold: None,
            shared: Vec::new(),
            limit: 0,
            fence: 0,
        };
        let value = match value {
            None => return Ok(slot),
            Some(v) if v.is_empty() => return Ok(slot),
            Some(v) => v,
        };
        let foreign = || KeyValueError("the key holds a value keel-lock did not write".to_owned());
        let text = std::str::from_utf8(&value).map_err(|_| foreign())?;
        let (version, rest) = text.split_once(':').ok_or_else(foreign)?;
        if version == "3" {
            // `3:<last fence>:<limit>:<expiry>,<weight>,<owner> …`: owners have no spaces, so a
            // space separates the holds, and the owner comes last in each.
            let (fence, rest) = rest.split_once(':').ok_or_else(foreign)?;
            let (limit, holds) = rest.split_once(':').ok_or_else(foreign)?;
            slot.fence = fence.parse().map_err(|_| foreign())?;
            slot.limit = limit.parse().map_err(|_| foreign())?;
            for hold in holds.split(' ').filter(|h| !h.is_empty()) {
                let (expires_at, rest) = hold.split_once(',').ok_or_else(foreign)?;
                let (weight, owner) = rest.split_once(',').ok_or_else(foreign)?;
                slot.shared.push(SharedHold {
                    owner: owner.to_owned(),
                    expires_at: expires_at.parse().map_err(|_| foreign())?,
                    weight: weight.parse().map_err(|_| foreign())?,
                });
            }
            return Ok(slot);
        }
        let (expires_at, rest) = rest.split_once(':').ok_or_else(foreign)?;
        let expires_at: u64 = expires_at.parse().map_err(|_| foreign())?;
        let (fence, owner) = match version {
            "1" => (0, rest),
            "2" => {
                let (fence, owner) = rest.split_once(':').ok_or_else(foreign)?;
                (fence.parse().map_err(|_| foreign())?, owner)
            }
            _ => return Err(foreign()),
        };
        slot.hold = (!owner.is_empty()).then(|| (owner.to_owned(), expires_at));
        slot.fence = fence;
        Ok(slot)
    }

    fn view(&self) -> Option<RowView<'_>> {
        self.hold.as_ref().map(|(owner, expires_at)| RowView {
            owner,
            expires_at: *expires_at,
        })
    }

    /// The value to write back: `2:<expiry>:<fence>:<owner>` for an exclusive hold or a free
    /// key (`2:0:<fence>:`), `3:…` while shared holds are live. Expired shared holds are left
    /// out, so a key's value never grows with holds that are gone.
    fn encode(&mut self, now: u64) -> Vec<u8> {
        self.shared.retain(|h| h.expires_at > now);
        if self.shared.is_empty() {
            return match &self.hold {
                Some((owner, expires_at)) => format!("2:{expires_at}:{}:{owner}", self.fence),
                None => format!("2:0:{}:", self.fence),
            }
            .into_bytes();
        }
        let mut value = format!("3:{}:{}:", self.fence, self.limit);
        for (i, h) in self.shared.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            value.push_str(&format!("{sep}{},{},{}", h.expires_at, h.weight, h.owner));
        }
        value.into_bytes()
    }

    /// What is live at `now`, for the grant rule.
    fn live(&self, now: u64) -> LiveHolds {
        let mut live = LiveHolds {
            exclusive: self.view().is_some_and(|row| row.is_live(now)),
            ..LiveHolds::default()
        };
        for h in self.shared.iter().filter(|h| h.expires_at > now) {
            live.limit = Some(self.limit);
            live.weight += u64::from(h.weight);
        }
        live
    }

    /// `owner`'s live shared hold.
    fn shared_of(&mut self, owner: &OwnerToken, now: u64) -> Option<&mut SharedHold> {
        self.shared
            .iter_mut()
            .find(|h| h.expires_at > now && h.owner == owner.as_str())
    }

    /// Takes the next fence.
    fn next_fence(&mut self) -> Option<Fence> {
        self.fence = self.fence.saturating_add(1);
        Fence::new(self.fence).ok()
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
            let mut slot = Slot::read(cas.current()?)?;
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
    /// (one of [`crate::rows`]), else `owner`'s shared hold by `shared`. Answers whether it was
    /// granted.
    fn update_hold(
        &self,
        key: &Key,
        owner: &OwnerToken,
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
                    slot.hold = Some((owner.as_str().to_owned(), expires_at));
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

    fn read(&self, key: &Key) -> Result<Slot, KeyValueError> {
        Slot::read(self.bucket.get(key.as_str())?)
    }
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
                    slot.hold = Some((owner.as_str().to_owned(), expires_at));
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
            owner,
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
            owner,
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
            slot.shared.push(SharedHold {
                owner: owner.as_str().to_owned(),
                expires_at: now.saturating_add(ttl.as_ms()),
                weight: share.weight(),
            });
            (SharedGrant::Granted(Grant::new(slot.next_fence())), true)
        })?;
        Ok(outcome.unwrap_or(SharedGrant::Busy))
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
