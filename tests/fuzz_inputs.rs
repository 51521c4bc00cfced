//! Fuzzing of every path that parses or validates outside input: `SerializedLock::parse` (and
//! through it the base64url codec, on its owner and key fields), `Key::new`, `OwnerToken::parse`,
//! `Ttl::from_f64`, `AcquireOptions::from_f64`. Each case asserts no panic and an answer the API
//! documents: the error variants listed for that function, and for `parse` that whatever it
//! accepts encodes back to exactly the same string (only what `encode` writes is read).
//!
//! `KEEL_FUZZ_CASES` sets the cases per target (default 2 000, what `cargo test` runs);
//! `make fuzz` runs 1 000 000 per target in release mode. The seed is fixed unless
//! `KEEL_FUZZ_SEED` is set, so a failure can be replayed.
#![cfg(not(target_arch = "wasm32"))]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use keel_lock::input::{MAX_KEY_BYTES, MAX_TTL_MS, MAX_WAIT_MS};
use keel_lock::{AcquireOptions, InputError, Key, OwnerToken, SerializedLock, Ttl};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    let cases = std::env::var("KEEL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let seed = std::env::var("KEEL_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6675_7a7a);
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    }
}

/// A string `encode` writes, from its parts.
fn encoded(
    version: &str,
    ttl: &str,
    deadline: &str,
    fence: Option<&str>,
    owner: &str,
    key: &str,
) -> String {
    let body = match fence {
        Some(f) => format!("keel-lock:{version}:{ttl}:{deadline}:{f}:{owner}:{key}"),
        None => format!("keel-lock:{version}:{ttl}:{deadline}:{owner}:{key}"),
    };
    // Version 3 ends with its check: FNV-1a (32 bits) of the rest, in lowercase hex.
    match version {
        "3" => {
            let hash = body.bytes().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            });
            format!("{body}:{hash:08x}")
        }
        _ => body,
    }
}

fn b64(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text.as_bytes())
}

/// Field text: digits, base64url and its neighbours, separators, padding, a little Unicode.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,20}",
        "[A-Za-z0-9_-]{0,60}",
        "[A-Za-z0-9_+/=:-]{0,60}",
        any::<String>(),
        (0u64..=u64::MAX).prop_map(|n| n.to_string()),
        Just(String::new()),
        Just("0".to_owned()),
        Just("9007199254740992".to_owned()),
    ]
}

/// A valid serialized lock, then edited: a byte changed, cut short, something inserted.
fn mutated() -> impl Strategy<Value = String> {
    let valid = (
        "[0-9a-f]{32}",
        ".{1,40}",
        1u64..=MAX_TTL_MS,
        1u64..=8_640_000_000_000_000,
        proptest::option::of(1u64..=(1u64 << 53) - 1),
        prop_oneof![Just("1"), Just("2"), Just("3")],
    )
        .prop_map(|(owner, key, ttl, deadline, fence, v)| {
            let fence = fence.map(|f| f.to_string());
            let fence = if v != "1" {
                Some(fence.unwrap_or_default())
            } else {
                None
            };
            encoded(
                v,
                &ttl.to_string(),
                &deadline.to_string(),
                fence.as_deref(),
                &b64(&owner),
                &b64(&key),
            )
        });
    (valid, any::<prop::sample::Index>(), any::<u8>(), 0u8..4).prop_map(|(s, at, byte, how)| {
        let mut bytes = s.into_bytes();
        let i = at.index(bytes.len().max(1)).min(bytes.len());
        match how {
            0 if i < bytes.len() => bytes[i] = byte,
            1 => bytes.truncate(i),
            2 => bytes.insert(i, byte),
            _ => {}
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn serialized_candidates() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "keel-lock:[0-9:]{0,40}",
        (
            prop_oneof![
                Just("1".to_owned()),
                Just("2".to_owned()),
                Just("3".to_owned()),
                "[0-9]{1,3}"
            ],
            field(),
            field(),
            field(),
            field(),
            field()
        )
            .prop_map(|(v, a, b, c, d, e)| format!("keel-lock:{v}:{a}:{b}:{c}:{d}:{e}")),
        ("[0-9a-f]{32}", field(), field()).prop_map(|(owner, key_field, fence)| {
            encoded(
                "3",
                "30000",
                "1700000000000",
                Some(&fence),
                &b64(&owner),
                &key_field,
            )
        }),
        ("[A-Za-z0-9_=+/-]{0,50}", ".{1,20}").prop_map(|(owner_field, key)| {
            encoded(
                "3",
                "30000",
                "1700000000000",
                Some("7"),
                &owner_field,
                &b64(&key),
            )
        }),
        mutated(),
        mutated(),
    ]
}

fn documented_parse_error(e: &InputError) -> bool {
    matches!(
        e,
        InputError::MalformedSerializedLock { .. }
            | InputError::UnsupportedSerializedVersion { .. }
            | InputError::InvalidFence { .. }
            | InputError::InvalidOwner { .. }
            | InputError::InvalidTtl { .. }
            | InputError::EmptyKey
            | InputError::KeyTooLong { .. }
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn serialized_lock_parse(text in serialized_candidates()) {
        match SerializedLock::parse(&text) {
            Ok(lock) => {
                // Read back only what encode writes: v3 exactly; v2 as encode would write it
                // but for the version and the check; v1 becomes v3 without a fence.
                let again = lock.encode();
                if text.starts_with("keel-lock:3:") {
                    prop_assert_eq!(&again, &text);
                } else if text.starts_with("keel-lock:2:") {
                    let (body, _check) = again.rsplit_once(':').unwrap();
                    prop_assert_eq!(body.replacen("keel-lock:3:", "keel-lock:2:", 1), text);
                } else {
                    prop_assert!(text.starts_with("keel-lock:1:"), "accepted {text:?}");
                    prop_assert!(lock.fence.is_none());
                }
                prop_assert_eq!(SerializedLock::parse(&again), Ok(lock));
            }
            Err(e) => {
                prop_assert!(documented_parse_error(&e), "undocumented error {e:?} for {text:?}");
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }

    #[test]
    fn key_new(text in prop_oneof![any::<String>(), ".{500,530}", Just(String::new())]) {
        match Key::new(text.clone()) {
            Ok(key) => {
                prop_assert!(!text.is_empty() && text.len() <= MAX_KEY_BYTES);
                prop_assert_eq!(key.as_str(), text.as_str());
            }
            Err(InputError::EmptyKey) => prop_assert!(text.is_empty()),
            Err(InputError::KeyTooLong { len, max }) => {
                prop_assert_eq!((len, max), (text.len(), MAX_KEY_BYTES));
            }
            Err(e) => prop_assert!(false, "undocumented error {e:?}"),
        }
    }

    #[test]
    fn owner_token_parse(text in prop_oneof![any::<String>(), "[!-~]{0,140}"]) {
        match OwnerToken::parse(text.clone()) {
            Ok(owner) => {
                prop_assert!((1..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic()));
                prop_assert_eq!(owner.as_str(), text.as_str());
            }
            Err(InputError::InvalidOwner { .. }) => {}
            Err(e) => prop_assert!(false, "undocumented error {e:?}"),
        }
    }

    #[test]
    fn ttl_from_f64(ms in prop_oneof![
        proptest::num::f64::ANY,
        -10.0f64..10.0,
        (MAX_TTL_MS as f64 - 2.0)..(MAX_TTL_MS as f64 + 2.0),
    ]) {
        match Ttl::from_f64(ms) {
            Ok(ttl) => {
                prop_assert!(ms.is_finite() && ms > 0.0 && ms <= MAX_TTL_MS as f64, "accepted {ms}");
                prop_assert_eq!(ttl.as_ms(), ms.ceil() as u64, "fractions round up");
            }
            Err(InputError::InvalidTtl { value, .. }) => {
                prop_assert!(value.to_bits() == ms.to_bits());
                prop_assert!(!(ms.is_finite() && ms >= 1.0 && ms <= MAX_TTL_MS as f64), "refused {ms}");
            }
            Err(e) => prop_assert!(false, "undocumented error {e:?}"),
        }
    }

    #[test]
    fn acquire_options_from_f64(
        timeout in proptest::option::of(prop_oneof![proptest::num::f64::ANY, -5.0f64..5.0]),
        retry in proptest::option::of(prop_oneof![proptest::num::f64::ANY, (MAX_WAIT_MS as f64 - 1.0)..(MAX_WAIT_MS as f64 + 1.0)]),
    ) {
        let fits = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && v >= 0.0 && v <= MAX_WAIT_MS as f64);
        match AcquireOptions::from_f64(timeout, retry) {
            Ok(_) => prop_assert!(fits(timeout) && fits(retry), "accepted {timeout:?} {retry:?}"),
            Err(InputError::InvalidWait { .. }) => prop_assert!(!(fits(timeout) && fits(retry))),
            Err(e) => prop_assert!(false, "undocumented error {e:?}"),
        }
    }
}
