//! wasm-bindgen tests of the JS bindings, run in Node:
//! `wasm-pack test --node --features js -- --test wasm_node` (see `scripts/test.d/20-wasm.sh`).
//! The test bodies live in `tests/wasm/bindings.rs`, shared with `tests/wasm_browser.rs`.
//! Native `cargo test` compiles this file to an empty crate.
#![cfg(all(target_arch = "wasm32", feature = "js"))]

#[path = "wasm/bindings.rs"]
mod bindings;

use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

/// Guards against the runner quietly picking another environment.
#[wasm_bindgen_test]
fn runs_in_node() {
    let global: JsValue = js_sys::global().into();
    let versions = js_sys::Reflect::get(&global, &"process".into())
        .and_then(|p| js_sys::Reflect::get(&p, &"versions".into()))
        .and_then(|v| js_sys::Reflect::get(&v, &"node".into()))
        .unwrap_or(JsValue::UNDEFINED);
    assert!(
        versions.as_string().is_some(),
        "expected Node (process.versions.node), got {versions:?}"
    );
}
