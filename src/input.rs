//! Validated inputs. Every value from outside (JS, WIT, a serialized string) passes through
//! these constructors, so the rest of the core works with values that are known to be sane.

use crate::prelude::*;
use alloc::sync::Arc;
use core::fmt;

/// Shows a JS number in error messages the way JS would for the values that matter (integers,
/// NaN, ±Infinity, three decimals otherwise) without `{f64}` formatting, whose code would add
/// over 10 KB to every wasm build.
pub struct ShowNumber(pub f64);

impl ShowNumber {
    /// The text, built without `core::fmt` (the wasm builds' error messages use this, so that
    /// the formatting machinery is not linked for them).
    pub fn text(&self) -> String {
        const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: integers below are exact
        let v = self.0;
        if v.is_nan() {
            return "NaN".into();
        }
        if v.is_infinite() {
            return (if v > 0.0 { "Infinity" } else { "-Infinity" }).into();
        }
        let sign = if v < 0.0 { "-" } else { "" };
        if crate::float::fract(v) == 0.0 && v.abs() < EXACT {
            return [sign, &decimal(v.abs() as u64)].concat();
        }
        let thousandths = crate::float::round(v * 1000.0);
        if thousandths.abs() < EXACT {
            let t = thousandths as i64;
            let sign = if t < 0 { "-" } else { "" };
            let t = t.unsigned_abs();
            let f = t % 1000;
            let frac: String = [f / 100, f / 10 % 10, f % 10]
                .iter()
                .map(|&d| (b'0' + d as u8) as char)
                .collect();
            return [sign, &decimal(t / 1000), ".", &frac].concat();
        }
        (if v > 0.0 {
            "a huge number"
        } else {
            "a hugely negative number"
        })
        .into()
    }
}

impl fmt::Display for ShowNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// `n` in decimal, without `core::fmt`.
pub fn decimal(mut n: u64) -> String {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits[at..].iter().map(|&d| d as char).collect()
}

/// A value a caller passed that the lock cannot work with. Never a panic: bindings turn these
/// into `TypeError`/`RangeError` for JS and into a WIT error variant for components.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InputError {
    /// The key is the empty string.
    EmptyKey,
    /// The key is longer than [`crate::input::MAX_KEY_BYTES`] bytes of UTF-8.
    KeyTooLong {
        /// Length of the key that was given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A TTL that is not a finite number of milliseconds in `1..=MAX_TTL_MS`.
    InvalidTtl {
        /// The value that was given.
        value: f64,
        /// The largest TTL accepted.
        max: u64,
    },
    /// A negative, non-finite or too large wait option.
    InvalidWait {
        /// Which option.
        option: WaitOption,
        /// The value that was given.
        value: f64,
        /// The largest value accepted.
        max: u64,
    },
    /// An owner token that is empty, too long or not printable ASCII.
    InvalidOwner {
        /// The longest token accepted.
        max: usize,
    },
    /// A string given to `restoreLock` that `serialize()` did not produce.
    MalformedSerializedLock {
        /// What is wrong with it.
        reason: String,
    },
    /// A fence outside `1..=MAX_FENCE` (a store answered nonsense, or a serialized lock was edited).
    InvalidFence {
        /// The value that was given.
        value: u64,
    },
    /// A semaphore limit that is not a whole number in `1..=MAX_LIMIT`.
    InvalidLimit {
        /// The value that was given.
        value: f64,
        /// The largest limit accepted.
        max: u32,
    },
    /// A permit count that is not a whole number in `1..=limit`.
    InvalidPermits {
        /// The value that was given.
        value: f64,
        /// The semaphore's limit.
        limit: u32,
    },
    /// Hold metadata longer than [`crate::token::MAX_METADATA_BYTES`] bytes of UTF-8.
    MetadataTooLong {
        /// Length of the metadata that was given, in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A set of keys for a multi-key lock that is empty, too large or repeats a key.
    InvalidKeySet {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A serialized lock from a format version this build does not read.
    UnsupportedSerializedVersion {
        /// The version found in the string.
        found: String,
        /// The version this build reads.
        supported: u32,
    },
}

impl InputError {
    /// The message (also the `Display` text), built without `core::fmt`.
    pub fn message(&self) -> String {
        match self {
            InputError::EmptyKey => "lock key must be a non-empty string".into(),
            InputError::KeyTooLong { len, max } => [
                "lock key is ",
                &decimal(*len as u64),
                " bytes of UTF-8; the limit is ",
                &decimal(*max as u64),
            ]
            .concat(),
            InputError::InvalidTtl { value, max } => [
                "a TTL must be a finite number of milliseconds between 1 and ",
                &decimal(*max),
                ", got ",
                &ShowNumber(*value).text(),
            ]
            .concat(),
            InputError::InvalidWait { option, value, max } => [
                "the ",
                option.name(),
                " must be a finite number of milliseconds between 0 and ",
                &decimal(*max),
                ", got ",
                &ShowNumber(*value).text(),
            ]
            .concat(),
            InputError::InvalidOwner { max } => [
                "owner token must be 1 to ",
                &decimal(*max as u64),
                " printable ASCII characters",
            ]
            .concat(),
            InputError::MalformedSerializedLock { reason } => {
                ["not a serialized keel-lock: ", reason].concat()
            }
            InputError::InvalidFence { value } => [
                "a fence must be a whole number between 1 and ",
                &decimal(MAX_FENCE),
                ", got ",
                &decimal(*value),
            ]
            .concat(),
            InputError::InvalidLimit { value, max: n }
            | InputError::InvalidPermits { value, limit: n } => [
                match self {
                    InputError::InvalidLimit { .. } => {
                        "a semaphore limit must be a whole number between 1 and "
                    }
                    _ => "permits must be a whole number between 1 and the limit, ",
                },
                &decimal(u64::from(*n)),
                ", got ",
                &ShowNumber(*value).text(),
            ]
            .concat(),
            InputError::MetadataTooLong { len, max } => [
                "metadata is ",
                &decimal(*len as u64),
                " bytes of UTF-8; the limit is ",
                &decimal(*max as u64),
            ]
            .concat(),
            InputError::InvalidKeySet { reason } => {
                ["a multi-key lock needs 1 to 64 distinct keys: ", reason].concat()
            }
            InputError::UnsupportedSerializedVersion { found, supported } => [
                "serialized lock has format version ",
                found,
                "; this build reads version ",
                &decimal(u64::from(*supported)),
            ]
            .concat(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl core::error::Error for InputError {}

/// A wait option, named in [`InputError::InvalidWait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOption {
    /// The total time to keep trying.
    Timeout,
    /// The pause between attempts.
    RetryDelay,
}

impl WaitOption {
    /// How messages name it.
    pub fn name(self) -> &'static str {
        match self {
            WaitOption::Timeout => "timeout",
            WaitOption::RetryDelay => "retry delay",
        }
    }
}

impl fmt::Display for WaitOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Longest key accepted, in bytes of UTF-8. Large enough for any sensible naming scheme, small
/// enough to fit every store we ship (Redis keys, SQL primary keys, Durable Object names).
pub const MAX_KEY_BYTES: usize = 512;

/// Longest TTL accepted: 2^31 − 1 ms (about 24.8 days), the largest delay JS timers support.
pub const MAX_TTL_MS: u64 = 2_147_483_647;

/// Longest `timeout` / `retryDelay` accepted; same bound as TTLs, for the same reason.
pub const MAX_WAIT_MS: u64 = MAX_TTL_MS;

/// Default TTL: 30 seconds.
pub const DEFAULT_TTL_MS: u64 = 30_000;

/// Default pause between acquire attempts while waiting: 50 ms.
pub const DEFAULT_RETRY_DELAY_MS: u64 = 50;

/// Largest fence a store may hand out: 2^53 − 1. Every fence is exact as a JS number, a SQL
/// `BIGINT` and a Redis Lua number, so users compare fences with plain `<` everywhere.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// A lock key: non-empty UTF-8, at most [`MAX_KEY_BYTES`] bytes. Shared, not copied, when a
/// store keeps it (cloning is a reference count).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl core::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Key {
    /// Checks and wraps a key.
    pub fn new(key: impl AsRef<str>) -> Result<Self, InputError> {
        let key = key.as_ref();
        Key::check(key)?;
        Ok(Key(Arc::from(key)))
    }

    /// Checks a key without keeping it.
    pub fn check(key: &str) -> Result<(), InputError> {
        if key.is_empty() {
            return Err(InputError::EmptyKey);
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(InputError::KeyTooLong {
                len: key.len(),
                max: MAX_KEY_BYTES,
            });
        }
        Ok(())
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A time-to-live in whole milliseconds, `1..=MAX_TTL_MS`. A lock always expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    /// Checks a TTL given as a JS-style number. Fractions round up (a TTL is a promise of at
    /// least that long), NaN, infinities, zero and negatives are refused.
    pub fn from_f64(ms: f64) -> Result<Self, InputError> {
        let bad = InputError::InvalidTtl {
            value: ms,
            max: MAX_TTL_MS,
        };
        if !ms.is_finite() || ms <= 0.0 || crate::float::ceil(ms) > MAX_TTL_MS as f64 {
            return Err(bad);
        }
        Ok(Ttl(crate::float::ceil(ms) as u64))
    }

    /// Checks a TTL given as whole milliseconds.
    pub fn from_ms(ms: u64) -> Result<Self, InputError> {
        if ms == 0 || ms > MAX_TTL_MS {
            return Err(InputError::InvalidTtl {
                value: ms as f64,
                max: MAX_TTL_MS,
            });
        }
        Ok(Ttl(ms))
    }

    /// Milliseconds.
    pub fn as_ms(self) -> u64 {
        self.0
    }
}

impl Default for Ttl {
    fn default() -> Self {
        Ttl(DEFAULT_TTL_MS)
    }
}

/// How long to wait for a held lock, and how often to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Total time to keep trying, in ms. `0` (the default) tries exactly once.
    pub timeout_ms: u64,
    /// Pause between attempts, in ms (default 50). `0` retries as soon as possible, which the
    /// core treats as 1 ms so that a waiter always yields to the holder.
    pub retry_delay_ms: u64,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            timeout_ms: 0,
            retry_delay_ms: DEFAULT_RETRY_DELAY_MS,
        }
    }
}

impl AcquireOptions {
    /// Options that try once and never wait (`runImmediately`).
    pub fn immediately() -> Self {
        Self::default()
    }

    /// Builds options from JS-style numbers; `None` means "use the default".
    pub fn from_f64(timeout: Option<f64>, retry_delay: Option<f64>) -> Result<Self, InputError> {
        let defaults = Self::default();
        Ok(AcquireOptions {
            timeout_ms: match timeout {
                Some(v) => wait_ms(WaitOption::Timeout, v)?,
                None => defaults.timeout_ms,
            },
            retry_delay_ms: match retry_delay {
                Some(v) => wait_ms(WaitOption::RetryDelay, v)?,
                None => defaults.retry_delay_ms,
            },
        })
    }
}

impl AcquireOptions {
    /// Builds options from whole milliseconds; `None` means "use the default".
    pub fn from_ms(timeout_ms: u64, retry_delay_ms: Option<u64>) -> Result<Self, InputError> {
        let check = |option, ms: u64| {
            if ms > MAX_WAIT_MS {
                return Err(InputError::InvalidWait {
                    option,
                    value: ms as f64,
                    max: MAX_WAIT_MS,
                });
            }
            Ok(ms)
        };
        Ok(AcquireOptions {
            timeout_ms: check(WaitOption::Timeout, timeout_ms)?,
            retry_delay_ms: match retry_delay_ms {
                Some(ms) => check(WaitOption::RetryDelay, ms)?,
                None => DEFAULT_RETRY_DELAY_MS,
            },
        })
    }
}

fn wait_ms(option: WaitOption, value: f64) -> Result<u64, InputError> {
    whole_wait_ms(value).ok_or(InputError::InvalidWait {
        option,
        value,
        max: MAX_WAIT_MS,
    })
}

/// A wait in whole milliseconds, fractions rounded up: `None` unless finite and from 0 to
/// [`MAX_WAIT_MS`].
pub(crate) fn whole_wait_ms(value: f64) -> Option<u64> {
    let ms = crate::float::ceil(value);
    (value.is_finite() && value >= 0.0 && ms <= MAX_WAIT_MS as f64).then_some(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_show_like_js() {
        let show = |v: f64| ShowNumber(v).to_string();
        assert_eq!(show(30_000.0), "30000");
        assert_eq!(show(-1.0), "-1");
        assert_eq!(show(1.5), "1.500");
        assert_eq!(show(-0.25), "-0.250");
        assert_eq!(show(f64::NAN), "NaN");
        assert_eq!(show(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(show(1e300), "a huge number");
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(Key::new(""), Err(InputError::EmptyKey));
        assert!(Key::new("a".repeat(MAX_KEY_BYTES)).is_ok());
        assert_eq!(
            Key::new("é".repeat(MAX_KEY_BYTES / 2 + 1)),
            Err(InputError::KeyTooLong {
                len: MAX_KEY_BYTES + 2,
                max: MAX_KEY_BYTES
            })
        );
    }

    #[test]
    fn ttls_are_checked() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 3e9] {
            assert!(Ttl::from_f64(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(Ttl::from_f64(1.2).unwrap().as_ms(), 2);
        assert_eq!(Ttl::from_f64(0.5).unwrap().as_ms(), 1);
        assert!(Ttl::from_ms(0).is_err());
        assert_eq!(Ttl::default().as_ms(), 30_000);
    }

    #[test]
    fn wait_options_are_checked() {
        assert_eq!(
            AcquireOptions::from_f64(None, None).unwrap(),
            AcquireOptions::default()
        );
        assert!(AcquireOptions::from_f64(Some(-1.0), None).is_err());
        assert!(AcquireOptions::from_f64(None, Some(f64::NAN)).is_err());
        assert!(AcquireOptions::from_f64(Some(f64::INFINITY), None).is_err());
        let o = AcquireOptions::from_f64(Some(5_000.0), Some(0.0)).unwrap();
        assert_eq!((o.timeout_ms, o.retry_delay_ms), (5_000, 0));
    }
}
