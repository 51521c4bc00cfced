//! [`KeyValueLockStore`]: the store seam over the host's `wasi:keyvalue@0.2.0-draft2`
//! (`store` + `atomics`).
//!
//! Each lock is one key whose value is `1:<expiry, epoch ms>:<owner token>` (ASCII), or the
//! empty value once released. Every change is one compare-and-swap (`atomics.cas` + `swap`)
//! against the value just read, so acquire is set-if-free, and release/extend are
//! compare-owner-and-write, with no window between check and write. Expiry is judged by
//! `wasi:clocks/wall-clock`, so the host needs no TTL support.
//!
//! Draft2 has no compare-and-delete, so release writes the empty value (a tombstone) instead of
//! deleting: a plain `delete` after the check could remove a new holder's lock. Released and
//! expired keys therefore stay in the bucket as small values until reused.

use std::fmt;

use super::bindings::wasi::keyvalue::atomics::{self, Cas, CasError};
use super::bindings::wasi::keyvalue::store::{self, Bucket};
use super::runtime::wall_clock_ms;
use crate::grant::Grant;
use crate::input::{Key, Ttl};
use crate::store::LockStore;
use crate::token::OwnerToken;

/// Compare-and-swap attempts per operation before giving up. A failed swap means another
/// writer got in first; after re-reading, almost every operation is decided at once.
const MAX_CAS_ATTEMPTS: usize = 16;

/// Version tag at the start of every stored value.
const VALUE_VERSION: &str = "1";

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

/// The state of a key as read from the bucket.
enum Slot {
    /// Absent or released (empty value).
    Free,
    /// Written by an acquire or extend; free again once `expires_at` has passed.
    Held { owner: String, expires_at: u64 },
}

impl Slot {
    fn read(value: Option<Vec<u8>>) -> Result<Slot, KeyValueError> {
        let value = match value {
            None => return Ok(Slot::Free),
            Some(v) if v.is_empty() => return Ok(Slot::Free),
            Some(v) => v,
        };
        let foreign = || KeyValueError("the key holds a value keel-lock did not write".to_owned());
        let text = std::str::from_utf8(&value).map_err(|_| foreign())?;
        let (version, rest) = text.split_once(':').ok_or_else(foreign)?;
        let (expires_at, owner) = rest.split_once(':').ok_or_else(foreign)?;
        if version != VALUE_VERSION || owner.is_empty() {
            return Err(foreign());
        }
        let expires_at = expires_at.parse().map_err(|_| foreign())?;
        Ok(Slot::Held {
            owner: owner.to_owned(),
            expires_at,
        })
    }

    /// The live holder and its expiry, if the key is held at `now`.
    fn live(&self, now: u64) -> Option<(&str, u64)> {
        match self {
            Slot::Held { owner, expires_at } if *expires_at > now => Some((owner, *expires_at)),
            _ => None,
        }
    }

    fn encode(owner: &OwnerToken, expires_at: u64) -> Vec<u8> {
        format!("{VALUE_VERSION}:{expires_at}:{}", owner.as_str()).into_bytes()
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

    /// Reads the key, lets `decide` pick the new value (or `None`: change nothing, answer
    /// `false`), and writes it with compare-and-swap; re-reads and decides again whenever
    /// another writer got in between. `Ok(None)` means the attempts ran out.
    fn update(
        &self,
        key: &Key,
        decide: impl Fn(&Slot, u64) -> Option<Vec<u8>>,
    ) -> Result<Option<bool>, KeyValueError> {
        let mut cas = Cas::new(&self.bucket, key.as_str())?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let slot = Slot::read(cas.current()?)?;
            let Some(value) = decide(&slot, wall_clock_ms()) else {
                return Ok(Some(false));
            };
            match atomics::swap(cas, &value) {
                Ok(()) => return Ok(Some(true)),
                Err(CasError::CasFailed(next)) => cas = next,
                Err(CasError::StoreError(e)) => return Err(e.into()),
            }
        }
        Ok(None)
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
        let won = self.update(key, |slot, now| {
            slot.live(now)
                .is_none()
                .then(|| Slot::encode(owner, now.saturating_add(ttl.as_ms())))
        })?;
        // Attempts ran out: others kept taking and freeing the key. Not winning is a correct
        // answer to a contended acquire (a waiting caller simply tries again).
        Ok(won.unwrap_or(false).then(Grant::unfenced))
    }

    async fn release(&self, key: &Key, owner: &OwnerToken) -> Result<bool, KeyValueError> {
        self.update(key, |slot, now| {
            matches!(slot.live(now), Some((o, _)) if o == owner.as_str()).then(Vec::new)
        })?
        .ok_or_else(contended)
    }

    async fn extend(&self, key: &Key, owner: &OwnerToken, ttl: Ttl) -> Result<bool, KeyValueError> {
        self.update(key, |slot, now| {
            matches!(slot.live(now), Some((o, _)) if o == owner.as_str())
                .then(|| Slot::encode(owner, now.saturating_add(ttl.as_ms())))
        })?
        .ok_or_else(contended)
    }

    async fn is_locked(&self, key: &Key) -> Result<bool, KeyValueError> {
        Ok(self.read(key)?.live(wall_clock_ms()).is_some())
    }

    async fn remaining_time(&self, key: &Key) -> Result<Option<u64>, KeyValueError> {
        let now = wall_clock_ms();
        Ok(self
            .read(key)?
            .live(now)
            .map(|(_, expires_at)| expires_at - now))
    }
}
