//! Shared holds: counting semaphores ("at most N") and read-write locks ("many readers, one
//! writer"), as one model every store implements once (ARCHITECTURE.md, "Shared holds").
//!
//! A key has holders; each hold has its own owner token, TTL and fence. A hold is exclusive (a
//! lock, a write lock) or shared with a *weight* under a *limit* (a semaphore's permits, a read
//! lock: weight 1 under [`MAX_LIMIT`]). The rule for a request, with expired holds counted as
//! absent, is [`fit`]; the rule for a queue is FIFO: a request never passes a waiter queued
//! before it, even one it would fit beside.

use crate::grant::Grant;
use crate::input::InputError;

/// The largest limit, 2^32 − 1: the limit of read locks, which is "no limit" in practice.
pub const MAX_LIMIT: u32 = u32::MAX;

/// A shared hold's terms: `weight` permits out of `limit`. Both whole numbers,
/// `1 <= weight <= limit <= MAX_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Share {
    weight: u32,
    limit: u32,
}

impl Share {
    /// `weight` permits of a semaphore with `limit`.
    pub fn new(weight: u32, limit: u32) -> Result<Share, InputError> {
        if limit == 0 {
            return Err(InputError::InvalidLimit {
                value: 0.0,
                max: MAX_LIMIT,
            });
        }
        if weight == 0 || weight > limit {
            return Err(InputError::InvalidPermits {
                value: f64::from(weight),
                limit,
            });
        }
        Ok(Share { weight, limit })
    }

    /// The terms of a read lock: weight 1, limit [`MAX_LIMIT`].
    pub const READ: Share = Share {
        weight: 1,
        limit: MAX_LIMIT,
    };

    /// Checks a limit given as a JS number: a whole number in `1..=MAX_LIMIT`.
    pub fn limit_from_f64(value: f64) -> Result<u32, InputError> {
        if crate::float::fract(value) == 0.0 && (1.0..=f64::from(MAX_LIMIT)).contains(&value) {
            Ok(value as u32)
        } else {
            Err(InputError::InvalidLimit {
                value,
                max: MAX_LIMIT,
            })
        }
    }

    /// Checks a permit count given as a JS number against `limit`: a whole number in
    /// `1..=limit`.
    pub fn from_f64(permits: f64, limit: u32) -> Result<Share, InputError> {
        if crate::float::fract(permits) == 0.0 && (1.0..=f64::from(limit)).contains(&permits) {
            Share::new(permits as u32, limit)
        } else {
            Err(InputError::InvalidPermits {
                value: permits,
                limit,
            })
        }
    }

    /// How many permits the hold takes.
    pub fn weight(self) -> u32 {
        self.weight
    }

    /// How many permits the key has.
    pub fn limit(self) -> u32 {
        self.limit
    }
}

/// How a lock holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Holding {
    /// Alone: a lock, a write lock.
    #[default]
    Exclusive,
    /// Beside other shared holds of the same limit, up to it: permits, a read lock.
    Shared(Share),
}

impl Holding {
    /// The share, for a shared holding.
    pub fn share(self) -> Option<Share> {
        match self {
            Holding::Exclusive => None,
            Holding::Shared(share) => Some(share),
        }
    }
}

/// A store's answer to a shared acquire ([`crate::LockStore::acquire_shared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedGrant {
    /// Granted; the grant carries the hold's fence.
    Granted(Grant),
    /// Not now: a writer holds the key, the permits are taken, or callers are queued first.
    Busy,
    /// The key's live shared holds are under a different limit; never granted.
    LimitMismatch {
        /// The limit the live holds have.
        held: u32,
    },
    /// The store keeps no shared holds.
    Unsupported,
}

impl From<Option<Grant>> for SharedGrant {
    fn from(grant: Option<Grant>) -> Self {
        grant.map_or(SharedGrant::Busy, SharedGrant::Granted)
    }
}

/// What a key's live holds are, as a store read them at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveHolds {
    /// A live exclusive hold.
    pub exclusive: bool,
    /// The limit of the live shared holds, if any is live.
    pub limit: Option<u32>,
    /// The sum of the live shared holds' weights.
    pub weight: u64,
}

/// Whether a request fits beside the live holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Grantable now (unless someone is queued first).
    Fits,
    /// Not now.
    Full,
    /// The live shared holds have another limit.
    Mismatch {
        /// Their limit.
        held: u32,
    },
}

/// The grant rule: an exclusive request fits when nothing is live; a shared one when no
/// exclusive hold is live, every live shared hold has its limit, and the weights with its own
/// stay within it.
pub fn fit(live: LiveHolds, request: Holding) -> Fit {
    if live.exclusive {
        return Fit::Full;
    }
    match request {
        Holding::Exclusive if live.limit.is_some() => Fit::Full,
        Holding::Exclusive => Fit::Fits,
        Holding::Shared(share) => match live.limit {
            Some(held) if held != share.limit => Fit::Mismatch { held },
            _ if live.weight + u64::from(share.weight) > u64::from(share.limit) => Fit::Full,
            _ => Fit::Fits,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(weight: u32, limit: u32) -> Holding {
        Holding::Shared(Share::new(weight, limit).unwrap())
    }

    #[test]
    fn an_exclusive_request_needs_an_empty_key() {
        let nothing = LiveHolds::default();
        assert_eq!(fit(nothing, Holding::Exclusive), Fit::Fits);
        let writer = LiveHolds {
            exclusive: true,
            ..nothing
        };
        assert_eq!(fit(writer, Holding::Exclusive), Fit::Full);
        assert_eq!(fit(writer, shared(1, 3)), Fit::Full);
        let reader = LiveHolds {
            limit: Some(MAX_LIMIT),
            weight: 1,
            ..nothing
        };
        assert_eq!(fit(reader, Holding::Exclusive), Fit::Full);
    }

    #[test]
    fn shared_requests_fit_up_to_the_limit_of_the_same_limit_only() {
        let two_of_three = LiveHolds {
            exclusive: false,
            limit: Some(3),
            weight: 2,
        };
        assert_eq!(fit(two_of_three, shared(1, 3)), Fit::Fits);
        assert_eq!(fit(two_of_three, shared(2, 3)), Fit::Full);
        assert_eq!(fit(two_of_three, shared(1, 4)), Fit::Mismatch { held: 3 });
        assert_eq!(fit(LiveHolds::default(), shared(3, 3)), Fit::Fits);
        let readers = LiveHolds {
            exclusive: false,
            limit: Some(MAX_LIMIT),
            weight: u64::from(MAX_LIMIT),
        };
        assert_eq!(fit(readers, Holding::Shared(Share::READ)), Fit::Full);
    }

    #[test]
    fn bad_terms_are_input_errors() {
        assert!(Share::new(0, 3).is_err());
        assert!(Share::new(4, 3).is_err());
        assert!(Share::new(1, 0).is_err());
        assert_eq!(Share::limit_from_f64(4.0), Ok(4));
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, 4_294_967_296.0] {
            assert!(Share::limit_from_f64(bad).is_err(), "{bad}");
        }
        assert_eq!(Share::from_f64(2.0, 3).map(Share::weight), Ok(2));
        for bad in [0.0, 4.0, 1.5, f64::NAN, -2.0] {
            assert!(Share::from_f64(bad, 3).is_err(), "{bad}");
        }
    }
}
