//! JS bindings (wasm-bindgen).
