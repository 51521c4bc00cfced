//! wasm-bindgen bindings: the Keel lock API for JavaScript. Thin by design — decode JS values
//! into validated core types, call the core, encode the answer. Nothing here may panic on input:
//! a panic traps the wasm instance and poisons every lock in the isolate, so every bad value
//! becomes a `TypeError`, `RangeError` or `LockNotHeldError`.

// Defined before the modules, so that each of them can use it.
/// `Reflect.get(target, "name")` for a literal name whose JS string is made once per isolate,
/// not decoded from wasm memory on every call.
macro_rules! get_prop {
    ($target:expr, $name:literal) => {{
        per_thread! {
            static NAME: ::wasm_bindgen::JsValue = ::wasm_bindgen::JsValue::from_str($name);
        }
        NAME.with(|name| ::js_sys::Reflect::get($target, name))
    }};
}

mod abort;
mod api;
pub(crate) mod convert;
mod handle;
mod ids;
mod lock;
mod memory;
mod operations;
pub(crate) mod promises;
pub(crate) mod protocol;
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
