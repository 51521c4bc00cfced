//! The hand-over format of `serialize()` / `restoreLock()`:
//!
//! ```text
//! keel-lock:3:<ttl ms>:<deadline, epoch ms>:<fence, or empty>:<owner, base64url>:<key, base64url>:<check>
//! keel-lock:4:<the same fields up to the key>:<weight>:<limit>:<check>
//! ```
//!
//! Version 4 is a shared hold's (a semaphore's permits, a read lock): the same fields plus the
//! hold's weight and limit, so the restored handle acquires again as what it was. A lock's hold
//! is still written as version 3, which builds that predate shared holds read too.
//!
//! Versioned so a later format can be told apart; base64url so any key survives queues, URLs
//! and headers unchanged. `<check>` is the 32-bit FNV-1a hash of everything before its `:`, in
//! 8 lowercase hex digits: a string cut short anywhere (inside the key, the last field, too) or
//! altered by accident is refused instead of read as a lock on another key. It guards against
//! accidents, not against someone forging a string. Only the exact string
//! [`SerializedLock::encode`] writes is read back: every field is re-validated, and a string
//! that decodes but is not written the way `encode` writes it (`+5000`, `0005000`, a
//! non-canonical base64url tail) is refused. Versions 2 (the same without the check) and 1
//! (without the check and the fence) are still read; they cannot tell a key cut short at a
//! base64url boundary from a shorter key.

use crate::base64url;
use crate::grant::Fence;
use crate::input::{decimal, InputError, Key, Ttl};
use crate::prelude::*;
use crate::share::{Holding, Share};
use crate::token::OwnerToken;

const MAGIC: &str = "keel-lock";

/// The newest format version this build writes (for a shared hold; a lock's is version 3).
pub const FORMAT_VERSION: u32 = 4;

/// Longest string `parse` will look at; real ones are well under 1 KiB.
const MAX_SERIALIZED_BYTES: usize = 4096;

/// Latest deadline accepted, in epoch ms: the largest time a JS `Date` can hold (year 275760).
pub const MAX_DEADLINE_MS: u64 = 8_640_000_000_000_000;

/// A lock frozen for hand-over to another process.
#[derive(Debug, Clone, PartialEq)]
pub struct SerializedLock {
    /// The key.
    pub key: Key,
    /// The lock's TTL (the default for `extend()`).
    pub ttl: Ttl,
    /// The owner token of the hold being handed over (always a minted token).
    pub owner: OwnerToken,
    /// The conservative local deadline of the hold, epoch ms by the serializing process's clock.
    pub deadline_ms: u64,
    /// The hold's fence, when its store keeps fences.
    pub fence: Option<Fence>,
    /// How the hold holds its key: a lock's, or a shared hold's weight and limit.
    pub holding: Holding,
}

fn malformed(reason: impl Into<String>) -> InputError {
    InputError::MalformedSerializedLock {
        reason: reason.into(),
    }
}

fn decode_text(field: &str, what: &str) -> Result<String, InputError> {
    let bytes = base64url::decode(field)
        .ok_or_else(|| malformed(["the ", what, " is not base64url"].concat()))?;
    String::from_utf8(bytes).map_err(|_| malformed(["the ", what, " is not UTF-8"].concat()))
}

/// A whole number written the way `encode` writes one: digits only, no sign, no leading zero.
fn number(field: &str, what: &str) -> Result<u64, InputError> {
    let canonical = !field.is_empty()
        && field.len() <= 20
        && field.bytes().all(|b| b.is_ascii_digit())
        && (field == "0" || !field.starts_with('0'));
    let value = if canonical { field.parse().ok() } else { None };
    value
        .ok_or_else(|| malformed(["the ", what, " is not a whole number written plainly"].concat()))
}

/// `text` cut at every ':'. A byte loop rather than `str::split`, whose searcher is ~1 KB of
/// wasm. A cut next to an ASCII byte is always a character boundary, so `get` never answers
/// `None` here; it is used because indexing would link `str`'s slicing panic (1.4 KB).
fn fields(text: &str) -> Vec<&str> {
    let mut fields = Vec::with_capacity(8);
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b':' {
            fields.push(text.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    fields.push(text.get(start..).unwrap_or_default());
    fields
}

/// The check of a version 3 string: FNV-1a (32 bits) of `body`, as 8 lowercase hex digits.
fn check(body: &str) -> [u8; 8] {
    let hash = body.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let mut digits = [0u8; 8];
    for (i, d) in digits.iter_mut().enumerate() {
        let nibble = (hash >> (28 - 4 * i)) as u8 & 0xf;
        *d = if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' + nibble - 10
        };
    }
    digits
}

impl SerializedLock {
    /// The string form.
    pub fn encode(&self) -> String {
        let body = match self.holding {
            Holding::Exclusive => self.body("3"),
            Holding::Shared(share) => [
                self.body("4").as_str(),
                ":",
                &decimal(share.weight().into()),
                ":",
                &decimal(share.limit().into()),
            ]
            .concat(),
        };
        let check = check(&body);
        // Hex digits are ASCII: the conversion cannot fail.
        let check = core::str::from_utf8(&check).unwrap_or_default();
        [body.as_str(), ":", check].concat()
    }

    /// The fields of `version` 2 or 3 up to the key (version 3 adds the check).
    fn body(&self, version: &str) -> String {
        // Concatenated, not format!ed: no core::fmt in the wasm builds for this.
        let fence = self.fence.map(|f| decimal(f.get())).unwrap_or_default();
        [
            MAGIC,
            ":",
            version,
            ":",
            &decimal(self.ttl.as_ms()),
            ":",
            &decimal(self.deadline_ms),
            ":",
            &fence,
            ":",
            &base64url::encode(self.owner.as_str().as_bytes()),
            ":",
            &base64url::encode(self.key.as_str().as_bytes()),
        ]
        .concat()
    }

    /// Reads a string produced by [`SerializedLock::encode`]. Anything else — truncated,
    /// edited, another version — is an [`InputError`], never a panic.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        if text.len() > MAX_SERIALIZED_BYTES {
            return Err(malformed("it is too long"));
        }
        let fields = fields(text);
        // A version 3 string's body: all but the last field (the check) and its ':'.
        let body = fields
            .last()
            .and_then(|sum| text.get(..text.len() - sum.len()))
            .and_then(|body| body.strip_suffix(':'))
            .unwrap_or_default();
        if fields[0] != MAGIC {
            return Err(malformed("it does not start with \"keel-lock:\""));
        }
        let checked = |sum: &str| match sum.as_bytes() == check(body) {
            true => Ok(()),
            false => Err(malformed(
                "it was cut short or altered: its check does not match",
            )),
        };
        let mut share = None;
        let (ttl, deadline, fence, owner, key) = match (fields.get(1).copied(), &fields[..]) {
            (Some("4"), [_, _, ttl, deadline, fence, owner, key, weight, limit, sum]) => {
                checked(sum)?;
                let weight = u32::try_from(number(weight, "weight")?).unwrap_or(0);
                let limit = u32::try_from(number(limit, "limit")?).unwrap_or(0);
                share = Some(Share::new(weight, limit)?);
                (*ttl, *deadline, Some(*fence), *owner, *key)
            }
            (Some("3"), [_, _, ttl, deadline, fence, owner, key, sum]) => {
                checked(sum)?;
                (*ttl, *deadline, Some(*fence), *owner, *key)
            }
            (Some("2"), [_, _, ttl, deadline, fence, owner, key]) => {
                (*ttl, *deadline, Some(*fence), *owner, *key)
            }
            (Some("1"), [_, _, ttl, deadline, owner, key]) => (*ttl, *deadline, None, *owner, *key),
            (Some(v @ ("1" | "2" | "3" | "4")), _) => {
                let expected = match v {
                    "1" => " has 6",
                    "2" => " has 7",
                    "3" => " has 8",
                    _ => " has 10",
                };
                return Err(malformed(
                    [
                        "version ",
                        v,
                        expected,
                        " fields separated by ':', found ",
                        &decimal(fields.len() as u64),
                    ]
                    .concat(),
                ));
            }
            (Some(v), _) => {
                return Err(InputError::UnsupportedSerializedVersion {
                    found: v.chars().take(16).collect(),
                    supported: FORMAT_VERSION,
                })
            }
            (None, _) => return Err(malformed("the version is missing")),
        };
        let deadline_ms = number(deadline, "deadline")?;
        if deadline_ms == 0 || deadline_ms > MAX_DEADLINE_MS {
            return Err(malformed("the deadline is not a time a clock can show"));
        }
        let fence = match fence {
            None | Some("") => None,
            Some(f) => Some(Fence::new(number(f, "fence")?)?),
        };
        let owner = OwnerToken::parse(decode_text(owner, "owner token")?)?;
        if !owner.is_minted_form() {
            return Err(malformed("the owner token is not one keel-lock minted"));
        }
        let parsed = SerializedLock {
            ttl: Ttl::from_ms(number(ttl, "TTL")?)?,
            deadline_ms,
            owner,
            key: Key::new(decode_text(key, "key")?)?,
            fence,
            holding: share.map_or(Holding::Exclusive, Holding::Shared),
        };
        // What remains non-canonical after the field checks (a base64url tail with stray bits)
        // shows up as a difference from what `encode` writes.
        let canonical = match fields[1] {
            // The check already matched the body: the body alone is compared.
            "3" | "4" => parsed.encode().get(..body.len()) == Some(body),
            "2" => parsed.body("2") == text,
            _ => true,
        };
        if !canonical {
            return Err(malformed("it is not written the way serialize() writes it"));
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SerializedLock {
        SerializedLock {
            key: Key::new("import:99 / ü:✓").unwrap(),
            ttl: Ttl::from_ms(60_000).unwrap(),
            owner: OwnerToken::mint().unwrap(),
            deadline_ms: 1_700_000_060_000,
            fence: Some(Fence::new(41).unwrap()),
            holding: Holding::Exclusive,
        }
    }

    #[test]
    fn a_shared_hold_round_trips_as_version_four() {
        let s = SerializedLock {
            holding: Holding::Shared(Share::new(2, 5).unwrap()),
            ..sample()
        };
        let text = s.encode();
        assert!(text.starts_with("keel-lock:4:"), "{text}");
        assert_eq!(SerializedLock::parse(&text).unwrap(), s);
        let (body, _) = text.rsplit_once(':').unwrap();
        // Weight above the limit, a limit of 0, a weight written with a leading zero: refused
        // even under a matching check.
        for (from, to) in [(":2:5", ":6:5"), (":2:5", ":1:0"), (":2:5", ":02:5")] {
            let edited = body.replacen(from, to, 1);
            let forged = [
                edited.as_str(),
                ":",
                core::str::from_utf8(&check(&edited)).unwrap(),
            ]
            .concat();
            assert!(SerializedLock::parse(&forged).is_err(), "{forged}");
        }
        assert!(SerializedLock::parse(&text[..text.len() - 12]).is_err());
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(SerializedLock::parse(&s.encode()).unwrap(), s);
    }

    #[test]
    fn writes_version_three_with_its_check() {
        let text = sample().encode();
        assert!(text.starts_with("keel-lock:3:"), "{text}");
        let (body, sum) = text.rsplit_once(':').unwrap();
        assert_eq!(sum.len(), 8);
        assert!(sum
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(sum.as_bytes(), check(body));
        // FNV-1a 32 of known inputs.
        assert_eq!(&check(""), b"811c9dc5");
        assert_eq!(&check("a"), b"e40c292c");
        assert_eq!(&check("foobar"), b"bf9cf968");
    }

    #[test]
    fn refuses_a_string_cut_short_anywhere_or_altered() {
        let text = sample().encode();
        for cut in 0..text.len() {
            assert!(
                SerializedLock::parse(&text[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        // One character changed, wherever it is, for another the field allows.
        let bytes = text.as_bytes();
        for at in 0..bytes.len() {
            let swapped = match bytes[at] {
                b'0'..=b'8' | b'a'..=b'y' | b'A'..=b'Y' => bytes[at] + 1,
                b'9' => b'0',
                b'z' => b'a',
                b'Z' => b'A',
                _ => continue,
            };
            let mut edited = bytes.to_vec();
            edited[at] = swapped;
            let edited = String::from_utf8(edited).unwrap();
            assert!(
                SerializedLock::parse(&edited).is_err(),
                "{edited:?} accepted"
            );
        }
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        let text = sample().encode();
        assert!(matches!(
            SerializedLock::parse(&text.replacen(":3:", ":5:", 1)),
            Err(InputError::UnsupportedSerializedVersion { .. })
        ));
        for bad in [
            "",
            "keel-lock",
            "keel-lock:1",
            "{\"key\":\"x\"}",
            "keel-lock:1:0:0:YQ:YQ",
            "keel-lock:2:5000:1:1:YQ:YQ",
            "keel-lock:3:5000:1:1:YQ:YQ",
            "keel-lock:3:5000:1:1:YQ:YQ:00000000",
        ] {
            assert!(SerializedLock::parse(bad).is_err(), "{bad:?} accepted");
        }
        let last_field = text.rfind(':').unwrap();
        for cut in 0..=last_field {
            assert!(
                SerializedLock::parse(&text[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
    }

    #[test]
    fn reads_only_the_canonical_form() {
        let s = sample();
        let text = s.encode();
        let owner = base64url::encode(s.owner.as_str().as_bytes());
        let key = base64url::encode(s.key.as_str().as_bytes());
        // Each written with a check that matches, so only the field itself is wrong.
        let with = |ttl: &str, deadline: &str, fence: &str, owner: &str| {
            let body = format!("keel-lock:3:{ttl}:{deadline}:{fence}:{owner}:{key}");
            let sum = String::from_utf8(check(&body).to_vec()).unwrap();
            format!("{body}:{sum}")
        };
        assert_eq!(with("60000", "1700000060000", "41", &owner), text);
        let one_char_owner = base64url::encode(b"x");
        let max_deadline = (MAX_DEADLINE_MS + 1).to_string();
        for bad in [
            with("+60000", "1700000060000", "41", &owner),
            with("0060000", "1700000060000", "41", &owner),
            with("60000", "0", "41", &owner),
            with("60000", &u64::MAX.to_string(), "41", &owner),
            with("60000", &max_deadline, "41", &owner),
            with("60000", "1700000060000", "041", &owner),
            with("60000", "1700000060000", "0", &owner),
            with("60000", "1700000060000", "9007199254740992", &owner),
            with("60000", "1700000060000", "41", &one_char_owner),
            with("60000", "1700000060000", " 41", &owner),
        ] {
            assert!(SerializedLock::parse(&bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn reads_version_two_canonical_only() {
        let s = sample();
        let v2 = s.body("2");
        assert!(v2.starts_with("keel-lock:2:60000:1700000060000:41:"));
        assert_eq!(SerializedLock::parse(&v2).unwrap(), s);
        assert!(SerializedLock::parse(&v2.replacen(":60000:", ":060000:", 1)).is_err());
    }

    #[test]
    fn reads_version_one_without_a_fence() {
        let s = sample();
        let v1 = format!(
            "keel-lock:1:60000:1700000060000:{}:{}",
            base64url::encode(s.owner.as_str().as_bytes()),
            base64url::encode(s.key.as_str().as_bytes())
        );
        let read = SerializedLock::parse(&v1).unwrap();
        assert_eq!(read.fence, None);
        assert_eq!(read.owner, s.owner);
        assert_eq!(read.key, s.key);
    }

    #[test]
    fn round_trips_without_a_fence() {
        let s = SerializedLock {
            fence: None,
            ..sample()
        };
        assert_eq!(SerializedLock::parse(&s.encode()).unwrap(), s);
    }

    // proptest is a native-only dev-dependency.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_input(s in "\\PC{0,200}") {
            let _ = SerializedLock::parse(&s);
        }

        #[test]
        fn never_panics_on_mutated_input(pos in 0usize..200, byte in 0u8..128) {
            let mut text = sample().encode().into_bytes();
            let at = pos % text.len();
            text[at] = byte;
            if let Ok(s) = String::from_utf8(text) {
                let _ = SerializedLock::parse(&s);
            }
        }
    }
}
