//! The numeric face of the binding, for the JS `Lock` class (`src/js/lock.js`). A lock handle in
//! JS is a plain object; while it acquires, holds or releases, its core lock lives here in a
//! slot named by a number. Every decision is the core's — the acquisition machine
//! ([`crate::attempt`]), the memory store, the hold's bookkeeping — and what crosses is numbers
//! and the key string: the JS side only awaits the store's promises and keeps the timers
//! ("call the store", "sleep", "done" come back as step codes).
//!
//! The numbers exchanged — step codes, what ending a hold did with the slot, what a step
//! carries besides its code (`OUT`) — are declared in `protocol.rs`. This file is the face
//! itself (how a call answers, `OUT`, the key and TTL check); `slots.rs` keeps the slots,
//! `acquire.rs` steps an acquisition, `queue.rs` a wait in the memory store's queue, and
//! `release.rs` ends a hold.
//!
//! Nothing here may panic on input: ids that name no slot (or a slot since reused) are
//! `TypeError`s, and no borrow is held while JS code (a clock that user code replaced, a
//! store) could run.

use crate::prelude::*;
use alloc::rc::Rc;
use alloc::sync::Arc;
use alloc::task::Wake;
use core::cell::{Cell, RefCell};
use core::task::Waker;

use wasm_bindgen::prelude::*;

use super::lock::CoreLock;
use super::protocol::*;
use super::runtime::JsRuntime;
use super::store::{answers, Backend};
use crate::attempt::{Attempt, Next};
use crate::error::Error;
use crate::grant::Grant;
use crate::input::{AcquireOptions, Key, Ttl};
use crate::js::convert::{input_to_js, to_js, type_error};
use crate::lock::{Lock, TrackedHold};
use crate::memory::queue::{Parked, WaitStep};
use crate::memory::MemoryLockStore;
use crate::runtime::Runtime;
use crate::share::{Holding, Share};
use crate::token::OwnerToken;

mod acquire;
mod queue;
mod release;
mod slots;

// The parts see each other through `use super::*`.
use acquire::*;
use queue::*;
use slots::*;

// What the other operations (operations.rs, watching.rs) drive a slot through.
pub(super) use slots::{insert, lock_of, run_hold_of};

/// The store a handle is bound to, as created by `setLockStore` (or the default).
#[wasm_bindgen(js_name = StoreBinding, skip_typescript)]
pub struct StoreBinding {
    pub(super) backend: Backend,
}

#[wasm_bindgen(js_class = StoreBinding)]
impl StoreBinding {
    /// The built-in memory store: every call answers at once, inside the wasm.
    #[wasm_bindgen(getter)]
    pub fn memory(&self) -> bool {
        matches!(self.backend, Backend::Memory(_))
    }
}

impl StoreBinding {
    pub(crate) fn new(backend: Backend) -> Self {
        StoreBinding { backend }
    }

    pub(in crate::js) fn backend(&self) -> &Backend {
        &self.backend
    }
}

per_thread! {
    /// What a step hands JS besides its code, read by JS straight from wasm memory (no call):
    /// `[arg, owner address, owner length, ttl, extend id]` (the `OUT_*` indices). The owner
    /// is the token the store call a [`CALL`] is about carries, when it is 32 ASCII bytes
    /// (every minted token); otherwise its length is -1 and JS asks [`owner`]. The address is
    /// valid until the next call into the wasm. The last two are an extend's (`operations.rs`),
    /// or a wait's `waitMs` and `pollMs`.
    static OUT: [Cell<f64>; OUT_LEN] = const { [const { Cell::new(0.0) }; OUT_LEN] };
    static ERROR: RefCell<Option<JsValue>> = const { RefCell::new(None) };
    /// The text a call answers (see [`text`]), kept until the next one.
    static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A hot call's answer: its number, or [`FAILED`] with the error kept for [`error`].
pub(in crate::js) fn number_or_failed(answer: Result<f64, JsValue>) -> f64 {
    match answer {
        Ok(value) => value,
        Err(error) => {
            ERROR.with(|e| *e.borrow_mut() = Some(error));
            FAILED
        }
    }
}

/// A call that answers nothing else: 0, or [`FAILED`] with the error kept for [`error`].
pub(in crate::js) fn unit_or_failed(answer: Result<(), JsValue>) -> f64 {
    number_or_failed(answer.map(|()| 0.0))
}

/// The error of the last call that answered [`FAILED`].
#[wasm_bindgen(js_name = __kError, skip_typescript)]
pub fn error() -> JsValue {
    ERROR
        .with(|e| e.borrow_mut().take())
        .unwrap_or_else(|| type_error("keel-lock: no error to report (internal error)"))
}

/// The wasm's memory and the address of the step's numbers (see `OUT`), for JS to read them.
#[wasm_bindgen(js_name = __kOut, skip_typescript)]
pub fn out() -> js_sys::Array {
    let at = OUT.with(|o| o.as_ptr() as usize);
    js_sys::Array::of2(&wasm_bindgen::memory(), &JsValue::from_f64(at as f64))
}

/// Answers `code`, with the value it carries (a bound, a pause, a fence) written where JS reads
/// `arg` (`OUT_ARG`).
pub(in crate::js) fn code_with_arg(code: f64, value: f64) -> f64 {
    OUT.with(|o| o[OUT_ARG].set(value));
    code
}

/// Writes what an extend's [`CALL`] carries besides the owner: its TTL and its extend id.
pub(in crate::js) fn set_extend(ttl: f64, extend_id: f64) {
    OUT.with(|o| {
        o[OUT_TTL].set(ttl);
        o[OUT_EXTEND_ID].set(extend_id);
    });
}

/// Writes what a [`CALL_ACQUIRE_OR_WAIT`] carries besides the owner: `waitMs` and `pollMs`.
pub(in crate::js) fn set_wait(wait_ms: f64, poll_ms: f64) {
    OUT.with(|o| {
        o[OUT_WAIT_MS].set(wait_ms);
        o[OUT_POLL_MS].set(poll_ms);
    });
}

/// Answers [`CALL`], with the bound (`bound_ms`) and the owner token the store call carries
/// written into `OUT`.
pub(in crate::js) fn call_step(bound_ms: u64, owner: &OwnerToken) -> f64 {
    let token = owner.as_str();
    OUT.with(|o| {
        o[OUT_ARG].set(bound_ms as f64);
        if token.len() == MINTED_TOKEN_LEN && token.is_ascii() {
            o[OUT_OWNER_AT].set(token.as_ptr() as usize as f64);
            o[OUT_OWNER_LEN].set(MINTED_TOKEN_LEN as f64);
        } else {
            o[OUT_OWNER_LEN].set(-1.0);
        }
    });
    CALL
}

/// A call's text answer: kept in `TEXT`, its address and UTF-8 length put where a [`CALL`]'s
/// owner goes in `OUT`, for JS to decode from memory; answers the length, or [`FAILED`].
/// (A `String` return would go through wasm-bindgen's shim and a copy into JS-owned memory.)
pub(in crate::js) fn text(answer: Result<String, JsValue>) -> f64 {
    let value = match answer {
        Ok(value) => value,
        Err(error) => return number_or_failed(Err(error)),
    };
    TEXT.with(|t| {
        let mut t = t.borrow_mut();
        *t = value;
        OUT.with(|o| {
            o[OUT_OWNER_AT].set(t.as_ptr() as usize as f64);
            o[OUT_OWNER_LEN].set(t.len() as f64);
        });
        t.len() as f64
    })
}

/// A key and TTL checked as `lock()` checks them; answers the TTL in whole ms. `ttl` is `NaN`
/// for "not given" (a NaN the caller passed never gets here). A key with U+FFFD in it answers
/// [`CHECK_KEY_AS_STRING`]: on the way in, a lone surrogate became U+FFFD, and only the JS string itself tells
/// one from the other (`lock()` then judges it as a value, which refuses lone surrogates) —
/// unless `well_formed`: JS found no lone surrogate in it, so every U+FFFD is the key's own.
#[wasm_bindgen(js_name = __kCheck, skip_typescript)]
pub fn check(key: &str, ttl: f64, well_formed: bool) -> f64 {
    // A byte scan: `str::contains` with a char pattern links a string searcher (9 KB raw).
    const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();
    if !well_formed && key.as_bytes().windows(3).any(|b| b == REPLACEMENT) {
        return CHECK_KEY_AS_STRING;
    }
    number_or_failed(
        Key::check(key)
            .map_err(input_to_js)
            .and_then(|()| Ok(ttl_of(ttl)?.as_ms() as f64)),
    )
}

pub(super) fn ttl_of(ttl: f64) -> Result<Ttl, JsValue> {
    match ttl.is_nan() {
        true => Ok(Ttl::default()),
        false => Ttl::from_f64(ttl).map_err(input_to_js),
    }
}

/// The store `lock()` binds to now.
#[wasm_bindgen(js_name = __kCurrent, skip_typescript)]
pub fn current() -> StoreBinding {
    StoreBinding::new(super::api::current_backend())
}

/// The error of run or acquire options (`run`: `run()`'s, which add `autoExtend`) that JS does
/// not drive itself — `autoExtend` checked first, then `timeout` and `retryDelay`, then
/// `signal` — or `undefined` when they are good.
#[wasm_bindgen(js_name = __kOptionsError, skip_typescript)]
pub fn options_error(options: JsValue, run: bool) -> JsValue {
    let checked = (|| -> Result<(), JsValue> {
        if run && options.is_object() {
            crate::js::convert::keep_alive_option(&get_prop!(&options, "autoExtend")?)?;
        }
        crate::js::convert::acquire_options(&options)?;
        super::abort::check_signal(&options)?;
        Ok(())
    })();
    checked.err().unwrap_or(JsValue::UNDEFINED)
}

/// A semaphore's `limit` as `semaphore(key, limit)` was given it: the limit, or [`FAILED`] with a
/// `TypeError` (not a number) or `RangeError` (not a whole number in `1..=2^32 - 1`).
#[wasm_bindgen(js_name = __kLimit, skip_typescript)]
pub fn limit(value: JsValue) -> f64 {
    number_or_failed(
        crate::js::convert::number_arg(&value, "a semaphore limit")
            .and_then(|n| Share::limit_from_f64(n).map(f64::from).map_err(input_to_js)),
    )
}

/// Makes the slot's next acquire take `permits` (undefined: 1) of `limit`. 0, or [`FAILED`]
/// with the `TypeError`/`RangeError` for `permits` — a `TypeError` for any `permits` given a
/// lock (`limit` 0, any `id`).
#[wasm_bindgen(js_name = __kShare, skip_typescript)]
pub fn share(id: f64, permits: JsValue, limit: f64) -> f64 {
    number_or_failed((|| {
        if limit == 0.0 {
            return Err(type_error(
                "permits is an option of semaphore() handles; a lock takes its key alone",
            ));
        }
        let lock = lock_of(id)?;
        // JS passes the limit __kLimit checked.
        let limit = limit as u32;
        let permits = match permits.is_undefined() {
            true => 1.0,
            false => crate::js::convert::number_arg(&permits, "permits")?,
        };
        let share = Share::from_f64(permits, limit).map_err(input_to_js)?;
        lock.set_holding(Holding::Shared(share));
        Ok(0.0)
    })())
}

/// The `TypeError` for a semaphore or read lock used on a JS store without `acquireShared`.
#[wasm_bindgen(js_name = __kNoShared, skip_typescript)]
pub fn no_shared() -> JsValue {
    to_js(Error::Unsupported {
        store: "js",
        operation: crate::error::Operation::AcquireShared,
    })
}

/// The `TypeError` for a `run(fn)` whose `fn` is `value`, not a function.
#[wasm_bindgen(js_name = __kNotAFunction, skip_typescript)]
pub fn not_a_function(value: JsValue) -> JsValue {
    type_error(
        [
            "run() needs a function, got ",
            &crate::js::convert::describe(&value),
        ]
        .concat(),
    )
}

/// The monotonic clock in whole ms: `now` as JS read it (`performance.now()`, as [`JsRuntime`]
/// reads it), or, for `NaN`, read here.
pub(in crate::js) fn mono(now: f64) -> u64 {
    if now.is_nan() {
        JsRuntime.monotonic_ms()
    } else {
        now as u64
    }
}
