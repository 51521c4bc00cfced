//! The lock-row rules, once, for every store that keeps rows itself.
//!
//! A store that holds `(key → owner, expires_at)` rows (the memory store, the Durable Object)
//! reads the current row, asks one of these functions what to do given its own clock's `now`,
//! and applies the answer. Keeping the decision here means "an expired row counts as absent" and
//! "only a live owner may release or extend" are written exactly once.

use crate::input::Ttl;
use crate::token::OwnerToken;

/// A stored row, as a store read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowView<'a> {
    /// The holder's owner token.
    pub owner: &'a str,
    /// Expiry, in the store clock's milliseconds.
    pub expires_at: u64,
}

impl RowView<'_> {
    /// Whether the row still holds its key at `now`.
    pub fn is_live(&self, now: u64) -> bool {
        self.expires_at > now
    }

    fn is_held_by(&self, owner: &OwnerToken, now: u64) -> bool {
        self.is_live(now) && self.owner == owner.as_str()
    }
}

/// What the store must do to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    Keep,
    /// Write the row `(caller's owner, expires_at)`, replacing whatever is there.
    Put {
        /// The new expiry, in the store clock's milliseconds.
        expires_at: u64,
    },
    /// Delete the row.
    Delete,
}

/// A store operation's answer and the write (if any) that makes it true.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// What the operation answers: acquired / released / extended.
    pub granted: bool,
    /// What to write.
    pub change: Change,
}

const REFUSED: Decision = Decision {
    granted: false,
    change: Change::Keep,
};

/// Set-if-absent: granted when there is no row or the row has expired.
pub fn acquire(existing: Option<RowView<'_>>, now: u64, ttl: Ttl) -> Decision {
    match existing {
        Some(row) if row.is_live(now) => REFUSED,
        _ => Decision {
            granted: true,
            change: Change::Put {
                expires_at: now.saturating_add(ttl.as_ms()),
            },
        },
    }
}

/// Compare-owner-and-delete: granted only to the live holder.
pub fn release(existing: Option<RowView<'_>>, now: u64, owner: &OwnerToken) -> Decision {
    match existing {
        Some(row) if row.is_held_by(owner, now) => Decision {
            granted: true,
            change: Change::Delete,
        },
        _ => REFUSED,
    }
}

/// Compare-owner-and-reset-expiry: granted only to the live holder; the new expiry is `ttl` from
/// `now`.
pub fn extend(existing: Option<RowView<'_>>, now: u64, owner: &OwnerToken, ttl: Ttl) -> Decision {
    match existing {
        Some(row) if row.is_held_by(owner, now) => Decision {
            granted: true,
            change: Change::Put {
                expires_at: now.saturating_add(ttl.as_ms()),
            },
        },
        _ => REFUSED,
    }
}

/// Milliseconds until the row expires, or `None` when nobody holds the key.
pub fn remaining_time(existing: Option<RowView<'_>>, now: u64) -> Option<u64> {
    existing
        .filter(|row| row.is_live(now))
        .map(|row| row.expires_at - now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(owner: &str, expires_at: u64) -> Option<RowView<'_>> {
        Some(RowView { owner, expires_at })
    }

    #[test]
    fn acquire_treats_expired_as_absent() {
        let ttl = Ttl::from_ms(10).unwrap();
        let put = Change::Put { expires_at: 110 };
        assert_eq!(acquire(None, 100, ttl).change, put);
        assert_eq!(acquire(row("a", 100), 100, ttl).change, put);
        assert_eq!(acquire(row("a", 101), 100, ttl), REFUSED);
    }

    #[test]
    fn release_and_extend_need_the_live_owner() {
        let a = OwnerToken::parse("a").unwrap();
        let ttl = Ttl::from_ms(5).unwrap();
        assert!(release(row("a", 101), 100, &a).granted);
        assert_eq!(release(row("b", 101), 100, &a), REFUSED);
        assert_eq!(release(row("a", 100), 100, &a), REFUSED);
        assert_eq!(release(None, 100, &a), REFUSED);
        assert_eq!(
            extend(row("a", 101), 100, &a, ttl).change,
            Change::Put { expires_at: 105 }
        );
        assert_eq!(extend(row("a", 99), 100, &a, ttl), REFUSED);
        assert_eq!(extend(row("b", 200), 100, &a, ttl), REFUSED);
    }

    #[test]
    fn remaining_is_none_once_expired() {
        assert_eq!(remaining_time(row("a", 150), 100), Some(50));
        assert_eq!(remaining_time(row("a", 100), 100), None);
        assert_eq!(remaining_time(None, 100), None);
    }
}
