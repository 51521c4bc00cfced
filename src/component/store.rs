//! [`KeyValueLockStore`]: the store seam over the host's `wasi:keyvalue@0.2.0-draft2`
//! (`store` + `atomics`).
//!
//! Each lock is one key whose value is `2:<expiry, epoch ms>:<last fence>:<owner token>` (ASCII).
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

/// A key's value as read from the bucket: the hold (if any) and the last fence handed out.
struct Slot {
    /// The holder and the hold's expiry; `None` once released (or never taken).
    hold: Option<(String, u64)>,
    /// The last fence handed out for this key; 0 before the first.
    fence: u64,
}

impl Slot {
    fn read(value: Option<Vec<u8>>) -> Result<Slot, KeyValueError> {
        let free = Slot {
            hold: None,
            fence: 0,
        };
        let value = match value {
            None => return Ok(free),
            Some(v) if v.is_empty() => return Ok(free),
            Some(v) => v,
        };
        let foreign = || KeyValueError("the key holds a value keel-lock did not write".to_owned());
        let text = std::str::from_utf8(&value).map_err(|_| foreign())?;
        let (version, rest) = text.split_once(':').ok_or_else(foreign)?;
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
        Ok(Slot {
            hold: (!owner.is_empty()).then(|| (owner.to_owned(), expires_at)),
            fence,
        })
    }

    fn view(&self) -> Option<RowView<'_>> {
        self.hold.as_ref().map(|(owner, expires_at)| RowView {
            owner,
            expires_at: *expires_at,
        })
    }

    fn encode(expires_at: u64, fence: u64, owner: &str) -> Vec<u8> {
        format!("2:{expires_at}:{fence}:{owner}").into_bytes()
    }
}

/// Whether a granted write is a new hold (which takes the next fence) or changes the current one.
#[derive(Clone, Copy, PartialEq)]
enum Hold {
    New,
    Current,
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

    /// Reads the key, asks `rule` (one of [`crate::rows`]) what to do, and writes that with
    /// compare-and-swap; re-reads and decides again whenever another writer got in between.
    /// Answers the decision and the fence of the hold it leaves, or `None` when the attempts
    /// ran out.
    fn update(
        &self,
        key: &Key,
        owner: &OwnerToken,
        hold: Hold,
        rule: impl Fn(Option<RowView<'_>>, u64) -> Decision,
    ) -> Result<Option<(Decision, Option<Fence>)>, KeyValueError> {
        let mut cas = Cas::new(&self.bucket, key.as_str())?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let slot = Slot::read(cas.current()?)?;
            let decision = rule(slot.view(), wall_clock_ms());
            let (value, fence) = match decision.change {
                Change::Keep => return Ok(Some((decision, None))),
                Change::Put { expires_at } => {
                    let fence = match hold {
                        Hold::New => slot.fence.saturating_add(1),
                        Hold::Current => slot.fence,
                    };
                    let value = Slot::encode(expires_at, fence, owner.as_str());
                    (value, Fence::new(fence).ok())
                }
                Change::Delete => (Slot::encode(0, slot.fence, ""), None),
            };
            match atomics::swap(cas, &value) {
                Ok(()) => return Ok(Some((decision, fence))),
                Err(CasError::CasFailed(next)) => cas = next,
                Err(CasError::StoreError(e)) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// [`KeyValueLockStore::update`] for release and extend: answers whether it was granted.
    fn update_hold(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rule: impl Fn(Option<RowView<'_>>, u64) -> Decision,
    ) -> Result<bool, KeyValueError> {
        let (decision, _) = self
            .update(key, owner, Hold::Current, rule)?
            .ok_or_else(contended)?;
        Ok(decision.granted)
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
        let outcome = self.update(key, owner, Hold::New, |row, now| {
            rows::acquire(row, now, ttl)
        })?;
        // Attempts ran out: others kept taking and freeing the key. Not winning is a correct
        // answer to a contended acquire (a waiting caller simply tries again).
        Ok(match outcome {
            Some((decision, fence)) if decision.granted => Some(Grant::new(fence)),
            _ => None,
        })
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, KeyValueError> {
        self.update_hold(key, owner, |row, now| rows::release(row, now, owner))
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, KeyValueError> {
        self.update_hold(key, owner, |row, now| rows::extend(row, now, owner, ttl))
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, KeyValueError> {
        Ok(self.remaining_time(key).await?.is_some())
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, KeyValueError> {
        let slot = self.read(key)?;
        Ok(rows::remaining_time(slot.view(), wall_clock_ms()))
    }
}
