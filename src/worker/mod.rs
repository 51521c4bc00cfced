//! Cloudflare Workers: a lock store that coordinates across isolates and machines, on Durable
//! Objects (feature `workerd`, wasm32 only; with or without std).
//!
//! * [`LockDurableObjectCore`] is the Durable Object's logic (workerd instantiates the JS class
//!   `LockDurableObject`, which delegates to it). It keeps the rows of the keys routed to it in
//!   its SQLite storage (`keel_locks(key, owner, expires_at)`), judges expiry by its own clock,
//!   and deletes expired rows from an alarm kept at or before the earliest expiry. Its handlers
//!   are thin: decode and validate the arguments ([`crate::Key`], [`crate::OwnerToken`],
//!   [`crate::Ttl`]), read the row, ask [`crate::rows`] what to do, write the answer.
//! * [`DurableObjectLockStore`] is the [`crate::LockStore`] a Worker builds from its namespace
//!   binding. It sends each key to its own object (`idFromName(key)`), one JS RPC call per
//!   store operation.
//!
//! * [`WorkersRuntime`] is the clock and timer a [`crate::Lock`] needs in a Worker. With the
//!   `worker` feature (workers-rs), keel-lock's errors convert into `worker::Error`, so `?` works
//!   in a workers-rs handler, and the store is made from a workers-rs `Env` or namespace.
//!
//! Everything here talks to workerd through wasm-bindgen declarations of its own (the storage
//! calls are a handful), not through workers-rs: its `worker` crate needs std, and std's panic
//! machinery and `core::fmt` were most of the difference between an 80 KB and a 65 KB gzip
//! Workers `.wasm` (`docs/wasm-size.md`).
//!
//! JS RPC needs the class workerd instantiates to `extends DurableObject` (from
//! `cloudflare:workers`), which a wasm-bindgen class cannot do; the npm package's workerd entry
//! exports a small JS `LockDurableObject` that delegates to this one. A workers-rs Worker adds the same class to its entry module; see
//! the crate-level docs and `examples/workers-rs`.

#[cfg(feature = "worker")]
mod error;
mod object;
mod store;

pub use object::LockDurableObjectCore;
pub use store::{
    DurableObjectLock, DurableObjectLockStore, DurableObjectMultiLock, JsDurableObjectLockStore,
};

/// The Workers clock and timer for a [`crate::Lock`]: `Date.now()` and `setTimeout`. In workerd
/// `Date.now()` advances only across I/O, which is all a lock needs: its waits are timers and
/// its store calls are I/O. The Durable Object's own clock decides expiry.
pub use crate::js::JsRuntime as WorkersRuntime;

// Value checks and error shapes are the JS bindings' own: one set of rules for every entry point.
pub(crate) use crate::js::convert::{describe, key, type_error};

/// `future` as a JS promise, through the JS bindings' one [`crate::js::promises::promise_of`]
/// (boxed, so its glue is in the wasm once rather than once per future type).
pub(crate) fn promise(
    future: impl core::future::Future<Output = Result<wasm_bindgen::JsValue, wasm_bindgen::JsValue>>
        + 'static,
) -> js_sys::Promise {
    crate::js::promises::promise_of(alloc::boxed::Box::pin(future))
}
