//! Maps keyed by the binding's own sequential ids (waiting futures, run contexts). The ids are
//! ours, never chosen by a caller, so they need no DoS-resistant hash: a multiply by an odd
//! constant spreads consecutive ids over hashbrown's buckets and tags, and costs a fraction of
//! SipHash, which showed up in the profile of every hand-over.

use core::hash::{BuildHasherDefault, Hasher};
use hashbrown::HashMap;

/// A `HashMap` keyed by an internal `u32` id.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// An empty [`IdMap`], in a `const` context.
pub(crate) const fn id_map<V>() -> IdMap<V> {
    HashMap::with_hasher(BuildHasherDefault::new())
}

/// Fibonacci hashing of one `u32`.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and its tag from the top 7.
        self.0 ^ (self.0 >> 32)
    }
}
