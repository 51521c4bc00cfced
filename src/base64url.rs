//! Unpadded base64url (RFC 4648 §5) for the serialized-lock format: two short functions
//! instead of a general-purpose engine, which cost about 6 KB of every wasm build. Decoding is
//! strict — no padding, no other alphabet, no non-zero trailing bits — so each byte string has
//! exactly one accepted text. Tests check both directions against the `base64` crate.

use crate::prelude::*;
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Encodes without padding.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        // The chunk's bytes as the high bits of a 24-bit group.
        let group = chunk
            .iter()
            .enumerate()
            .fold(0u32, |group, (i, &b)| group | u32::from(b) << (16 - 8 * i));
        // n bytes give n + 1 digits.
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(group >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

fn digit(c: u8) -> Option<u32> {
    let value = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    };
    Some(u32::from(value))
}

/// Decodes canonical unpadded base64url; `None` for anything else.
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    // A lone digit in the last group carries only 6 bits: not a byte.
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.chunks(4) {
        let mut group = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            group |= digit(c)? << (18 - 6 * i);
        }
        // n digits (2..=4) carry n - 1 whole bytes; the bits after them must be zero.
        let bytes = chunk.len() - 1;
        if group & (0x00FF_FFFF >> (8 * bytes)) != 0 {
            return None;
        }
        for i in 0..bytes {
            out.push((group >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(not(target_arch = "wasm32"))]
    use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine as _};

    #[test]
    fn known_answers() {
        // RFC 4648 §10 test vectors, unpadded.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).as_deref(), Some(plain.as_bytes()));
        }
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
        for bad in ["Z", "Zg==", "Zh", "Zm9", "Zm+v", "Zm/v", "Zm9v Yg", "ü"] {
            assert_eq!(decode(bad), None, "{bad:?} accepted");
        }
    }

    // proptest is a native-only dev-dependency.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn encodes_like_the_base64_crate(bytes in proptest::collection::vec(0u8.., 0..64)) {
            proptest::prop_assert_eq!(encode(&bytes), URL_SAFE_NO_PAD.encode(&bytes));
        }

        #[test]
        fn decodes_like_the_base64_crate(text in "[A-Za-z0-9_=+/ -]{0,24}") {
            proptest::prop_assert_eq!(decode(&text), URL_SAFE_NO_PAD.decode(&text).ok());
        }

        #[test]
        fn decodes_near_valid_text_like_the_base64_crate(bytes in proptest::collection::vec(0u8.., 0..32), pos in 0usize..64, byte in 0u8..128) {
            let mut text = URL_SAFE_NO_PAD.encode(&bytes).into_bytes();
            if !text.is_empty() {
                let at = pos % text.len();
                text[at] = byte;
            }
            if let Ok(text) = String::from_utf8(text) {
                proptest::prop_assert_eq!(decode(&text), URL_SAFE_NO_PAD.decode(&text).ok());
            }
        }
    }
}
