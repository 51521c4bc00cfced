//! The JS face's entry and the store it binds: `__keelApi` builds the package's exports (the
//! JS face, entry `src/js/api.js`) over this module's exports; every JS file of the face is
//! named here, which is what has wasm-bindgen ship it; `setLockStore`/`getLockStore` keep the
//! current store, and the few checks the face asks of the core (`lock()`'s arguments, a
//! restored lock's text).

use alloc::rc::Rc;
use core::cell::RefCell;

use wasm_bindgen::prelude::*;

use super::convert::{key, ttl, type_error};
use super::memory;
use super::store::{Backend, JsLockStore};
use crate::input::Ttl;
use crate::serialized::SerializedLock;

/// The current store: the exact object the user set (for `getLockStore`) and how to drive it.
struct Current {
    object: JsValue,
    backend: Backend,
}

per_thread! {
    // Created on first use, not at module load: nothing random or stateful runs at import.
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

pub(crate) fn backend_for(store: JsValue) -> Result<Backend, JsValue> {
    match memory::recognise(&store) {
        Some(m) => Ok(Backend::Memory(m)),
        None => Ok(Backend::Js(Rc::new(JsLockStore::new(store)?))),
    }
}

fn with_current<T>(f: impl FnOnce(&Current) -> T) -> T {
    CURRENT.with(|slot| {
        let mut slot = slot.borrow_mut();
        let current = slot.get_or_insert_with(|| {
            let (object, store) = memory::fresh();
            Current {
                object,
                backend: Backend::Memory(store),
            }
        });
        f(current)
    })
}

/// The backend `lock()` binds to now.
pub(crate) fn current_backend() -> Backend {
    with_current(|c| c.backend.clone())
}

#[wasm_bindgen(module = "/src/js/api.js")]
extern "C" {
    #[wasm_bindgen(js_name = api)]
    fn js_api(glue: &JsValue) -> JsValue;
}

// Every JS file of the JS face (src/js/*.js). wasm-bindgen ships a JS file beside its glue only
// when Rust imports from it, and most of these are imported by other JS files alone, so each is
// named here, as a type nothing uses: that is what has it shipped. (Here, beside the entry's
// import: a module with nothing but these could be left out of a build's link, and the list with
// it.) `scripts/node-glue.mjs` inlines them all into the Node glue.
macro_rules! ship {
    ($($name:ident: $path:literal,)*) => {
        $(
            #[wasm_bindgen(module = $path)]
            extern "C" {
                #[allow(dead_code)]
                type $name;
            }
        )*
    };
}

ship! {
    ApiJs: "/src/js/api.js",
    LeadersJs: "/src/js/leaders.js",
    HandlesJs: "/src/js/handles.js",
    MultiJs: "/src/js/multi.js",
    OneStepJs: "/src/js/one-step.js",
    LockJs: "/src/js/lock.js",
    OverStoreJs: "/src/js/over-store.js",
    WatcherJs: "/src/js/watcher.js",
    MemoryStoreJs: "/src/js/memory-store.js",
    InspectJs: "/src/js/inspect.js",
    CallsJs: "/src/js/calls.js",
    WaitersJs: "/src/js/waiters.js",
    BindingJs: "/src/js/binding.js",
    CoreJs: "/src/js/core.js",
    OptionsJs: "/src/js/options.js",
    EventsJs: "/src/js/events.js",
    HoldingJs: "/src/js/holding.js",
    ErrorsJs: "/src/js/errors.js",
    PromisesJs: "/src/js/promises.js",
    ProtocolJs: "/src/js/protocol.js",
    KeySetJs: "/src/js/key-set.js",
}

/// The API the package exports (`lock`, `semaphore`, `campaign`, `setLockStore`, `Lock`,
/// `MemoryLockStore`, the error classes, …), as `api()` in `src/js/api.js` builds it over this
/// module's exports (`glue`), once per instance.
#[wasm_bindgen(js_name = __keelApi, skip_typescript)]
pub fn keel_api(glue: JsValue) -> JsValue {
    js_api(&glue)
}

/// The error `lock(key, ttlMs)` throws for these arguments, or `undefined` when they are good.
#[wasm_bindgen(js_name = __kLockError, skip_typescript)]
pub fn lock_error(key_value: JsValue, ttl_ms: JsValue) -> JsValue {
    match key(&key_value).and_then(|_| ttl(&ttl_ms, Ttl::default())) {
        Ok(_) => JsValue::UNDEFINED,
        Err(error) => error,
    }
}

/// The `TypeError` `restoreLock(value)` throws for a value that is not a string.
#[wasm_bindgen(js_name = __kNotSerialized, skip_typescript)]
pub fn not_serialized() -> JsValue {
    type_error("restoreLock() needs the string that serialize() returned")
}

/// What `restoreLock(text)` restores. Every way a string can be wrong — format, version, or a
/// field that fails validation — is the same mistake from the caller's side: this is not what
/// serialize() returned.
pub(super) fn parse_serialized(text: &str) -> Result<SerializedLock, JsValue> {
    SerializedLock::parse(text).map_err(|e| {
        type_error(
            [
                "restoreLock: not a usable serialized keel-lock: ",
                &e.message(),
            ]
            .concat(),
        )
    })
}

/// Makes `store` the store that `lock()` and `restoreLock()` use from now on.
#[wasm_bindgen(js_name = setLockStore)]
pub fn set_lock_store(store: JsValue) -> Result<(), JsValue> {
    let backend = backend_for(store.clone())?;
    CURRENT.with(|slot| {
        *slot.borrow_mut() = Some(Current {
            object: store,
            backend,
        })
    });
    Ok(())
}

/// The store `lock()` uses: the very object passed to `setLockStore`, or the default
/// `MemoryLockStore`.
#[wasm_bindgen(js_name = getLockStore)]
pub fn get_lock_store() -> JsValue {
    with_current(|c| c.object.clone())
}
