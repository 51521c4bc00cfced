//! How a store's answers are judged, for every store reached through JS (a user's store, the
//! Durable Object over RPC): anything outside the documented contract is a `TypeError` that
//! names the method, never a guess. `method` is how the message names it, e.g.
//! `lock store's acquire()`.

use super::*;

fn broken(method: &str, expected: &str, answer: &JsValue) -> JsValue {
    broken_as(method, expected, &describe(answer))
}

/// [`broken`] for an answer already described (`got …`).
fn broken_as(method: &str, expected: &str, got: &str) -> JsValue {
    type_error(
        [
            method,
            " must answer ",
            expected,
            " (or a promise of one), got ",
            got,
            "; this store is broken",
        ]
        .concat(),
    )
}

const ACQUIRE_EXPECTED: &str =
    "true, false or { fence } with a whole-number fence from 1 to 2^53 - 1";

/// `n` if it is a whole number in `min..=max`.
fn whole(n: f64, min: f64, max: u64) -> Option<u64> {
    (crate::float::fract(n) == 0.0 && n >= min && n <= max as f64).then_some(n as u64)
}

/// `acquire`'s answer `{ fence }`, its `fence` already read as the number `fence` (the JS
/// layer tells answers apart by type and hands over only the number).
pub(crate) fn fenced(method: &str, fence: f64) -> Result<Option<Grant>, JsValue> {
    match whole(fence, 1.0, crate::grant::MAX_FENCE).and_then(|f| Fence::new(f).ok()) {
        Some(fence) => Ok(Some(Grant::new(Some(fence)))),
        None => Err(broken_as(
            method,
            ACQUIRE_EXPECTED,
            "a value of type object",
        )),
    }
}

/// `acquire`'s answer: `true`, `false`, or `{ fence }` with a whole-number fence from 1 to
/// 2^53 - 1. (Only `fence` is read: one property lookup per acquisition.)
pub(crate) fn acquire(method: &str, answer: &JsValue) -> Result<Option<Grant>, JsValue> {
    grant(method, answer, false)
}

/// `acquireOrWait`'s answer: as `acquire`'s, plus `waitedMs`, the whole milliseconds the
/// grant waited in the store's queue (absent: 0); `fence` may then be `null`, from a store
/// without fences.
pub(crate) fn waited(method: &str, answer: &JsValue) -> Result<Option<Grant>, JsValue> {
    grant(method, answer, true)
}

fn grant(method: &str, answer: &JsValue, waited: bool) -> Result<Option<Grant>, JsValue> {
    let expected = match waited {
        true => "true, false or { fence, waitedMs } with a whole-number fence from 1 to 2^53 - 1",
        false => ACQUIRE_EXPECTED,
    };
    if let Some(acquired) = answer.as_bool() {
        return Ok(acquired.then(Grant::unfenced));
    }
    if !answer.is_object() {
        return Err(broken(method, expected, answer));
    }
    let whole = |v: &JsValue, min: f64, max: u64| v.as_f64().and_then(|f| whole(f, min, max));
    let waited_ms = match waited {
        false => None,
        true => {
            let ms = get_prop!(answer, "waitedMs")?;
            match ms.is_undefined() {
                true => None,
                false => Some(
                    whole(&ms, 0.0, MAX_TTL_MS).ok_or_else(|| broken(method, expected, answer))?,
                ),
            }
        }
    };
    let fence = get_prop!(answer, "fence")?;
    let fence = match whole(&fence, 1.0, crate::grant::MAX_FENCE) {
        Some(f) => Fence::new(f).ok(),
        None if fence.is_null() && waited_ms.is_some() => None,
        None => return Err(broken(method, expected, answer)),
    };
    Ok(Some(Grant::new(fence).waited(waited_ms.unwrap_or(0))))
}

/// `acquireShared`'s answer (`acquireSharedOrWait`'s with `waited`): as `acquire`'s, or
/// `{ heldLimit }` — the key's live shared holds have that other limit.
pub(crate) fn shared(method: &str, answer: &JsValue, waited: bool) -> Result<SharedGrant, JsValue> {
    if answer.is_object() {
        let held = get_prop!(answer, "heldLimit")?;
        if !held.is_undefined() {
            let limit = crate::share::MAX_LIMIT as u64;
            return match held.as_f64().and_then(|f| whole(f, 1.0, limit)) {
                Some(held) => Ok(SharedGrant::LimitMismatch { held: held as u32 }),
                None => Err(broken(
                    method,
                    "false, { fence } or { heldLimit } with a whole-number limit",
                    answer,
                )),
            };
        }
    }
    grant(method, answer, waited).map(SharedGrant::from)
}

/// `acquireMany`'s answer for `count` keys: `false` (refused), `null` (not one step here),
/// or an array of `count` grants as `acquire` answers them (`true` or `{ fence }`).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) fn many(method: &str, answer: &JsValue, count: usize) -> Result<ManyGrant, JsValue> {
    if answer.is_null() {
        return Ok(ManyGrant::Unsupported);
    }
    if answer.as_bool() == Some(false) {
        return Ok(ManyGrant::Refused);
    }
    let expected = "false, null or an array of one acquire grant (true or { fence }) per key";
    let Some(items) = answer.dyn_ref::<js_sys::Array>() else {
        return Err(broken(method, expected, answer));
    };
    if items.length() as usize != count {
        return Err(broken_as(method, expected, "an array of another length"));
    }
    items
        .iter()
        .map(|item| match grant(method, &item, false)? {
            Some(grant) => Ok(grant),
            None => Err(broken(method, expected, &item)),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ManyGrant::All)
}

/// `inspect`'s answer: `{ holders: [{ metadata, fence, remainingMs }], waiting }` —
/// `metadata` a string or `null`, `fence` as `acquire` answers one or `null`, `remainingMs`
/// milliseconds from 0 to the longest TTL (fractions round up), `waiting` a whole number or
/// `null`. Only these fields are read: nothing else a store puts there reaches a caller.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) fn inspect(method: &str, answer: &JsValue) -> Result<LockInfo, JsValue> {
    let expected = "{ holders: [{ metadata, fence, remainingMs }], waiting }";
    if !answer.is_object() {
        return Err(broken(method, expected, answer));
    }
    let holders = get_prop!(answer, "holders")?;
    let Some(holders) = holders.dyn_ref::<js_sys::Array>() else {
        return Err(broken_as(method, expected, "holders that are not an array"));
    };
    let mut shown = Vec::with_capacity(holders.length() as usize);
    for holder in holders.iter() {
        let bad = || broken(method, expected, &holder);
        if !holder.is_object() {
            return Err(bad());
        }
        let said = get_prop!(&holder, "metadata")?;
        let metadata = match said.as_string() {
            Some(text) => Some(Metadata::new(&text).map_err(|_| bad())?),
            None if said.is_null() || said.is_undefined() => None,
            None => return Err(bad()),
        };
        let fence = get_prop!(&holder, "fence")?;
        let fence = match fence.as_f64() {
            Some(f) => Some(
                whole(f, 1.0, crate::grant::MAX_FENCE)
                    .and_then(|f| Fence::new(f).ok())
                    .ok_or_else(bad)?,
            ),
            None if fence.is_null() => None,
            None => return Err(bad()),
        };
        let left = get_prop!(&holder, "remainingMs")?;
        let remaining_ms = match left.as_f64() {
            Some(ms) if (0.0..=MAX_TTL_MS as f64).contains(&ms) => crate::float::ceil(ms) as u64,
            _ => return Err(bad()),
        };
        shown.push(HolderInfo::new(metadata, fence, remaining_ms));
    }
    let waiting = get_prop!(answer, "waiting")?;
    let waiting = match waiting.as_f64() {
        Some(n) => Some(
            whole(n, 0.0, u64::from(u32::MAX)).ok_or_else(|| broken(method, expected, answer))?
                as u32,
        ),
        None if waiting.is_null() => None,
        None => return Err(broken(method, expected, answer)),
    };
    Ok(LockInfo::new(shown, waiting))
}

/// A boolean.
pub(crate) fn boolean(method: &str, answer: &JsValue) -> Result<bool, JsValue> {
    answer
        .as_bool()
        .ok_or_else(|| broken(method, "a boolean", answer))
}

/// `null`, or milliseconds from 0 to the longest TTL (fractions round up).
pub(crate) fn remaining_time(method: &str, answer: &JsValue) -> Result<Option<u64>, JsValue> {
    if answer.is_null() {
        return Ok(None);
    }
    match answer.as_f64() {
        Some(ms) if ms >= 0.0 && ms <= MAX_TTL_MS as f64 => Ok(Some(crate::float::ceil(ms) as u64)),
        _ => Err(broken(
            method,
            "null or a number of milliseconds from 0 to 2147483647",
            answer,
        )),
    }
}
