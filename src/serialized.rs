//! The hand-over format of `serialize()` / `restoreLock()`:
//!
//! ```text
//! keel-lock:1:<ttl ms>:<deadline, epoch ms>:<owner, base64url>:<key, base64url>
//! ```
//!
//! Versioned so a later format can be told apart; base64url so any key survives queues, URLs
//! and headers unchanged. Every field is re-validated on the way in.

use crate::base64url;
use crate::error::InputError;
use crate::input::{Key, Ttl};
use crate::token::OwnerToken;

const MAGIC: &str = "keel-lock";

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Longest string `parse` will look at; real ones are well under 1 KiB.
const MAX_SERIALIZED_BYTES: usize = 4096;

/// A lock frozen for hand-over to another process.
#[derive(Debug, Clone, PartialEq)]
pub struct SerializedLock {
    /// The key.
    pub key: Key,
    /// The lock's TTL (the default for `extend()`).
    pub ttl: Ttl,
    /// The owner token of the hold being handed over.
    pub owner: OwnerToken,
    /// The conservative local deadline of the hold, epoch ms by the serializing process's clock.
    pub deadline_ms: u64,
}

fn malformed(reason: impl Into<String>) -> InputError {
    InputError::MalformedSerializedLock {
        reason: reason.into(),
    }
}

fn decode_text(field: &str, what: &str) -> Result<String, InputError> {
    let bytes = base64url::decode(field)
        .ok_or_else(|| malformed(format!("the {what} is not base64url")))?;
    String::from_utf8(bytes).map_err(|_| malformed(format!("the {what} is not UTF-8")))
}

impl SerializedLock {
    /// The string form.
    pub fn encode(&self) -> String {
        format!(
            "{MAGIC}:{FORMAT_VERSION}:{}:{}:{}:{}",
            self.ttl.as_ms(),
            self.deadline_ms,
            base64url::encode(self.owner.as_str().as_bytes()),
            base64url::encode(self.key.as_str().as_bytes()),
        )
    }

    /// Reads a string produced by [`SerializedLock::encode`]. Anything else — truncated,
    /// edited, another version — is an [`InputError`], never a panic.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        if text.len() > MAX_SERIALIZED_BYTES {
            return Err(malformed("it is too long"));
        }
        let fields: Vec<&str> = text.split(':').collect();
        if fields[0] != MAGIC {
            return Err(malformed("it does not start with \"keel-lock:\""));
        }
        match fields.get(1) {
            Some(v) if *v == FORMAT_VERSION.to_string() => {}
            Some(v) => {
                return Err(InputError::UnsupportedSerializedVersion {
                    found: v.chars().take(16).collect(),
                    supported: FORMAT_VERSION,
                })
            }
            None => return Err(malformed("the version is missing")),
        }
        let [_, _, ttl, deadline, owner, key] = fields[..] else {
            return Err(malformed(format!(
                "expected 6 fields separated by ':', found {}",
                fields.len()
            )));
        };
        let ttl: u64 = ttl
            .parse()
            .map_err(|_| malformed("the TTL is not a number"))?;
        let deadline_ms: u64 = deadline
            .parse()
            .map_err(|_| malformed("the deadline is not a number"))?;
        Ok(SerializedLock {
            ttl: Ttl::from_ms(ttl)?,
            deadline_ms,
            owner: OwnerToken::parse(decode_text(owner, "owner token")?)?,
            key: Key::new(decode_text(key, "key")?)?,
        })
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
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(SerializedLock::parse(&s.encode()).unwrap(), s);
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        let text = sample().encode();
        assert!(matches!(
            SerializedLock::parse(&text.replacen(":1:", ":2:", 1)),
            Err(InputError::UnsupportedSerializedVersion { .. })
        ));
        for bad in [
            "",
            "keel-lock",
            "keel-lock:1",
            "{\"key\":\"x\"}",
            "keel-lock:1:0:0:YQ:YQ",
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
