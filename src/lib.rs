//! # keel-lock
//!
//! "Only one of you may do this at a time — across processes, across nodes."
//!
//! A distributed lock whose core is plain Rust: the lock state machine ([`Lock`]), owner
//! tokens ([`OwnerToken`]), TTL and retry logic, the store seam ([`LockStore`]) and the
//! per-process [`MemoryLockStore`]. The core never reads a clock or starts a timer itself; a
//! [`Runtime`] is injected, so the same code runs natively under `cargo test` with virtual time
//! (`virtual_time`) and in JavaScript hosts through the `js` feature's wasm-bindgen layer.
//!
//! The `testing` feature adds the test tooling: `virtual_time` (a deterministic clock and
//! executor) and `conformance` (the [`LockStore`] contract as properties, to check a store).
//! The example runs on virtual time, so it needs that feature:
//!
//! ```
//! use keel_lock::{AcquireOptions, Key, Lock, MemoryLockStore, Ttl};
//! use keel_lock::virtual_time::VirtualRuntime;
//!
//! let rt = VirtualRuntime::new();
//! let store = MemoryLockStore::new(rt.clone());
//! let key = Key::new("invoice:42").unwrap();
//! let lock = Lock::new(key, Ttl::default(), &store, rt.clone());
//! let ran = rt.block_on(lock.run(AcquireOptions::default(), |_| async { "charged" }));
//! assert_eq!(ran.unwrap(), Some("charged"));
//! ```
//!
//! ## Cloudflare Workers in Rust (workers-rs)
//!
//! The `workerd` feature (wasm32 only) adds the `worker` module: `LockDurableObjectCore`, the
//! Durable Object's logic (served by a JS `LockDurableObject` class, which RPC needs), keeping one
//! SQLite row per held key and judging expiry by its own clock, and
//! `DurableObjectLockStore`, the store that sends each key's operations to its object over JS
//! RPC. Both are written on wasm-bindgen alone and build without std. The `worker` feature adds
//! the workers-rs side: the store made from a workers-rs `Env` or `ObjectNamespace`, and
//! keel-lock's errors converted into `worker::Error`, so `?` works in a handler.
//! `WorkersRuntime` is the clock and timer a lock needs there.
//!
//! ```toml
//! [dependencies]
//! keel-lock = { version = "0.1", features = ["worker"] }
//! worker = "0.8.7"
//! ```
//!
//! ```no_run
//! # #[cfg(all(feature = "worker", target_arch = "wasm32"))]
//! # mod example {
//! use keel_lock::worker::DurableObjectLockStore;
//! use keel_lock::AcquireOptions;
//! use worker::{event, Context, Env, Request, Response, Result};
//!
//! #[event(fetch)]
//! async fn fetch(_req: Request, env: Env, _ctx: Context) -> Result<Response> {
//!     let lock = DurableObjectLockStore::from_env(&env, "LOCKS")?.lock("invoice:42", 30_000)?;
//!     match lock.run(AcquireOptions::immediately(), |_| charge_invoice(42)).await? {
//!         Some(()) => Response::ok("charged"),
//!         None => Response::error("someone else is charging invoice 42", 409),
//!     }
//! }
//! # async fn charge_invoice(_id: u32) {}
//! # }
//! ```
//!
//! `wrangler.toml` binds `LOCKS` to the class `LockDurableObject` and lists it under
//! `new_sqlite_classes` in a migration. workerd delivers JS RPC only to a class that
//! `extends DurableObject`, which wasm-bindgen cannot generate, so the Worker's entry module —
//! a few lines of JS next to what `worker-build` produces — declares that class and forwards
//! each call to the Rust object, exported to JS as `LockDurableObjectCore`:
//!
//! ```js
//! import { DurableObject } from "cloudflare:workers";
//! import worker, { LockDurableObjectCore } from "./build/index.js";
//! export default worker;
//! export class LockDurableObject extends DurableObject {
//!   #core;
//!   constructor(ctx, env) { super(ctx, env); this.#core = new LockDurableObjectCore(ctx, env); }
//!   acquire(key, owner, ttlMs, metadata) {
//!     return this.#core.acquire(key, owner, ttlMs, metadata);
//!   }
//!   acquireOrWait(key, owner, ttlMs, waitMs, metadata) {
//!     return this.#core.acquireOrWait(key, owner, ttlMs, waitMs, metadata);
//!   }
//!   acquireShared(key, owner, ttlMs, weight, limit, metadata) {
//!     return this.#core.acquireShared(key, owner, ttlMs, weight, limit, metadata);
//!   }
//!   acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, metadata) {
//!     return this.#core.acquireSharedOrWait(key, owner, ttlMs, weight, limit, waitMs, metadata);
//!   }
//!   withdraw(key, owner) { return this.#core.withdraw(key, owner); }
//!   release(key, owner) { return this.#core.release(key, owner); }
//!   forceRelease(key) { return this.#core.forceRelease(key); }
//!   extend(key, owner, ttlMs) { return this.#core.extend(key, owner, ttlMs); }
//!   isLocked(key) { return this.#core.isLocked(key); }
//!   remainingTime(key) { return this.#core.remainingTime(key); }
//!   inspect(key) { return this.#core.inspect(key); }
//!   snapshot() { return this.#core.snapshot(); }
//!   alarm() { return this.#core.alarm(); }
//! }
//! ```
//!
//! The class and its rows are the same as the npm package's, so JS and Rust Workers bound to one
//! namespace exclude each other. A complete Worker, its `wrangler.toml` and its tests in workerd:
//! `examples/workers-rs` in the repository.
//!
//! ## Without std
//!
//! With default features off (no `std`), the crate is `no_std` + `alloc` and builds for wasm32
//! without threads only. The npm package's wasm builds (Node/browser with `js`, workerd with
//! `workerd`) are built so, with `talc` as the allocator and `panic-trap` as the panic handler,
//! to leave std's panic machinery out.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![warn(rustdoc::broken_intra_doc_links)]
#![cfg_attr(
    all(
        feature = "std",
        not(all(feature = "component", target_arch = "wasm32"))
    ),
    forbid(unsafe_code)
)]
// The component build's wit-bindgen glue is unsafe, and so is the single-threaded `static`
// behind `per_thread!` without std; only those modules may allow it.
#![cfg_attr(
    any(
        not(feature = "std"),
        all(feature = "component", target_arch = "wasm32")
    ),
    deny(unsafe_code)
)]

extern crate alloc;

#[macro_use]
mod per_thread;
mod prelude;

pub mod attempt;
mod base64url;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod error;
#[cfg(feature = "std")]
pub mod events;
mod float;
pub mod grant;
#[cfg(feature = "testing")]
pub mod history;
pub mod holding;
pub mod input;
pub mod inspect;
pub mod lock;
pub mod memory;
mod race;
pub mod rows;
pub mod runtime;
pub mod serialized;
pub mod share;
pub mod store;
pub mod token;
#[cfg(feature = "testing")]
pub mod virtual_time;

#[cfg(all(feature = "component", target_arch = "wasm32"))]
pub mod component;
// The component's key-value value format is text handling alone, so its tests also run in
// native test builds, where nothing else uses it.
#[cfg(all(test, feature = "std", not(target_arch = "wasm32")))]
#[allow(dead_code)]
#[path = "component/value.rs"]
mod component_value;
#[cfg(all(feature = "js", target_arch = "wasm32"))]
pub mod js;
#[cfg(all(feature = "workerd", target_arch = "wasm32"))]
pub mod worker;

/// The npm package's allocator (feature `talc`): std's dlmalloc is ~7 KB of code, talc a
/// fraction of that. Single-threaded wasm only (no `atomics`).
#[cfg(all(
    feature = "talc",
    target_family = "wasm",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

/// The panic handler of a `no_std` wasm build (feature `panic-trap`): a trap, with nothing
/// formatted. A panic here is a bug (bad input gets an error, never a panic), and it ends in the
/// same trap with std, whose handler first formats the message and its location only to write
/// them to wasm32-unknown-unknown's stderr, which discards them.
#[cfg(all(feature = "panic-trap", not(feature = "std"), target_arch = "wasm32"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

pub use error::{Error, HoldOperation, InputError, Operation, RandomError};
#[cfg(feature = "std")]
pub use events::{LockEvent, LockEventKind, LockEventListener};
pub use grant::{Fence, Grant, MAX_FENCE};
pub use holding::{HoldState, KeepAlive, LossReason, RunContext, Watch, WatchStep};
pub use input::{AcquireOptions, Key, Ttl};
pub use inspect::{HolderInfo, LockInfo};
pub use lock::{Lock, MultiLock, MAX_KEYS};
pub use memory::MemoryLockStore;
pub use runtime::Runtime;
pub use serialized::SerializedLock;
pub use share::{Holding, Share, SharedGrant};
pub use store::{ForceRelease, LockStore, ManyGrant, Wait};
pub use token::{Metadata, OwnerToken};
