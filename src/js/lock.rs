//! The core lock the JS binding drives: a [`Lock`] over the current store's [`Backend`] and the
//! JS clock. JS's `Lock` class (`src/js/api.js`) keeps it in a slot (`handle.rs`) while it is in
//! use.

use wasm_bindgen::prelude::*;

use super::runtime::JsRuntime;
use super::store::Backend;
use crate::lock::Lock;

#[wasm_bindgen(module = "/src/js/holding.js")]
extern "C" {
    #[wasm_bindgen(js_name = unavailableErrorClass)]
    pub(crate) fn lock_unavailable_error_class() -> JsValue;
}

pub(crate) type CoreLock = Lock<Backend, JsRuntime>;
