//! What a successful acquire hands back: a [`Grant`], carrying the acquisition's [`Fence`].

use core::fmt;

use crate::input::InputError;
pub use crate::input::MAX_FENCE;

/// A fencing token: a number that strictly increases with every acquisition of a key. The
/// protected resource remembers the highest fence it has seen and refuses writes carrying a
/// lower one, which stops a holder that paused past its TTL from doing damage. Gaps are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Checks a fence a store answered: `1..=MAX_FENCE`.
    pub fn new(value: u64) -> Result<Self, InputError> {
        if value == 0 || value > MAX_FENCE {
            return Err(InputError::InvalidFence { value });
        }
        Ok(Fence(value))
    }

    /// The fence as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The fence after this one, or `None` once [`MAX_FENCE`] is spent.
    pub fn next(self) -> Option<Fence> {
        Fence::new(self.0 + 1).ok()
    }

    /// The first fence a store hands out.
    pub const FIRST: Fence = Fence(1);
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A successful acquisition, as the store reports it.
///
/// A struct rather than a bare `bool` so the store can say more about the grant without a new
/// trait method: today the fence; a store that hands the lock over to waiters adds how long the
/// grant waited in the store (so the holder's local deadline stays conservative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    fence: Option<Fence>,
    waited_ms: u64,
}

impl Grant {
    /// A grant with `fence`, or without one when the store does not keep fences.
    pub fn new(fence: Option<Fence>) -> Self {
        Grant {
            fence,
            waited_ms: 0,
        }
    }

    /// A grant from a store that keeps no fences (the seed five-method JS seam answering `true`).
    pub fn unfenced() -> Self {
        Grant::new(None)
    }

    /// The same grant, made after the request waited `ms` in the store's queue.
    pub fn waited(self, ms: u64) -> Self {
        Grant {
            waited_ms: ms,
            ..self
        }
    }

    /// How long the request waited in the store before this grant, by the store's own timer
    /// (0 for an immediate grant). The holder's TTL runs from the grant, so its conservative
    /// local deadline is `request sent + waited + ttl`.
    pub fn waited_ms(&self) -> u64 {
        self.waited_ms
    }

    /// The acquisition's fence, if the store keeps fences.
    pub fn fence(&self) -> Option<Fence> {
        self.fence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_bounded_and_ordered() {
        assert!(Fence::new(0).is_err());
        assert!(Fence::new(MAX_FENCE + 1).is_err());
        let last = Fence::new(MAX_FENCE).unwrap();
        assert_eq!(last.next(), None);
        assert_eq!(Fence::FIRST.next(), Some(Fence::new(2).unwrap()));
        assert!(Fence::FIRST < Fence::new(2).unwrap());
    }
}
