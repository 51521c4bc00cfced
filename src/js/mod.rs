//! wasm-bindgen bindings: the Keel lock API for JavaScript. Thin by design — decode JS values
//! into validated core types, call the core, encode the answer. Nothing here may panic on input:
//! a panic traps the wasm instance and poisons every lock in the isolate, so every bad value
//! becomes a `TypeError`, `RangeError` or `LockNotHeldError`.

mod abort;
mod api;
pub(crate) mod convert;
mod handle;
mod ids;
mod lock;
mod memory;
mod operations;
pub(crate) mod promises;
mod runtime;
pub(crate) mod store;
#[cfg(feature = "testing")]
mod testing;
mod watching;

pub use api::{get_lock_store, set_lock_store};
pub use memory::{memory_call, JsMemoryLockStore};
pub use runtime::JsRuntime;
pub use store::{Backend, JsLockStore};
#[cfg(feature = "testing")]
pub use testing::check_lock_store;
