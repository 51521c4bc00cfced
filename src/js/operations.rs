//! The rest of a handle's operations on the numeric face (see `handle/`): `extend`,
//! `isLocked`, `getRemainingTime`, `forceRelease`, `serialize` and `restoreLock`. As for a run,
//! the core decides — which hold an extend is about, the bound on every store call, what a
//! store's answer means, when a hold is lost — and JS only makes a JS store's call and hands the
//! answer back. On the memory store each operation is one call into the wasm.

use crate::prelude::*;
use alloc::rc::Rc;
use core::cell::{Cell, RefCell};

use wasm_bindgen::prelude::*;

use super::api::parse_serialized;
use super::convert::{bad_operation, input_to_js, method_name, operation, to_js, type_error};
use super::handle::{
    call_step, code_with_arg, insert, lock_of, number_or_failed, set_extend, text, StoreBinding,
};
use super::ids::{id_map, IdMap};
use super::lock::CoreLock;
use super::protocol::*;
use super::runtime::JsRuntime;
use super::store::{answers, Backend};
use crate::error::{Error, HoldOperation, Operation};
use crate::input::{Key, Ttl};
use crate::lock::Lock;
use crate::runtime::Runtime;
use crate::store::LockStore;
use crate::token::OwnerToken;

/// An extend a JS store is answering: what the answer is recorded against.
struct Extending {
    lock: Rc<CoreLock>,
    owner: OwnerToken,
    sent: u64,
    ttl: Ttl,
}

per_thread! {
    /// Extends in flight over a JS store, by extend id. Kept apart from the handle's slot: the
    /// answer belongs to the core lock, which outlives a slot let go of meanwhile.
    static EXTENDING: RefCell<IdMap<Extending>> = const { RefCell::new(id_map()) };
    static NEXT_EXTEND_ID: Cell<u32> = const { Cell::new(0) };
}

/// The TTL `extend(ttlMs)` asks for: the lock's own when not `given`.
fn extend_ttl(lock: &CoreLock, ttl: f64, given: bool) -> Result<Ttl, JsValue> {
    match given {
        true => Ttl::from_f64(ttl).map_err(input_to_js),
        false => Ok(lock.ttl()),
    }
}

/// `extend(ttlMs)` on the handle's hold (`ttl` is used when `given`; it is a number — JS
/// reports any other value with [`not_a_number`]). On the memory store: [`EXTENDED`], or
/// [`FAILED`] with a `LockNotHeldError` (refused: the hold is now known lost) or the TTL's
/// `RangeError`. On a JS store: [`CALL`] — JS calls `extend(key, owner, ttl)` with the owner
/// and TTL the step carries (`OUT`: the TTL is its fourth number), bounded by `arg` ms, and
/// hands the answer to [`extended`] with the extend id (`OUT_EXTEND_ID`).
#[wasm_bindgen(js_name = __kExtend, skip_typescript)]
pub fn extend(id: f64, ttl: f64, given: bool) -> f64 {
    number_or_failed((|| {
        let lock = lock_of(id)?;
        let ttl = extend_ttl(&lock, ttl, given)?;
        extend_lock(lock, ttl)
    })())
}

/// [`extend`] of `lock`'s hold by `ttl`: [`EXTENDED`], or (a JS store) [`CALL`].
pub(super) fn extend_lock(lock: Rc<CoreLock>, ttl: Ttl) -> Result<f64, JsValue> {
    let sent = JsRuntime.monotonic_ms();
    let owner = lock.extending(sent).map_err(to_js)?;
    match lock.store() {
        Backend::Memory(m) => {
            let extended = m.extend_sync(lock.key(), &owner, ttl);
            lock.extended(&owner, sent, ttl, extended).map_err(to_js)?;
            Ok(EXTENDED)
        }
        Backend::Js(_) => {
            let extend_id = NEXT_EXTEND_ID.with(|n| {
                let t = n.get();
                n.set(t.wrapping_add(1));
                t
            });
            let bound = lock.ttl().as_ms();
            let code = call_step(bound, &owner);
            set_extend(ttl.as_ms() as f64, f64::from(extend_id));
            let extending = Extending {
                lock,
                owner,
                sent,
                ttl,
            };
            EXTENDING.with(|e| e.borrow_mut().insert(extend_id, extending));
            Ok(code)
        }
    }
}

/// `extend(ttlMs)` on a handle with no slot, which holds nothing: the TTL's error if it is
/// wrong, else the `LockNotHeldError`.
#[wasm_bindgen(js_name = __kExtendIdle, skip_typescript)]
pub fn extend_idle(key: &str, ttl: f64, given: bool) -> JsValue {
    if given {
        if let Err(error) = Ttl::from_f64(ttl) {
            return input_to_js(error);
        }
    }
    not_held(key, HoldOperation::Extend)
}

/// The `LockNotHeldError` for `attempted` ([`NOT_HELD_EXTEND`] or [`NOT_HELD_SERIALIZE`]) on `key`.
#[wasm_bindgen(js_name = __kNotHeld, skip_typescript)]
pub fn not_held_error(key: &str, attempted: u32) -> JsValue {
    match attempted {
        NOT_HELD_EXTEND => not_held(key, HoldOperation::Extend),
        NOT_HELD_SERIALIZE => not_held(key, HoldOperation::Serialize),
        _ => type_error("keel-lock: no such hold operation (internal error)"),
    }
}

pub(super) fn not_held(key: &str, attempted: HoldOperation) -> JsValue {
    to_js(Error::NotHeld {
        key: key.to_owned(),
        attempted,
    })
}

/// The `TypeError` for an argument `what` that should be a number and is `value`.
#[wasm_bindgen(js_name = __kNotANumber, skip_typescript)]
pub fn not_a_number(what: &str, value: JsValue) -> JsValue {
    super::convert::not_a_number(what, &value)
}

/// A JS store's answer to the extend with `extend_id` — `answer` is what it resolved, `undefined`
/// with `unanswered` when its bound passed first — recorded against the hold it was about:
/// [`EXTENDED`], or [`FAILED`] with the error to reject with (`LockNotHeldError` when refused,
/// `LockStoreTimeoutError`, or the `TypeError` for an answer that is not a boolean).
#[wasm_bindgen(js_name = __kExtended, skip_typescript)]
pub fn extended(extend_id: u32, answer: JsValue, unanswered: bool) -> f64 {
    number_or_failed((|| {
        let Some(e) = EXTENDING.with(|x| x.borrow_mut().remove(&extend_id)) else {
            return Err(type_error("keel-lock: no such extend (internal error)"));
        };
        if unanswered {
            let after = e.lock.ttl().as_ms();
            return Err(to_js(e.lock.store_timeout(Operation::Extend, after)));
        }
        let extended = answers::boolean("lock store's extend()", &answer)?;
        e.lock
            .extended(&e.owner, e.sent, e.ttl, extended)
            .map_err(to_js)?;
        Ok(EXTENDED)
    })())
}

/// The extend with `extend_id` failed in the store (it threw or rejected): forget it.
#[wasm_bindgen(js_name = __kExtendFailed, skip_typescript)]
pub fn extend_failed(extend_id: u32) {
    EXTENDING.with(|x| x.borrow_mut().remove(&extend_id));
}

/// `isLocked()` ([`OP_IS_LOCKED`]), `getRemainingTime()` ([`OP_REMAINING_TIME`]) or
/// `forceRelease()` ([`OP_FORCE_RELEASE`]) on `key` in `store`, for a handle whose TTL is `ttl` ms
/// (the bound of a JS store's call). On the memory store the answer: [`YES`]/[`NO`], or the
/// remaining ms or [`NOBODY`]. On a JS store: [`CALL`] (bounded by `arg`
/// ms; JS hands the answer to [`inspected`]), or [`FAILED`] when the store cannot
/// force-release.
#[wasm_bindgen(js_name = __kInspect, skip_typescript)]
pub fn inspect(key: &str, store: &StoreBinding, op: u32, ttl: f64) -> f64 {
    number_or_failed((|| {
        let op = operation(op).ok_or_else(bad_operation)?;
        match store.backend() {
            Backend::Memory(m) => {
                let key = Key::new(key).map_err(input_to_js)?;
                Ok(match op {
                    Operation::IsLocked => yes_no(m.remaining_time_sync(&key).is_some()),
                    Operation::RemainingTime => {
                        m.remaining_time_sync(&key).map_or(NOBODY, |ms| ms as f64)
                    }
                    Operation::ForceRelease => yes_no(m.force_release_sync(&key)),
                    _ => return Err(bad_operation()),
                })
            }
            Backend::Js(j) => {
                if op == Operation::ForceRelease && !j.force_releases() {
                    return Err(to_js(Error::<JsValue>::Unsupported {
                        store: j.name(),
                        operation: op,
                    }));
                }
                Ok(code_with_arg(CALL, ttl))
            }
        }
    })())
}

/// A JS store's answer to an inspection (`op` as for [`inspect`]) on `key`, judged by the
/// seam's rules: encoded as [`inspect`] encodes the memory store's, or [`FAILED`] with the
/// `TypeError` for an answer outside the contract, or with the `LockStoreTimeoutError` when
/// `unanswered` within `bound` ms.
#[wasm_bindgen(js_name = __kInspected, skip_typescript)]
pub fn inspected(key: &str, op: u32, answer: JsValue, unanswered: bool, bound: f64) -> f64 {
    number_or_failed((|| {
        let op = operation(op).ok_or_else(bad_operation)?;
        if unanswered {
            return Err(to_js(Error::<JsValue>::StoreTimeout {
                key: key.to_owned(),
                store: "js",
                operation: op,
                after_ms: bound as u64,
            }));
        }
        let method = ["lock store's ", method_name(op), "()"].concat();
        Ok(match op {
            Operation::IsLocked => yes_no(answers::boolean(&method, &answer)?),
            Operation::RemainingTime => {
                answers::remaining_time(&method, &answer)?.map_or(NOBODY, |ms| ms as f64)
            }
            Operation::ForceRelease => yes_no(answers::boolean(&method, &answer)?),
            _ => return Err(bad_operation()),
        })
    })())
}

fn yes_no(answer: bool) -> f64 {
    if answer {
        YES
    } else {
        NO
    }
}

/// `serialize()` of the handle's hold.
#[wasm_bindgen(js_name = __kSerialize, skip_typescript)]
pub fn serialize(id: f64) -> f64 {
    text(lock_of(id).and_then(|lock| lock.serialize().map_err(to_js)))
}

/// `restoreLock(text)` on `store`: a slot for the restored handle, which holds the hold
/// `text` describes; [`FAILED`] with the `TypeError` when `text` is not what `serialize()`
/// wrote. JS reads the key and TTL back with [`key_of`] and [`ttl_of`].
#[wasm_bindgen(js_name = __kRestore, skip_typescript)]
pub fn restore(text: &str, store: &StoreBinding) -> f64 {
    number_or_failed((|| {
        let parsed = parse_serialized(text)?;
        let lock = Lock::restore(parsed, store.backend().clone(), JsRuntime);
        Ok(insert(Rc::new(lock)))
    })())
}

/// The key of slot `id`'s lock.
#[wasm_bindgen(js_name = __kKeyOf, skip_typescript)]
pub fn key_of(id: f64) -> f64 {
    text(lock_of(id).map(|lock| lock.key().as_str().to_owned()))
}

/// The limit of slot `id`'s lock's shared holds, or 0 for a lock.
#[wasm_bindgen(js_name = __kLimitOf, skip_typescript)]
pub fn limit_of(id: f64) -> f64 {
    number_or_failed(lock_of(id).map(|lock| {
        lock.current_holding()
            .share()
            .map_or(0.0, |share| share.limit().into())
    }))
}

/// The TTL in ms of slot `id`'s lock.
#[wasm_bindgen(js_name = __kTtlOf, skip_typescript)]
pub fn ttl_of(id: f64) -> f64 {
    number_or_failed(lock_of(id).map(|lock| lock.ttl().as_ms() as f64))
}
