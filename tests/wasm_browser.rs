//! wasm-bindgen tests of the JS bindings, run in headless browsers:
//! `WASM_BINDGEN_USE_BROWSER=1 wasm-pack test --headless --chrome|--firefox --features js -- --test wasm_browser`
//! (see `scripts/test.d/20-wasm.sh`). The test bodies live in `tests/wasm/bindings.rs`, shared
//! with `tests/wasm_node.rs`. Native `cargo test` compiles this file to an empty crate.
#![cfg(all(target_arch = "wasm32", feature = "js"))]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "wasm/bindings.rs"]
mod bindings;

use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

/// Guards against the runner quietly picking another environment: a page with a document, and
/// Web Crypto on `globalThis` (where owner tokens come from).
#[wasm_bindgen_test]
fn runs_in_a_browser() {
    let global: JsValue = js_sys::global().into();
    let get = |target: &JsValue, name: &str| {
        js_sys::Reflect::get(target, &name.into()).unwrap_or(JsValue::UNDEFINED)
    };
    assert!(
        get(&global, "document").is_object(),
        "no document: not a browser page"
    );
    assert!(
        get(&global, "process").is_undefined(),
        "process is defined: this looks like Node"
    );
    let crypto = get(&global, "crypto");
    assert!(get(&crypto, "getRandomValues").is_function());
    let agent = get(&get(&global, "navigator"), "userAgent");
    wasm_bindgen_test::console_log!("user agent: {}", agent.as_string().unwrap_or_default());
}
