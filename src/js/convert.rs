//! JS value → validated core value, and core error → JS error. Wrong types are `TypeError`s,
//! values of the right type outside their range are `RangeError`s.

use crate::prelude::*;
use js_sys::{Object, RangeError, Reflect, TypeError};
use wasm_bindgen::prelude::*;

use crate::error::{Error, HoldOperation, InputError, Operation};
use crate::holding::KeepAlive;
use crate::input::{decimal, AcquireOptions, Key, ShowNumber, Ttl, WaitOption};
use crate::token::OwnerToken;
#[cfg(feature = "workerd")]
use crate::token::MAX_METADATA_BYTES;

#[wasm_bindgen(module = "/src/js/errors.js")]
extern "C" {
    #[wasm_bindgen(js_name = notHeld)]
    pub(crate) fn not_held_error(key: &str, message: &str) -> JsValue;
    #[wasm_bindgen(js_name = storeTimeout)]
    fn store_timeout_error(key: &str, operation: &str, after_ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = limitMismatch)]
    fn limit_mismatch_error(key: &str, held: f64, asked: f64) -> JsValue;
}

pub(crate) fn type_error(message: impl AsRef<str>) -> JsValue {
    TypeError::new(message.as_ref()).into()
}

/// A short description of a value for error messages: `the string "x"`, `number 1`, `null`, …
/// Every message of the JS layer is concatenated rather than `format!`ed: with no `core::fmt`
/// on these paths, the formatting machinery (and `{:?}`'s Unicode tables) stays out of the wasm.
pub(crate) fn describe(value: &JsValue) -> String {
    if value.is_null() {
        return "null".into();
    }
    if let Some(s) = value.as_string() {
        return ["the string ", &quote(s.chars().take(40))].concat();
    }
    if let Some(n) = value.as_f64() {
        return ["number ", &ShowNumber(n).text()].concat();
    }
    if let Some(b) = value.as_bool() {
        return (if b { "boolean true" } else { "boolean false" }).into();
    }
    match value.js_typeof().as_string() {
        Some(t) => ["a value of type ", &t].concat(),
        None => "an unknown value".into(),
    }
}

/// `chars` in double quotes, with `"` and `\` backslashed, `\n`, `\r`, `\t`, `\0` as Rust
/// writes them and other control characters as `\u{hex}`; everything else as is.
fn quote(chars: impl Iterator<Item = char>) -> String {
    let mut out = String::from("\"");
    for c in chars {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                out.push_str("\\u{");
                let mut n = c as u32;
                let mut digits = Vec::new();
                loop {
                    digits.push(b"0123456789abcdef"[(n & 15) as usize] as char);
                    n >>= 4;
                    if n == 0 {
                        break;
                    }
                }
                out.extend(digits.iter().rev());
                out.push('}');
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JS error for a core error. A store's own error is passed through as the same object.
pub(crate) fn to_js(error: Error<JsValue>) -> JsValue {
    match error {
        Error::Input(input) => input_to_js(input),
        Error::NotHeld { key, attempted } => {
            let message = match attempted {
                HoldOperation::Serialize => [
                    "cannot serialize lock \"",
                    &key,
                    "\": it is not held (acquire it first)",
                ]
                .concat(),
                _ => [
                    "lock \"",
                    &key,
                    "\" is not held: it expired or was never acquired",
                ]
                .concat(),
            };
            not_held_error(&key, &message)
        }
        Error::Store { error, .. } => error,
        Error::StoreTimeout {
            key,
            operation,
            after_ms,
            ..
        } => store_timeout_error(&key, method_name(operation), after_ms as f64),
        Error::LimitMismatch { key, held, asked } => {
            limit_mismatch_error(&key, held.into(), asked.into())
        }
        Error::Unsupported {
            store,
            operation: Operation::AcquireShared,
        } => type_error(
            [
                "the ",
                store,
                " store keeps no shared holds: semaphores and read locks need a store with acquireShared()",
            ]
            .concat(),
        ),
        Error::Unsupported { store, operation } => js_sys::Error::new(
            &[
                "the ",
                store,
                " store does not support ",
                method_name(operation),
                "()",
            ]
            .concat(),
        )
        .into(),
        Error::Aborted => js_sys::Error::new("acquire was aborted").into(),
        Error::Random(e) => js_sys::Error::new(&e.message()).into(),
        // `Error` is non_exhaustive; a variant added later gets its Display text.
        #[allow(unreachable_patterns)]
        other => js_sys::Error::new(&other.to_string()).into(),
    }
}

/// A value of the right type but outside what the lock accepts, named the way the JS API names
/// it (`ttlMs`, `retryDelay`).
pub(crate) fn input_to_js(error: InputError) -> JsValue {
    let message = match error {
        InputError::InvalidTtl { value, max } => [
            "ttlMs must be a finite number of milliseconds between 1 and ",
            &decimal(max),
            ", got ",
            &ShowNumber(value).text(),
        ]
        .concat(),
        InputError::InvalidWait { option, value, max } => {
            let name = match option {
                WaitOption::Timeout => "timeout",
                WaitOption::RetryDelay => "retryDelay",
            };
            return wait_range_error(name, value, max);
        }
        other => other.message(),
    };
    RangeError::new(&message).into()
}

/// The `RangeError` for a wait named `name` (`timeout`, `waitMs`, …) outside 0..=`max` ms.
pub(crate) fn wait_range_error(name: &str, value: f64, max: u64) -> JsValue {
    RangeError::new(
        &[
            name,
            " must be a finite number of milliseconds between 0 and ",
            &decimal(max),
            ", got ",
            &ShowNumber(value).text(),
        ]
        .concat(),
    )
    .into()
}

/// A store operation's method name on the JS seam.
/// A store operation as the exports number it (`OP_*` in `protocol.rs`).
pub(crate) fn operation(op: u32) -> Option<Operation> {
    use super::protocol::*;
    Some(match op {
        OP_ACQUIRE => Operation::Acquire,
        OP_RELEASE => Operation::Release,
        OP_EXTEND => Operation::Extend,
        OP_IS_LOCKED => Operation::IsLocked,
        OP_REMAINING_TIME => Operation::RemainingTime,
        OP_FORCE_RELEASE => Operation::ForceRelease,
        OP_ACQUIRE_SHARED => Operation::AcquireShared,
        OP_INSPECT => Operation::Inspect,
        _ => return None,
    })
}

/// The error for an operation number that names none (the JS layer sent a wrong one).
pub(crate) fn bad_operation() -> JsValue {
    type_error("keel-lock: no such store operation (internal error)")
}

pub(crate) fn method_name(op: Operation) -> &'static str {
    match op {
        Operation::Acquire => "acquire",
        Operation::Release => "release",
        Operation::Extend => "extend",
        Operation::IsLocked => "isLocked",
        Operation::RemainingTime => "remainingTime",
        Operation::ForceRelease => "forceRelease",
        Operation::AcquireShared => "acquireShared",
        Operation::Inspect => "inspect",
        Operation::Metadata => "metadata",
    }
}

/// A store call's `weight` and `limit`: numbers (else a `TypeError`), whole, with
/// `1 <= weight <= limit <= 2^32 - 1` (else a `RangeError`).
pub(crate) fn share(weight: &JsValue, limit: &JsValue) -> Result<crate::share::Share, JsValue> {
    use crate::share::Share;
    let number = number_arg;
    let limit = Share::limit_from_f64(number(limit, "limit")?).map_err(input_to_js)?;
    Share::from_f64(number(weight, "weight")?, limit).map_err(input_to_js)
}

/// `value` as a number, else the `TypeError` "`what` must be a number, got …".
#[inline(never)]
pub(crate) fn number_arg(value: &JsValue, what: &str) -> Result<f64, JsValue> {
    value
        .as_f64()
        .ok_or_else(|| type_error([what, " must be a number, got ", &describe(value)].concat()))
}

pub(crate) fn key(value: &JsValue) -> Result<Key, JsValue> {
    let Some(js) = value.dyn_ref::<js_sys::JsString>() else {
        return Err(type_error(
            ["lock key must be a string, got ", &describe(value)].concat(),
        ));
    };
    // Lone surrogates would become U+FFFD on the way to UTF-8 and make distinct keys collide
    // ("\uD800" and "\uDBFF" would be one lock), so they are refused.
    if !well_formed(js) {
        return Err(RangeError::new(
            "lock key must be well-formed UTF-16 (it contains a lone surrogate)",
        )
        .into());
    }
    Key::new(String::from(js)).map_err(input_to_js)
}

#[wasm_bindgen]
extern "C" {
    /// A JS string, for `isWellFormed` (not bound by js-sys).
    #[wasm_bindgen(extends = js_sys::JsString)]
    type Text;
    /// `String.prototype.isWellFormed`: whether the string has no lone surrogate.
    #[wasm_bindgen(method, catch, js_name = isWellFormed)]
    fn is_well_formed(this: &Text) -> Result<bool, JsValue>;
}

/// Whether `js` has no lone surrogate: one `isWellFormed` call, or, on a runtime without it, a
/// look at every code unit (a call into JS each).
fn well_formed(js: &js_sys::JsString) -> bool {
    js.unchecked_ref::<Text>()
        .is_well_formed()
        .unwrap_or_else(|_| js.is_valid_utf16())
}

/// An owner token handed in by a store caller (a JS `MemoryLockStore` user, a Durable Object RPC).
pub(crate) fn owner(value: &JsValue) -> Result<OwnerToken, JsValue> {
    let Some(s) = value.as_string() else {
        return Err(type_error(
            ["owner must be a string, got ", &describe(value)].concat(),
        ));
    };
    OwnerToken::parse(s).map_err(input_to_js)
}

/// Hold metadata handed to a store call (a Durable Object RPC, its store's JS face): a string
/// of at most 1 KiB of UTF-8, answered as given; `undefined` or `null` (none) as `null`. Any
/// other value is a `TypeError`, a longer string a `RangeError`.
#[cfg(feature = "workerd")]
pub(crate) fn metadata(value: &JsValue) -> Result<JsValue, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(JsValue::NULL);
    }
    let Some(text) = value.as_string() else {
        return Err(type_error(
            ["metadata must be a string, got ", &describe(value)].concat(),
        ));
    };
    if text.len() > MAX_METADATA_BYTES {
        let len = text.len();
        let max = MAX_METADATA_BYTES;
        return Err(input_to_js(InputError::MetadataTooLong { len, max }));
    }
    Ok(value.clone())
}

/// A TTL that a store call must carry (no default).
pub(crate) fn required_ttl(value: &JsValue) -> Result<Ttl, JsValue> {
    if value.is_undefined() {
        return Err(type_error("ttlMs is required"));
    }
    ttl(value, Ttl::default())
}

fn number(what: &str, value: &JsValue) -> Result<Option<f64>, JsValue> {
    if value.is_undefined() {
        return Ok(None);
    }
    value
        .as_f64()
        .map(Some)
        .ok_or_else(|| not_a_number(what, value))
}

/// The `TypeError` for `what`, which must be a number, given as `value`.
pub(crate) fn not_a_number(what: &str, value: &JsValue) -> JsValue {
    type_error([what, " must be a number, got ", &describe(value)].concat())
}

/// `ttlMs`: `undefined` means `default`.
pub(crate) fn ttl(value: &JsValue, default: Ttl) -> Result<Ttl, JsValue> {
    match number("ttlMs", value)? {
        None => Ok(default),
        Some(ms) => Ttl::from_f64(ms).map_err(input_to_js),
    }
}

/// `{ timeout?, retryDelay? }`, or `undefined`/`null` for the defaults.
pub(crate) fn acquire_options(value: &JsValue) -> Result<AcquireOptions, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(AcquireOptions::default());
    }
    if !value.is_object() || value.is_function() {
        return Err(type_error(
            [
                "options must be an object like { timeout, retryDelay }, got ",
                &describe(value),
            ]
            .concat(),
        ));
    }
    let timeout = number("timeout", &get_prop!(value, "timeout")?)?;
    let retry_delay = number("retryDelay", &get_prop!(value, "retryDelay")?)?;
    AcquireOptions::from_f64(timeout, retry_delay).map_err(input_to_js)
}

/// A fence as JS sees it: a number (exact: fences stay below 2^53), or `null`.
pub(crate) fn fence_to_js(fence: Option<crate::grant::Fence>) -> JsValue {
    fence.map_or(JsValue::NULL, |f| JsValue::from_f64(f.get() as f64))
}

/// A store's acquire answer on the JS seam: `false`, `true` (no fence) or `{ fence }`.
pub(crate) fn grant_to_js(grant: Option<crate::grant::Grant>) -> Result<JsValue, JsValue> {
    match grant {
        None => Ok(JsValue::FALSE),
        Some(g) if g.fence().is_none() => Ok(JsValue::TRUE),
        Some(g) => object(&[("fence", fence_to_js(g.fence()))]),
    }
}

/// A plain object `{ [name]: value, ... }` from pairs.
pub(crate) fn object(pairs: &[(&str, JsValue)]) -> Result<JsValue, JsValue> {
    let obj = Object::new();
    for (k, v) in pairs {
        Reflect::set(&obj, &JsValue::from_str(k), v)?;
    }
    Ok(obj.into())
}

/// `autoExtend`: `undefined`/`false` (off), `true` (every ttl/3, no cap), or
/// `{ every?, maxHoldMs? }`.
pub(crate) fn keep_alive_option(value: &JsValue) -> Result<Option<KeepAlive>, JsValue> {
    if value.is_undefined() || value.as_bool() == Some(false) {
        return Ok(None);
    }
    if value.as_bool() == Some(true) {
        return Ok(Some(KeepAlive::default()));
    }
    if !value.is_object() || value.is_function() {
        return Err(type_error(
            [
                "autoExtend must be true, false or { every, maxHoldMs }, got ",
                &describe(value),
            ]
            .concat(),
        ));
    }
    let ms = |name: &str| -> Result<Option<u64>, JsValue> {
        let v = Reflect::get(value, &JsValue::from_str(name))?;
        if v.is_undefined() {
            return Ok(None);
        }
        let n = v.as_f64().ok_or_else(|| {
            type_error(
                [
                    "autoExtend.",
                    name,
                    " must be a number, got ",
                    &describe(&v),
                ]
                .concat(),
            )
        })?;
        // Same range as a TTL: 1 ms to 2^31 - 1 ms, fractions rounding up.
        Ttl::from_f64(n).map(|t| Some(t.as_ms())).map_err(|_| {
            js_sys::RangeError::new(
                &[
                    "autoExtend.",
                    name,
                    " must be a finite number of milliseconds between 1 and 2147483647",
                ]
                .concat(),
            )
            .into()
        })
    };
    Ok(Some(KeepAlive {
        every_ms: ms("every")?,
        max_hold_ms: ms("maxHoldMs")?,
    }))
}
