//! The core lock the JS binding drives: a [`Lock`] over the current store's [`Backend`] and the
//! JS clock. JS's `Lock` class (`src/js/lock.js`) keeps it in a slot (`handle/slots.rs`) while it
//! is in use.

use super::runtime::JsRuntime;
use super::store::Backend;
use crate::lock::Lock;

pub(crate) type CoreLock = Lock<Backend, JsRuntime>;
