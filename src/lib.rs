//! # keel-lock
//!
//! "Only one of you may do this at a time — across processes, across nodes."
//!
//! A distributed lock whose core is plain Rust: the lock state machine ([`Lock`]), owner
//! tokens ([`OwnerToken`]), TTL and retry logic, the store seam ([`LockStore`]) and the
//! per-process [`MemoryLockStore`]. The core never reads a clock or starts a timer itself; a
//! [`Runtime`] is injected, so the same code runs natively under `cargo test` with virtual time
//! ([`virtual_time`]) and in JavaScript hosts through the `js` feature's wasm-bindgen layer.
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
#![deny(missing_docs)]
#![cfg_attr(
    not(all(feature = "component", target_arch = "wasm32")),
    forbid(unsafe_code)
)]
// The component build's wit-bindgen glue is unsafe; only that generated module may allow it.
#![cfg_attr(all(feature = "component", target_arch = "wasm32"), deny(unsafe_code))]

mod base64url;
pub mod conformance;
pub mod error;
pub mod grant;
pub mod holding;
pub mod input;
pub mod lock;
pub mod memory;
mod race;
pub mod rows;
pub mod runtime;
pub mod serialized;
pub mod store;
pub mod token;
pub mod virtual_time;

#[cfg(all(feature = "component", target_arch = "wasm32"))]
pub mod component;
#[cfg(all(feature = "js", target_arch = "wasm32"))]
pub mod js;
#[cfg(all(feature = "worker", target_arch = "wasm32"))]
pub mod worker;

pub use error::{Error, HoldOperation, InputError, Operation, RandomError};
pub use grant::{Fence, Grant, MAX_FENCE};
pub use holding::{KeepAlive, LossReason, RunContext};
pub use input::{AcquireOptions, Key, Ttl};
pub use lock::Lock;
pub use memory::MemoryLockStore;
pub use runtime::Runtime;
pub use serialized::SerializedLock;
pub use store::{ForceRelease, LockStore, Wait};
pub use token::OwnerToken;
