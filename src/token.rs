//! Owner tokens: the random value that makes release and extend conditional on ownership.

use crate::prelude::*;
use alloc::sync::Arc;
use core::cell::RefCell;
use core::fmt;

use crate::error::RandomError;
use crate::input::InputError;

/// Longest owner token accepted from outside (a restored lock, a WIT caller).
pub const MAX_OWNER_BYTES: usize = 128;

/// Random bytes in a minted token: 128 bits, enough that two holders never collide.
const TOKEN_BYTES: usize = 16;

/// Bytes drawn from the CSPRNG at a time. Drawing 16 bytes per acquire would cost one
/// `crypto.getRandomValues` call across the wasm boundary each time; a 4 KiB pool (256 tokens)
/// amortises it.
const POOL_BYTES: usize = TOKEN_BYTES * 256;

per_thread! {
    static POOL: RefCell<(Vec<u8>, usize)> = const { RefCell::new((Vec::new(), 0)) };
}

/// Takes 16 bytes from the token pool (refilling it if needed) as two `u64`s: random keys for
/// a hash, drawn where tokens are so that they cost no extra call to the platform's CSPRNG.
pub(crate) fn random_pair() -> Result<(u64, u64), RandomError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    take_random(&mut bytes)?;
    let (k0, k1) = bytes.split_at(8);
    let word = |half: &[u8]| half.iter().fold(0u64, |w, &b| w << 8 | u64::from(b));
    Ok((word(k0), word(k1)))
}

/// Fills `out` with the pool's next bytes, refilling the pool first if it has fewer left, and
/// wipes them in the pool.
fn take_random(out: &mut [u8; TOKEN_BYTES]) -> Result<(), RandomError> {
    let empty = POOL.with(|pool| {
        let (bytes, used) = &*pool.borrow();
        bytes.is_empty() || used + TOKEN_BYTES > bytes.len()
    });
    if empty {
        // Filled with the pool not borrowed: in JS this calls `crypto.getRandomValues`,
        // which user code could replace with something that mints a token itself.
        let mut fresh = vec![0; POOL_BYTES];
        getrandom::fill(&mut fresh).map_err(RandomError::from_getrandom)?;
        POOL.with(|pool| *pool.borrow_mut() = (fresh, 0));
    }
    POOL.with(|pool| {
        let (bytes, used) = &mut *pool.borrow_mut();
        let taken = &mut bytes[*used..*used + TOKEN_BYTES];
        out.copy_from_slice(taken);
        // Spent bytes are wiped so a later heap read cannot recover earlier tokens.
        taken.fill(0);
        *used += TOKEN_BYTES;
    });
    Ok(())
}

/// The longest hold metadata accepted, in bytes of UTF-8.
pub const MAX_METADATA_BYTES: usize = 1024;

/// What a holder says about itself (which host, which job), kept by the store with the hold
/// and shown by `inspect`, for people and tools: at most [`MAX_METADATA_BYTES`] of UTF-8.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Metadata(Arc<str>);

impl Metadata {
    /// Checks `text`: longer than [`MAX_METADATA_BYTES`] is [`InputError::MetadataTooLong`].
    pub fn new(text: &str) -> Result<Self, InputError> {
        if text.len() > MAX_METADATA_BYTES {
            return Err(InputError::MetadataTooLong {
                len: text.len(),
                max: MAX_METADATA_BYTES,
            });
        }
        Ok(Metadata(Arc::from(text)))
    }

    /// The metadata as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An owner token: 32 lowercase hex digits when minted here, or any 1–128 printable ASCII
/// characters when it comes from outside. It may carry the hold's [`Metadata`] to a store that
/// keeps it ([`crate::LockStore::keeps_metadata`]); equality is the token's alone.
///
/// The metadata follows the token in the same string, after a space (which no token holds):
/// a token stays one pointer to clone and compare, whether it carries metadata or not.
#[derive(Clone, Eq)]
pub struct OwnerToken(Arc<str>);

/// Between a token and the metadata it carries.
#[cfg(feature = "std")]
const SAYS: u8 = b' ';

impl PartialEq for OwnerToken {
    // A hold and the run or handle that took it share one token, so most comparisons are of a
    // token with itself: settled by the pointer, before comparing text.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl core::hash::Hash for OwnerToken {
    // The token, as equality compares it.
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl OwnerToken {
    /// Mints a fresh token from the platform CSPRNG (`crypto.getRandomValues` in JS hosts).
    /// Called lazily on the first acquire, never at module load: Workers forbid randomness there.
    pub fn mint() -> Result<Self, RandomError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        take_random(&mut bytes)?;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; TOKEN_BYTES * 2];
        for (i, b) in bytes.iter().enumerate() {
            hex[2 * i] = HEX[usize::from(b >> 4)];
            hex[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        // Every byte is an ASCII hex digit, so this never fails.
        let text = core::str::from_utf8(&hex)
            .map_err(|_| RandomError(String::from("a minted token is not ASCII")))?;
        Ok(OwnerToken(Arc::from(text)))
    }

    /// Accepts a token from outside: 1–128 printable ASCII characters, no spaces.
    pub fn parse(token: impl Into<String>) -> Result<Self, InputError> {
        let token = token.into();
        let ok = !token.is_empty()
            && token.len() <= MAX_OWNER_BYTES
            && token.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(OwnerToken(Arc::from(token)))
        } else {
            Err(InputError::InvalidOwner {
                max: MAX_OWNER_BYTES,
            })
        }
    }

    /// Whether this token has the form [`OwnerToken::mint`] gives every token: 32 lowercase hex
    /// digits. A serialized lock always carries a minted token, so a restored one must be too.
    pub fn is_minted_form(&self) -> bool {
        self.0.len() == TOKEN_BYTES * 2
            && self
                .0
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// The token as a string slice.
    #[cfg(feature = "std")]
    #[inline(never)]
    pub fn as_str(&self) -> &str {
        let end = self
            .0
            .bytes()
            .position(|b| b == SAYS)
            .unwrap_or(self.0.len());
        self.0.get(..end).unwrap_or_default()
    }

    /// The token as a string slice (builds without hold metadata: the whole string).
    #[cfg(not(feature = "std"))]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This token, carrying `metadata` (or, `None`, nothing) for the store to keep with the
    /// hold it takes.
    #[cfg(feature = "std")]
    pub fn with_metadata(self, metadata: Option<Metadata>) -> Self {
        let carries = self.0.len() != self.as_str().len();
        match metadata {
            Some(said) => OwnerToken(Arc::from([self.as_str(), " ", said.as_str()].concat())),
            None if carries => OwnerToken(Arc::from(self.as_str())),
            None => self,
        }
    }

    /// The hold metadata this token carries, if any.
    pub fn metadata(&self) -> Option<&str> {
        #[cfg(feature = "std")]
        return self.0.get(self.as_str().len() + 1..);
        #[cfg(not(feature = "std"))]
        None
    }
}

impl fmt::Debug for OwnerToken {
    // Tokens are capabilities: keep them out of logs and panic messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn minted_tokens_are_128_bit_hex_and_unique() {
        let tokens: HashSet<String> = (0..10_000)
            .map(|_| OwnerToken::mint().unwrap().as_str().to_owned())
            .collect();
        assert_eq!(tokens.len(), 10_000);
        for t in tokens.iter().take(50) {
            assert_eq!(t.len(), 32);
            assert!(OwnerToken::parse(t.clone()).unwrap().is_minted_form());
            assert!(t
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
    }

    #[test]
    fn parsed_tokens_are_checked() {
        assert!(OwnerToken::parse("").is_err());
        assert!(OwnerToken::parse("has space").is_err());
        assert!(OwnerToken::parse("x".repeat(MAX_OWNER_BYTES + 1)).is_err());
        assert!(OwnerToken::parse("ok-token_1").is_ok());
        assert!(!OwnerToken::parse("ok-token_1").unwrap().is_minted_form());
        assert!(!OwnerToken::parse("A".repeat(32)).unwrap().is_minted_form());
        assert_eq!(
            format!("{:?}", OwnerToken::parse("secret").unwrap()),
            "OwnerToken(..)"
        );
    }

    #[test]
    fn metadata_rides_on_the_token_and_equality_stays_the_tokens() {
        let plain = OwnerToken::mint().unwrap();
        let said = plain
            .clone()
            .with_metadata(Some(Metadata::new("host-a job 7").unwrap()));
        assert_eq!(said.as_str(), plain.as_str());
        assert_eq!(said, plain);
        assert_eq!(said.metadata(), Some("host-a job 7"));
        assert_eq!(plain.metadata(), None);
        let cleared = said.with_metadata(None);
        assert_eq!(cleared.metadata(), None);
        assert_eq!(cleared, plain);
        assert!(Metadata::new(&"é".repeat(512)).is_ok());
        assert!(Metadata::new(&"é".repeat(513)).is_err());
    }
}
