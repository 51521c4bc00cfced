//! One acquisition as a state machine that does no I/O: it says which store call to make (and
//! how long to give it), how long to pause between attempts, and when to stop; whoever drives it
//! makes the calls, keeps the time and feeds the answers back. [`crate::Lock`] drives it with
//! futures; the JS binding drives it from JS, awaiting the store's promises itself, so that the
//! decisions — retry pacing, the bound on every call, fresh tokens after an abandoned attempt,
//! the hold's deadline — are the same code everywhere.
//!
//! Times come in as arguments, on the monotonic clock (`mono`): waits and a hold's deadline are
//! measured on it, so a wall clock stepped back or forth changes neither.

use crate::error::RandomError;
use crate::grant::{Fence, Grant};
use crate::input::{AcquireOptions, Ttl};
use crate::store::Wait;
#[cfg(feature = "std")]
use crate::token::Metadata;
use crate::token::OwnerToken;

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Call the store's `acquire(key, owner, ttl)`. Feed its answer to [`Attempt::answered`];
    /// if it has not answered after `bound_ms`, drop it and call [`Attempt::unanswered`].
    Acquire {
        /// How long the call may take.
        bound_ms: u64,
    },
    /// Call the store's `acquire_or_wait(key, owner, ttl, wait)`: the store queues the caller
    /// and hands the key over. Answers and silence are fed back as for [`Next::Acquire`].
    AcquireOrWait {
        /// What the store is asked to wait for.
        wait: Wait,
        /// How long the call may take: the wait plus one poll interval.
        bound_ms: u64,
    },
    /// Pause `ms`, then call [`Attempt::retry`].
    Sleep {
        /// The pause.
        ms: u64,
    },
    /// The key is this caller's: [`Attempt::into_hold`] says on what terms.
    Held,
    /// Not acquired: the key was held and the timeout (if any) is spent.
    Refused,
    /// The one attempt of an acquire without a timeout went unanswered for `after_ms` (the TTL):
    /// fail with [`crate::Error::StoreTimeout`].
    TimedOut {
        /// How long it was given.
        after_ms: u64,
    },
}

/// The terms of a hold the store granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The token the key is held under.
    pub owner: OwnerToken,
    /// When the store will free the key at the earliest, by the caller's monotonic clock: the
    /// time the request was sent, plus the time the store says the caller waited, plus the TTL.
    pub deadline: u64,
    /// The grant's fencing token.
    pub fence: Option<Fence>,
}

/// One acquisition in progress.
#[derive(Debug)]
pub struct Attempt {
    owner: OwnerToken,
    ttl: Ttl,
    timeout_ms: u64,
    /// The retry delay, at least 1 ms, so a waiter always yields to the holder.
    pause: u64,
    /// The store waits itself (it [`crate::LockStore::hands_over`]) and a timeout was given.
    store_waits: bool,
    /// When the wait ends, on the monotonic clock (0 without a timeout).
    give_up_at: u64,
    /// When the request in flight was sent.
    sent: u64,
    held: Option<Held>,
}

impl Attempt {
    /// Starts an acquisition with a fresh owner token and says what to do first. `store_waits`
    /// is whether the store hands keys over to waiters ([`crate::LockStore::hands_over`]).
    pub fn start(
        options: AcquireOptions,
        ttl: Ttl,
        store_waits: bool,
        mono: u64,
    ) -> Result<(Attempt, Next), RandomError> {
        let timeout_ms = options.timeout_ms;
        let mut attempt = Attempt {
            owner: OwnerToken::mint()?,
            ttl,
            timeout_ms,
            pause: options.retry_delay_ms.max(1),
            store_waits: store_waits && timeout_ms > 0,
            give_up_at: match timeout_ms {
                0 => 0,
                t => mono.saturating_add(t),
            },
            sent: mono,
            held: None,
        };
        let next = attempt.send(mono);
        Ok((attempt, next))
    }

    /// This attempt, its owner tokens carrying `metadata` for the store to keep with the hold.
    #[cfg(feature = "std")]
    pub fn with_metadata(mut self, metadata: Option<Metadata>) -> Self {
        if metadata.is_some() {
            self.owner = self.owner.with_metadata(metadata);
        }
        self
    }

    /// The owner token the store calls carry.
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// Takes the hold out, once [`Next::Held`] was answered.
    pub fn into_hold(self) -> Option<Held> {
        self.held
    }

    /// The next request, sent now.
    fn send(&mut self, mono: u64) -> Next {
        let ttl = self.ttl.as_ms();
        if self.store_waits {
            // The store ends the wait itself, at what is left of the timeout (all of it, at
            // first); the bound is for a store that never answers.
            let answer_by = self.give_up_at.saturating_add(self.pause);
            return Next::AcquireOrWait {
                wait: Wait {
                    wait_ms: self.give_up_at.saturating_sub(mono).max(1),
                    poll_ms: self.pause,
                },
                bound_ms: answer_by.saturating_sub(mono),
            };
        }
        let bound_ms = match self.timeout_ms {
            0 => ttl,
            // Within the wait, but never less than one retry delay (an attempt sent just before
            // the deadline still gets a fair chance) nor more than the TTL (an answer after that
            // could only grant a hold already past its local deadline).
            _ => self
                .give_up_at
                .saturating_sub(mono)
                .max(self.pause)
                .min(ttl),
        };
        Next::Acquire { bound_ms }
    }

    /// The store answered: `Some(grant)` (the key is ours) or `None` (held by someone else).
    /// `mono` is only read for a refusal: with a grant a driver may pass anything.
    pub fn answered(&mut self, grant: Option<Grant>, mono: u64) -> Next {
        match grant {
            Some(grant) => {
                // The TTL runs from the grant, which came no earlier than `sent + waited` (the
                // store measured the wait; the request arrived no earlier than it was sent).
                let granted_no_earlier_than = self.sent.saturating_add(grant.waited_ms());
                self.held = Some(Held {
                    owner: self.owner.clone(),
                    deadline: granted_no_earlier_than.saturating_add(self.ttl.as_ms()),
                    fence: grant.fence(),
                });
                Next::Held
            }
            None => self.refused(mono),
        }
    }

    /// The call went unanswered for its bound and was dropped.
    pub fn unanswered(&mut self, mono: u64) -> Result<Next, RandomError> {
        if self.store_waits {
            return Ok(Next::Refused);
        }
        if self.timeout_ms == 0 {
            return Ok(Next::TimedOut {
                after_ms: self.ttl.as_ms(),
            });
        }
        // The abandoned attempt may still be granted, and that grant released when its answer
        // comes: a later attempt under the same token could lose its hold to that release, so
        // it gets a token of its own.
        #[cfg(feature = "std")]
        {
            let metadata = self
                .owner
                .metadata()
                .and_then(|said| Metadata::new(said).ok());
            self.owner = OwnerToken::mint()?.with_metadata(metadata);
        }
        #[cfg(not(feature = "std"))]
        {
            self.owner = OwnerToken::mint()?;
        }
        Ok(self.refused(mono))
    }

    fn refused(&mut self, mono: u64) -> Next {
        if self.timeout_ms == 0 || mono >= self.give_up_at {
            return Next::Refused;
        }
        let left = self.give_up_at - mono;
        if self.store_waits {
            // A store that waits answers no when the wait is spent. A no well before that means
            // it lost the caller's place (a restart without persistence, a failover, a grant
            // that ran out before the caller heard of it): the caller queues again after a
            // pause, for what is left. Within a pause of the end it is the store's own deadline,
            // seen a little early by its timers.
            return if left > self.pause {
                Next::Sleep { ms: self.pause }
            } else {
                Next::Refused
            };
        }
        Next::Sleep {
            ms: self.pause.min(left),
        }
    }

    /// The pause after [`Next::Sleep`] is over: the next attempt, sent now.
    pub fn retry(&mut self, mono: u64) -> Next {
        self.sent = mono;
        self.send(mono)
    }
}
