//! What `inspect` shows of a key: its live holds — each one's metadata, fence and time left —
//! and how many wait. Never an owner token: a token is the capability to release, so there is
//! no field a store could put one in.

use crate::prelude::*;

use crate::grant::Fence;
use crate::token::Metadata;

/// One live hold of a key, as [`crate::LockStore::inspect`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// What the holder said about itself when it took the hold, if anything.
    pub metadata: Option<Metadata>,
    /// The hold's fence, or `None` from a store without fences.
    pub fence: Option<Fence>,
    /// Milliseconds until the hold expires, by the store's clock.
    pub remaining_ms: u64,
}

impl HolderInfo {
    /// A live hold's view.
    pub fn new(metadata: Option<Metadata>, fence: Option<Fence>, remaining_ms: u64) -> Self {
        HolderInfo {
            metadata,
            fence,
            remaining_ms,
        }
    }
}

/// A key's live holds and waiters, read in one atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockInfo {
    /// The live holds, in fence order: at most one for a lock, one per permit or reader.
    pub holders: Vec<HolderInfo>,
    /// Callers queued for the key, or `None` where the store cannot know (it keeps no queue
    /// it can count).
    pub waiting: Option<u32>,
}

impl LockInfo {
    /// `holders` (put in fence order here) and `waiting`.
    pub fn new(mut holders: Vec<HolderInfo>, waiting: Option<u32>) -> Self {
        // An insertion sort: a key has few holders, and the library's sorts cost a wasm build
        // kilobytes.
        for i in 1..holders.len() {
            let mut j = i;
            while j > 0 && holders[j - 1].fence > holders[j].fence {
                holders.swap(j - 1, j);
                j -= 1;
            }
        }
        LockInfo { holders, waiting }
    }

    /// Whether anyone holds the key.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }
}
