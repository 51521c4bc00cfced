//! Every JS file of the JS face (src/js/*.js). wasm-bindgen ships a JS file beside its glue only
//! when Rust imports from it, and most of these are imported by other JS files alone, so each is
//! named here, as a type nothing uses: that is what has it shipped. `api.js` is the entry
//! (`api.rs`); `scripts/node-glue.mjs` inlines them all into the Node glue.

use wasm_bindgen::prelude::*;

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
}
