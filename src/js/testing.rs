//! `checkLockStore`: the core's conformance properties, run against any JS store; `checkHistory`:
//! the history checker (`crate::history`) over events recorded in JS. The engine behind
//! `keel-lock/testing` (feature `testing`: the npm package builds it as a wasm of its own).

use js_sys::{Array, Promise, Reflect};
use wasm_bindgen::prelude::*;

use super::api::backend_for;
use super::convert::{object, type_error};
use super::promises::JsFuture;
use super::runtime::JsRuntime;
use crate::conformance::{check_all, ConformanceOptions, Verdict};
use crate::history::{
    check, CheckOptions, Event, EventKind, Holding, Micros, Op, Stamp, Violation,
};

fn options(value: &JsValue) -> Result<ConformanceOptions, JsValue> {
    let mut o = ConformanceOptions::default();
    if value.is_undefined() || value.is_null() {
        return Ok(o);
    }
    if !value.is_object() {
        return Err(type_error("checkLockStore options must be an object"));
    }
    let get = |name: &str| Reflect::get(value, &JsValue::from_str(name));
    // `max` is an integer so the message formats no f64 (float formatting costs ~15 KB of wasm).
    let count = |name: &str, v: JsValue, max: u32| -> Result<Option<u64>, JsValue> {
        if v.is_undefined() {
            return Ok(None);
        }
        match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 && n <= f64::from(max) => {
                Ok(Some(n.ceil() as u64))
            }
            _ => Err(js_sys::RangeError::new(&format!(
                "checkLockStore option {name} must be a number from 0 to {max}"
            ))
            .into()),
        }
    };
    if let Some(p) = get("keyPrefix")?.as_string() {
        o.key_prefix = p;
    }
    if let Some(n) = count("shortTtlMs", get("shortTtlMs")?, 60_000)? {
        o.short_ttl_ms = n.max(1);
    }
    if let Some(n) = count("settleMs", get("settleMs")?, 60_000)? {
        o.settle_ms = n;
    }
    if let Some(n) = count("contenders", get("contenders")?, 10_000)? {
        o.contenders = n.max(2) as usize;
    }
    Ok(o)
}

/// Runs every conformance property against `store` and resolves
/// `[{ property, ok, applicable, message }]`, one entry per property: `ok: false` is a broken
/// property; `applicable: false` is a finding (e.g. a store without fences), not a failure.
#[wasm_bindgen(js_name = checkLockStore)]
pub fn check_lock_store(store: JsValue, opts: JsValue) -> Promise {
    let prepared = backend_for(store).and_then(|b| Ok((b, options(&opts)?)));
    // Boxed, as `promise_of` takes it.
    let run: JsFuture = Box::pin(async move {
        let (backend, options) = prepared?;
        let results = Array::new();
        for (property, outcome) in check_all(&backend, &JsRuntime, &options).await {
            let (ok, applicable, message) = match outcome {
                Ok(Verdict::Holds) => (true, true, JsValue::NULL),
                Ok(Verdict::NotApplicable(why)) => (true, false, JsValue::from_str(&why)),
                Err(v) => (false, true, JsValue::from_str(&v.message)),
            };
            results.push(&object(&[
                ("property", JsValue::from_str(property)),
                ("ok", JsValue::from_bool(ok)),
                ("applicable", JsValue::from_bool(applicable)),
                ("message", message),
            ])?);
        }
        Ok(results.into())
    });
    super::promises::promise_of(run)
}

/// How an `invoke` shares its key: exclusive unless it gives a `limit` (a semaphore's permits,
/// `weight` of them, default 1) or `shared` without a limit (a read lock: no limit).
fn holding(weight: Option<u64>, limit: Option<u64>, shared: bool) -> Result<Holding, &'static str> {
    if limit.is_none() && !shared {
        return match weight {
            None => Ok(Holding::Exclusive),
            Some(_) => Err("weight needs a limit or shared: true"),
        };
    }
    let weight = weight.unwrap_or(1);
    let limit = limit.unwrap_or(u64::MAX);
    if weight == 0 || weight > limit {
        return Err("weight must be from 1 to the limit");
    }
    Ok(Holding::Shared { weight, limit })
}

/// Reads one history event: `{ client, key, owner, type, op, t0, t1, ttlMs, immediate, weight,
/// limit, shared, fence, accepted, persistent, keys }`, times in ms (fractions kept to the µs).
fn event(value: &JsValue, index: u32) -> Result<Event, JsValue> {
    if !value.is_object() {
        return Err(type_error(format!("history[{index}] must be an object")));
    }
    let get = |name: &str| Reflect::get(value, &JsValue::from_str(name));
    let bad = |what: &str| type_error(format!("history[{index}].{what}"));
    let text = |name: &str| -> Result<String, JsValue> {
        let v = get(name)?;
        if v.is_undefined() || v.is_null() {
            return Ok(String::new());
        }
        v.as_string()
            .ok_or_else(|| bad(&format!("{name} must be a string")))
    };
    let whole = |name: &str| -> Result<Option<u64>, JsValue> {
        let v = get(name)?;
        if v.is_undefined() || v.is_null() {
            return Ok(None);
        }
        match v.as_f64() {
            Some(n) if (0.0..=9_007_199_254_740_991.0).contains(&n) && n.fract() == 0.0 => {
                Ok(Some(n as u64))
            }
            _ => Err(bad(&format!(
                "{name} must be a whole number from 0 to 2^53 - 1"
            ))),
        }
    };
    let micros = |name: &str| -> Result<Option<f64>, JsValue> {
        let v = get(name)?;
        if v.is_undefined() {
            return Ok(None);
        }
        match v.as_f64() {
            Some(n) if n.is_finite() && n.abs() < 1e15 => Ok(Some(n * 1000.0)),
            _ => Err(bad(&format!("{name} must be a finite time in ms"))),
        }
    };
    let t0 = micros("t0")?.ok_or_else(|| bad("t0 is required"))?;
    let t1 = micros("t1")?.unwrap_or(t0);
    let at = Stamp::new(t0.floor() as Micros, t1.ceil() as Micros);
    let op = match text("op")?.as_str() {
        "acquire" | "" => Op::Acquire,
        "release" => Op::Release,
        "extend" => Op::Extend,
        "campaign" => Op::Campaign,
        _ => {
            return Err(bad(
                "op must be \"acquire\", \"release\", \"extend\" or \"campaign\"",
            ))
        }
    };
    let flag = |name: &str| -> Result<bool, JsValue> { Ok(get(name)?.is_truthy()) };
    let kind = match text("type")?.as_str() {
        "invoke" => EventKind::Invoke {
            op,
            ttl_ms: whole("ttlMs")?.unwrap_or(0),
            immediate: flag("immediate")?,
            holding: holding(whole("weight")?, whole("limit")?, flag("shared")?).map_err(&bad)?,
        },
        "ok" => EventKind::Ok {
            op,
            fence: whole("fence")?,
        },
        "fail" => EventKind::Fail { op },
        "info" => EventKind::Info { op },
        "enter" => EventKind::Enter,
        "exit" => EventKind::Exit,
        "expired" => EventKind::ExpiryObserved,
        "write" => EventKind::FencedWrite {
            fence: whole("fence")?.ok_or_else(|| bad("fence is required for a write"))?,
            accepted: flag("accepted")?,
        },
        "restart" => EventKind::StoreRestart {
            persistent: flag("persistent")?,
        },
        "set" => EventKind::AcquireSet {
            keys: set_keys(&get("keys")?).map_err(&bad)?,
        },
        "leader" => EventKind::LeaderObserved {
            fence: whole("fence")?,
        },
        _ => {
            return Err(bad(
                "type must be one of invoke, ok, fail, info, enter, exit, expired, write, restart, set, leader",
            ))
        }
    };
    Ok(Event {
        client: whole("client")?.unwrap_or(0),
        key: text("key")?,
        owner: text("owner")?,
        at,
        kind,
    })
}

/// A `set` event's `keys`: a non-empty array of strings.
fn set_keys(value: &JsValue) -> Result<Vec<String>, &'static str> {
    if !Array::is_array(value) {
        return Err("keys must be an array of strings for a set");
    }
    let keys: Option<Vec<String>> = Array::from(value).iter().map(|k| k.as_string()).collect();
    match keys {
        Some(keys) if !keys.is_empty() => Ok(keys),
        _ => Err("keys must be an array of strings for a set"),
    }
}

fn violations_to_js(list: &[Violation]) -> Result<Array, JsValue> {
    let out = Array::new();
    for v in list {
        let events = Array::new();
        for &e in &v.events {
            events.push(&JsValue::from(e as u32));
        }
        out.push(&object(&[
            ("kind", JsValue::from_str(v.kind.name())),
            ("key", JsValue::from_str(&v.key)),
            ("message", JsValue::from_str(&v.message)),
            ("events", events.into()),
        ])?);
    }
    Ok(out)
}

/// Checks a recorded history (an array of events, see `event`) and answers
/// `{ ok, operations, violationCount, violations, lossCount, losses, restarts }`; each violation is
/// `{ kind, key, message, events }` with `events` indexes into the array. Options:
/// `{ leaseToleranceMs = 5, maxReported = 100 }`.
#[wasm_bindgen(js_name = checkHistory)]
pub fn check_history(history: JsValue, opts: JsValue) -> Result<JsValue, JsValue> {
    if !Array::is_array(&history) {
        return Err(type_error(
            "checkHistory: the history must be an array of events",
        ));
    }
    let mut options = CheckOptions::default();
    if !opts.is_undefined() && !opts.is_null() {
        if !opts.is_object() {
            return Err(type_error("checkHistory options must be an object"));
        }
        let tolerance = Reflect::get(&opts, &JsValue::from_str("leaseToleranceMs"))?;
        if !tolerance.is_undefined() {
            match tolerance.as_f64() {
                Some(ms) if ms.is_finite() && (0.0..=3_600_000.0).contains(&ms) => {
                    options.lease_tolerance_us = (ms * 1000.0).ceil() as Micros;
                }
                _ => {
                    return Err(js_sys::RangeError::new(
                        "checkHistory option leaseToleranceMs must be a number from 0 to 3600000",
                    )
                    .into())
                }
            }
        }
        let cap = Reflect::get(&opts, &JsValue::from_str("maxReported"))?;
        if !cap.is_undefined() {
            match cap.as_f64() {
                Some(n) if n.is_finite() && (0.0..=1_000_000.0).contains(&n) => {
                    options.max_reported = n as usize;
                }
                _ => {
                    return Err(js_sys::RangeError::new(
                        "checkHistory option maxReported must be a number from 0 to 1000000",
                    )
                    .into())
                }
            }
        }
    }
    let history = Array::from(&history);
    let mut events = Vec::with_capacity(history.length() as usize);
    for (i, value) in history.iter().enumerate() {
        events.push(event(&value, i as u32)?);
    }
    let report = check(&events, &options);
    object(&[
        ("ok", JsValue::from_bool(report.ok())),
        ("operations", JsValue::from(report.operations as u32)),
        (
            "violationCount",
            JsValue::from(report.violation_count as u32),
        ),
        ("violations", violations_to_js(&report.violations)?.into()),
        ("losses", violations_to_js(&report.losses)?.into()),
        ("lossCount", JsValue::from(report.loss_count as u32)),
        ("restarts", JsValue::from(report.restarts as u32)),
    ])
}
