//! A lock key's value in the bucket: every hold of the key, each with its owner, expiry, fence
//! and metadata, and the key's last fence — as text, so one compare-and-swap of one value
//! changes all of it at once.
//!
//! What is written (the first field is the format's version):
//! - `2:<expiry>:<last fence>:<owner>` for an exclusive hold, followed by a space and the hold's
//!   metadata when it has some (owner tokens hold no space, so the first space ends the owner
//!   and the metadata runs, unescaped, to the end of the value); `2:0:<last fence>:` for a free
//!   key, whose fence counter must outlive its holds.
//! - `4:<last fence>:<limit>:<hold> <hold> …` while shared holds (permits, readers) are live,
//!   each hold `<expiry>,<weight>,<fence>,<metadata>,<owner>`: the fence empty where it is not
//!   known (a hold read from a `3:` value), the metadata empty for none or `=` and the text
//!   percent-escaped (no `%`, `,`, space or control character is left in it), the owner last.
//!
//! What is still read, from earlier versions: the empty value (free), `1:<expiry>:<owner>` (no
//! fence yet) and `3:<last fence>:<limit>:<expiry>,<weight>,<owner> …` (no fence per hold, no
//! metadata).
//!
//! An exclusive hold is the key's latest grant (nothing is granted beside it), so its fence is
//! the key's last fence and needs no field of its own.

use std::fmt::Write as _;

use crate::grant::Fence;
use crate::inspect::HolderInfo;
use crate::rows::RowView;
use crate::share::LiveHolds;
use crate::token::{Metadata, OwnerToken};

/// A value this module cannot read: not one keel-lock wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreign;

/// The exclusive hold of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub owner: String,
    pub expires_at: u64,
    pub metadata: Option<Metadata>,
}

/// One shared hold (semaphore permits, a read lock) of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedHold {
    pub owner: String,
    pub expires_at: u64,
    pub weight: u32,
    /// `None` for a hold taken by a version that kept no fence per shared hold.
    pub fence: Option<u64>,
    pub metadata: Option<Metadata>,
}

/// A key's value as read from the bucket: its holds and the last fence handed out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slot {
    /// The exclusive hold; `None` once released (or never taken).
    pub hold: Option<Hold>,
    /// The shared holds, all under `limit` (empty for an exclusive or free key).
    pub shared: Vec<SharedHold>,
    pub limit: u32,
    /// The last fence handed out for this key; 0 before the first.
    pub fence: u64,
}

/// The metadata `owner` carries for the store to keep. Attached as a checked [`Metadata`]
/// ([`OwnerToken::with_metadata`]), so it always passes the check again.
pub fn metadata_of(owner: &OwnerToken) -> Option<Metadata> {
    owner.metadata().and_then(|text| Metadata::new(text).ok())
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, Foreign> {
    text.parse().map_err(|_| Foreign)
}

fn split(text: &str, at: char) -> Result<(&str, &str), Foreign> {
    text.split_once(at).ok_or(Foreign)
}

fn metadata(text: &str) -> Result<Metadata, Foreign> {
    Metadata::new(text).map_err(|_| Foreign)
}

/// Whether `c` is escaped inside a shared hold's entry, where `,` and space separate fields
/// and holds.
fn escaped(c: char) -> bool {
    matches!(c, '%' | ',' | ' ') || c.is_ascii_control()
}

/// Appends `text` to `out` with every [`escaped`] character as `%XX`.
fn escape(text: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for c in text.chars() {
        match u8::try_from(c) {
            // Escaped characters are ASCII: one byte, two hex digits.
            Ok(b) if escaped(c) => {
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
            _ => out.push(c),
        }
    }
}

/// The text [`escape`] wrote: every `%` followed by two hex digits, the bytes UTF-8.
fn unescape(text: &str) -> Result<String, Foreign> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(Foreign)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return Err(Foreign);
            }
            let hex = std::str::from_utf8(hex).map_err(|_| Foreign)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| Foreign)?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Foreign)
}

impl SharedHold {
    /// A `4:` entry: `<expiry>,<weight>,<fence>,<metadata>,<owner>`.
    fn read(entry: &str) -> Result<SharedHold, Foreign> {
        let (expires_at, rest) = split(entry, ',')?;
        let (weight, rest) = split(rest, ',')?;
        let (fence, rest) = split(rest, ',')?;
        let (said, owner) = split(rest, ',')?;
        let metadata = match said.strip_prefix('=') {
            Some(text) => Some(metadata(&unescape(text)?)?),
            None if said.is_empty() => None,
            None => return Err(Foreign),
        };
        Ok(SharedHold {
            owner: owner.to_owned(),
            expires_at: number(expires_at)?,
            weight: number(weight)?,
            fence: (!fence.is_empty()).then(|| number(fence)).transpose()?,
            metadata,
        })
    }

    /// A `3:` entry: `<expiry>,<weight>,<owner>`.
    fn read_v3(entry: &str) -> Result<SharedHold, Foreign> {
        let (expires_at, rest) = split(entry, ',')?;
        let (weight, owner) = split(rest, ',')?;
        Ok(SharedHold {
            owner: owner.to_owned(),
            expires_at: number(expires_at)?,
            weight: number(weight)?,
            fence: None,
            metadata: None,
        })
    }

    fn write(&self, out: &mut String) {
        let _ = write!(out, "{},{},", self.expires_at, self.weight);
        if let Some(fence) = self.fence {
            let _ = write!(out, "{fence}");
        }
        out.push(',');
        if let Some(said) = &self.metadata {
            out.push('=');
            escape(said.as_str(), out);
        }
        out.push(',');
        out.push_str(&self.owner);
    }

    fn is_live(&self, now: u64) -> bool {
        self.expires_at > now
    }
}

impl Slot {
    /// Reads a value as the bucket holds it; an absent or empty value is a free key.
    pub fn read(value: Option<&[u8]>) -> Result<Slot, Foreign> {
        let text = match value {
            None | Some([]) => return Ok(Slot::default()),
            Some(bytes) => std::str::from_utf8(bytes).map_err(|_| Foreign)?,
        };
        let (version, rest) = split(text, ':')?;
        match version {
            "1" => Self::read_exclusive(rest, false),
            "2" => Self::read_exclusive(rest, true),
            "3" => Self::read_shared(rest, SharedHold::read_v3),
            "4" => Self::read_shared(rest, SharedHold::read),
            _ => Err(Foreign),
        }
    }

    /// `<expiry>:<last fence>:<owner>[ <metadata>]`, or without the fence (`1:`).
    fn read_exclusive(rest: &str, fenced: bool) -> Result<Slot, Foreign> {
        let (expires_at, rest) = split(rest, ':')?;
        let (fence, rest) = if fenced {
            let (fence, rest) = split(rest, ':')?;
            (number(fence)?, rest)
        } else {
            (0, rest)
        };
        let (owner, said) = match rest.split_once(' ') {
            Some((owner, said)) => (owner, Some(metadata(said)?)),
            None => (rest, None),
        };
        let hold = (!owner.is_empty())
            .then(|| {
                Ok(Hold {
                    owner: owner.to_owned(),
                    expires_at: number(expires_at)?,
                    metadata: said,
                })
            })
            .transpose()?;
        Ok(Slot {
            hold,
            fence,
            ..Slot::default()
        })
    }

    /// `<last fence>:<limit>:<hold> <hold> …`, each hold read by `hold`.
    fn read_shared(
        rest: &str,
        hold: fn(&str) -> Result<SharedHold, Foreign>,
    ) -> Result<Slot, Foreign> {
        let (fence, rest) = split(rest, ':')?;
        let (limit, holds) = split(rest, ':')?;
        let shared = holds
            .split(' ')
            .filter(|h| !h.is_empty())
            .map(hold)
            .collect::<Result<_, _>>()?;
        Ok(Slot {
            hold: None,
            shared,
            limit: number(limit)?,
            fence: number(fence)?,
        })
    }

    /// The value to write back: `2:…` for an exclusive hold or a free key, `4:…` while shared
    /// holds are live. Expired shared holds are left out, so a key's value never grows with
    /// holds that are gone.
    pub fn encode(&mut self, now: u64) -> Vec<u8> {
        self.shared.retain(|h| h.is_live(now));
        let mut value = String::new();
        if self.shared.is_empty() {
            match &self.hold {
                Some(hold) => {
                    let _ = write!(value, "2:{}:{}:{}", hold.expires_at, self.fence, hold.owner);
                    if let Some(said) = &hold.metadata {
                        value.push(' ');
                        value.push_str(said.as_str());
                    }
                }
                None => {
                    let _ = write!(value, "2:0:{}:", self.fence);
                }
            }
            return value.into_bytes();
        }
        let _ = write!(value, "4:{}:{}:", self.fence, self.limit);
        for (i, hold) in self.shared.iter().enumerate() {
            if i > 0 {
                value.push(' ');
            }
            hold.write(&mut value);
        }
        value.into_bytes()
    }

    /// The exclusive hold as the row rules see it.
    pub fn view(&self) -> Option<RowView<'_>> {
        self.hold.as_ref().map(|hold| RowView {
            owner: &hold.owner,
            expires_at: hold.expires_at,
        })
    }

    /// What is live at `now`, for the grant rule.
    pub fn live(&self, now: u64) -> LiveHolds {
        let mut live = LiveHolds {
            exclusive: self.view().is_some_and(|row| row.is_live(now)),
            ..LiveHolds::default()
        };
        for hold in self.shared.iter().filter(|h| h.is_live(now)) {
            live.limit = Some(self.limit);
            live.weight += u64::from(hold.weight);
        }
        live
    }

    /// `owner`'s live shared hold.
    pub fn shared_of(&mut self, owner: &OwnerToken, now: u64) -> Option<&mut SharedHold> {
        self.shared
            .iter_mut()
            .find(|h| h.is_live(now) && h.owner == owner.as_str())
    }

    /// Takes the next fence.
    pub fn next_fence(&mut self) -> Option<Fence> {
        self.fence = self.fence.saturating_add(1);
        Fence::new(self.fence).ok()
    }

    /// Every hold live at `now` as `inspect` shows it: metadata, fence and time left, never
    /// the owner.
    pub fn holders(&self, now: u64) -> Vec<HolderInfo> {
        let mut holders = Vec::new();
        let mut show = |metadata: &Option<Metadata>, fence: Option<u64>, expires_at: u64| {
            if expires_at > now {
                let fence = fence.and_then(|f| Fence::new(f).ok());
                holders.push(HolderInfo::new(metadata.clone(), fence, expires_at - now));
            }
        };
        if let Some(hold) = &self.hold {
            show(&hold.metadata, Some(self.fence), hold.expires_at);
        }
        for hold in &self.shared {
            show(&hold.metadata, hold.fence, hold.expires_at);
        }
        holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(text: &str) -> Option<Metadata> {
        Some(Metadata::new(text).unwrap())
    }

    fn read(value: &str) -> Result<Slot, Foreign> {
        Slot::read(Some(value.as_bytes()))
    }

    /// Metadata that would break a naive encoding: separators, escapes, newlines, non-ASCII.
    const AWKWARD: &[&str] = &[
        "",
        " ",
        "host a, job 7: step 2",
        "%41 is not A",
        "%",
        "%zz",
        "line one\nline two\r\n\ttab",
        "=,=, =",
        "2:9:9:owner",
        "4:1:3:9,1,1,,x",
        "naïve — ключ 🔒",
        "\u{7f}\u{0}",
    ];

    fn shared(owner: &str, fence: Option<u64>, metadata: Option<Metadata>) -> SharedHold {
        SharedHold {
            owner: owner.to_owned(),
            expires_at: 5_000,
            weight: 2,
            fence,
            metadata,
        }
    }

    #[test]
    fn an_exclusive_hold_and_its_metadata_round_trip() {
        for text in AWKWARD {
            let mut slot = Slot {
                hold: Some(Hold {
                    owner: "0123456789abcdef0123456789abcdef".to_owned(),
                    expires_at: 5_000,
                    metadata: said(text),
                }),
                fence: 7,
                ..Slot::default()
            };
            let value = slot.encode(1_000);
            assert_eq!(Slot::read(Some(value.as_slice())), Ok(slot), "{text:?}");
        }
    }

    #[test]
    fn shared_holds_keep_their_own_fence_and_metadata() {
        let mut holds: Vec<SharedHold> = AWKWARD
            .iter()
            .enumerate()
            .map(|(i, text)| shared(&format!("owner,{i}"), Some(i as u64 + 1), said(text)))
            .collect();
        holds.push(shared("plain", None, None));
        let mut slot = Slot {
            shared: holds,
            limit: 100,
            fence: 40,
            ..Slot::default()
        };
        let value = slot.encode(1_000);
        assert!(value.starts_with(b"4:40:100:"));
        assert!(
            !value.contains(&b'\n'),
            "a control character left unescaped"
        );
        assert_eq!(Slot::read(Some(value.as_slice())), Ok(slot));
    }

    #[test]
    fn values_of_earlier_versions_still_read() {
        assert_eq!(Slot::read(None), Ok(Slot::default()));
        assert_eq!(Slot::read(Some(&b""[..])), Ok(Slot::default()));
        let v1 = read("1:5000:tok").unwrap();
        assert_eq!((v1.view().unwrap().owner, v1.fence), ("tok", 0));
        assert_eq!(v1.holders(1_000), [HolderInfo::new(None, None, 4_000)]);
        let v2 = read("2:5000:3:tok:with:colons").unwrap();
        assert_eq!(v2.view().unwrap().owner, "tok:with:colons");
        assert_eq!(
            v2.holders(1_000),
            [HolderInfo::new(None, Fence::new(3).ok(), 4_000)]
        );
        assert_eq!(read("2:0:9:").unwrap().hold, None);
        let v3 = read("3:12:4:5000,1,a 6000,2,b,c").unwrap();
        assert_eq!((v3.fence, v3.limit), (12, 4));
        assert_eq!(
            v3.shared,
            [
                SharedHold {
                    weight: 1,
                    ..shared("a", None, None)
                },
                SharedHold {
                    expires_at: 6_000,
                    ..shared("b,c", None, None)
                },
            ]
        );
        assert_eq!(
            v3.holders(1_000),
            [
                HolderInfo::new(None, None, 4_000),
                HolderInfo::new(None, None, 5_000)
            ]
        );
    }

    #[test]
    fn a_v3_value_rewritten_keeps_its_holds_without_fences() {
        let mut slot = read("3:12:4:5000,1,a").unwrap();
        slot.shared.push(shared("b", Some(13), said("new")));
        let value = slot.encode(1_000);
        assert_eq!(
            String::from_utf8(value).unwrap(),
            "4:12:4:5000,1,,,a 5000,2,13,=new,b"
        );
    }

    #[test]
    fn only_live_holds_are_shown_and_expired_shared_holds_are_dropped() {
        let mut slot = Slot {
            shared: vec![
                SharedHold {
                    expires_at: 900,
                    ..shared("gone", Some(1), said("old"))
                },
                shared("here", Some(2), said("new")),
            ],
            limit: 3,
            fence: 2,
            ..Slot::default()
        };
        assert_eq!(
            slot.holders(1_000),
            [HolderInfo::new(said("new"), Fence::new(2).ok(), 4_000)]
        );
        let value = String::from_utf8(slot.encode(1_000)).unwrap();
        assert_eq!(value, "4:2:3:5000,2,2,=new,here");
        let expired = read("2:900:5:tok meta").unwrap();
        assert!(expired.holders(1_000).is_empty());
    }

    // proptest is a native-only dev-dependency.
    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn any_metadata_round_trips_in_either_form(
            texts in proptest::collection::vec("\\PC{0,40}|[ ,%=:\\n\\x00-\\x1f]{0,12}", 1..5),
            exclusive in proptest::bool::ANY,
        ) {
            let mut slot = if exclusive {
                Slot {
                    hold: Some(Hold {
                        owner: "tok".to_owned(),
                        expires_at: 5_000,
                        metadata: said(&texts[0]),
                    }),
                    fence: 3,
                    ..Slot::default()
                }
            } else {
                let holds = texts.iter().enumerate();
                Slot {
                    shared: holds
                        .map(|(i, t)| shared(&format!("o{i}"), Some(i as u64), said(t)))
                        .collect(),
                    limit: 9,
                    fence: 8,
                    ..Slot::default()
                }
            };
            let value = slot.encode(1_000);
            proptest::prop_assert_eq!(Slot::read(Some(value.as_slice())), Ok(slot));
        }
    }

    #[test]
    fn values_keel_lock_did_not_write_are_foreign() {
        let long = format!("2:5000:1:tok {}", "x".repeat(1025));
        for bad in [
            "hello",
            "9:1:2:3",
            "2:soon:1:tok",
            "2:5000:tok",
            "3:1:2:5000,x",
            "4:1:2:5000,1,1,tok",
            "4:1:2:5000,1,1,meta,tok",
            "4:1:2:5000,1,x,,tok",
            "4:1:2:5000,1,1,=%4,tok",
            "4:1:2:5000,1,1,=%g0,tok",
            "4:1:2:5000,1,1,=%FF,tok",
            &long,
        ] {
            assert_eq!(read(bad), Err(Foreign), "{bad:?}");
        }
        assert_eq!(Slot::read(Some(&[0xff, b':'][..])), Err(Foreign));
    }
}
