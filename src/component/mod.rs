//! keel-lock as a WebAssembly component (`wasm32-wasip2`, feature `component`): the world
//! `keel:lock/keel-lock@0.1.0` in `wit/`. Thin by design — decode the WIT values into validated
//! core types, call the core [`Lock`], encode the answer. Nothing here may trap on input: every
//! bad value becomes `lock-error.invalid-input`.
//!
//! The store is the host's `wasi:keyvalue@0.2.0-draft2` bucket ([`KeyValueLockStore`]), the
//! clock the host's `wasi:clocks` ([`WasiRuntime`]). Build with
//! `cargo build --target wasm32-wasip2 --release --features component`. With the `testing`
//! feature the component is the `keel-lock-testing` world instead: the same lock API plus the
//! `conformance` export ([`testing`]). Several keys held as one (`multi`) are a core
//! [`crate::MultiLock`] in [`multi`].

mod multi;
mod runtime;
mod store;
#[cfg(feature = "testing")]
mod testing;
mod value;

pub use runtime::{block_on, wall_clock_ms, WasiRuntime};
pub use store::{KeyValueError, KeyValueLockStore};

use alloc::rc::Rc;

use crate::error::{Error, Operation};
use crate::input::{AcquireOptions, Key, Ttl};
use crate::inspect::LockInfo;
use crate::lock::Lock;
use crate::serialized::SerializedLock;
use crate::share::{Holding, Share, MAX_LIMIT};
use crate::store::LockStore;
use crate::token::Metadata;

// Generated glue (canonical ABI lifting and lowering) is unsafe by nature; nothing else here is.
#[allow(unsafe_code)]
mod bindings {
    // The production world exports the lock API only.
    #[cfg(not(feature = "testing"))]
    wit_bindgen::generate!({
        path: "wit",
        world: "keel:lock/keel-lock@0.1.0",
        generate_all,
    });
    // The testing world adds `conformance`, implemented in `testing.rs`.
    #[cfg(feature = "testing")]
    wit_bindgen::generate!({
        path: "wit",
        world: "keel:lock/keel-lock-testing@0.1.0",
        generate_all,
    });
}

use bindings::exports::keel::lock::lock as wit_lock;
use bindings::exports::keel::lock::shared as wit_shared;
use bindings::exports::keel::lock::types::{LockError, MismatchedLimits};

/// The bucket `new` and `restore` use: the name Spin and most hosts give their default store.
pub const DEFAULT_BUCKET: &str = "default";

/// The component: implements the exported interfaces.
pub struct Component;

#[allow(unsafe_code)]
mod export {
    use super::{bindings, Component};
    bindings::export!(Component with_types_in bindings);
}

/// The exported `lock` resource: a core [`Lock`] over the host's bucket.
pub struct ComponentLock {
    inner: Lock<Bucket, WasiRuntime>,
}

/// An opened bucket as every exported lock holds it: shared, because a `multi-lock` gives one
/// to each key's lock, and the same type for both, so the lock's code is in the component once.
type Bucket = Rc<KeyValueLockStore>;

fn wit_error(e: Error<KeyValueError>) -> LockError {
    match e {
        Error::Input(e) => LockError::InvalidInput(e.to_string()),
        Error::NotHeld { key, .. } => LockError::NotHeld(key),
        Error::Store {
            store,
            operation,
            error,
        } => LockError::StoreError(format!("{store} store failed during {operation}: {error}")),
        Error::Random(e) => LockError::RandomUnavailable(e.to_string()),
        Error::LimitMismatch { key, held, asked } => {
            LockError::LimitMismatch(MismatchedLimits { key, held, asked })
        }
        // The component API has neither cancellation nor force-release.
        Error::Aborted | Error::Unsupported { .. } | Error::StoreTimeout { .. } => {
            LockError::StoreError(e.to_string())
        }
    }
}

fn invalid(e: crate::error::InputError) -> LockError {
    LockError::InvalidInput(e.to_string())
}

/// Checked hold metadata, `none` passed through.
fn metadata(text: Option<String>) -> Result<Option<Metadata>, LockError> {
    text.as_deref()
        .map(Metadata::new)
        .transpose()
        .map_err(invalid)
}

/// The WIT view of what `inspect` found: the core's records field by field (neither has a
/// field for an owner token).
fn wit_info(info: LockInfo) -> wit_lock::LockInfo {
    let holders = info.holders.into_iter().map(|h| wit_lock::HolderInfo {
        metadata: h.metadata.map(|m| m.as_str().to_owned()),
        fence: h.fence.map(|f| f.get()),
        remaining_ms: h.remaining_ms,
    });
    wit_lock::LockInfo {
        holders: holders.collect(),
        waiting: info.waiting,
    }
}

/// `inspect` of `key` in `store`: one read of the key's value, which answers at once, so the
/// handle's method and the free function share this rather than the core's bounded call.
fn inspect_in(store: &KeyValueLockStore, key: &Key) -> Result<wit_lock::LockInfo, LockError> {
    let info = store.look(key).map_err(|error| {
        wit_error(Error::Store {
            store: store.name(),
            operation: Operation::Inspect,
            error,
        })
    })?;
    Ok(wit_info(info))
}

fn open_bucket(bucket: &str) -> Result<KeyValueLockStore, LockError> {
    KeyValueLockStore::open(bucket).map_err(|e| LockError::StoreError(e.to_string()))
}

fn open_shared_bucket(bucket: &str) -> Result<Bucket, LockError> {
    open_bucket(bucket).map(Rc::new)
}

fn new_lock(bucket: &str, key: String, ttl_ms: u64) -> Result<wit_lock::Lock, LockError> {
    new_holding(bucket, key, ttl_ms, Holding::Exclusive)
}

fn new_holding(
    bucket: &str,
    key: String,
    ttl_ms: u64,
    holding: Holding,
) -> Result<wit_lock::Lock, LockError> {
    let key = Key::new(key).map_err(invalid)?;
    let ttl = Ttl::from_ms(ttl_ms).map_err(invalid)?;
    let store = open_shared_bucket(bucket)?;
    Ok(wit_lock::Lock::new(ComponentLock {
        inner: Lock::new(key, ttl, store, WasiRuntime).holding(holding),
    }))
}

impl wit_shared::Guest for Component {
    fn semaphore(
        bucket: String,
        key: String,
        limit: u32,
        ttl_ms: u64,
    ) -> Result<wit_lock::Lock, LockError> {
        let share = Share::new(1, limit).map_err(invalid)?;
        new_holding(&bucket, key, ttl_ms, Holding::Shared(share))
    }

    fn read_lock(bucket: String, key: String, ttl_ms: u64) -> Result<wit_lock::Lock, LockError> {
        new_holding(&bucket, key, ttl_ms, Holding::Shared(Share::READ))
    }

    fn write_lock(bucket: String, key: String, ttl_ms: u64) -> Result<wit_lock::Lock, LockError> {
        new_holding(&bucket, key, ttl_ms, Holding::Exclusive)
    }
}

fn restore_lock(bucket: &str, serialized: &str) -> Result<wit_lock::Lock, LockError> {
    let serialized = SerializedLock::parse(serialized).map_err(invalid)?;
    let store = open_shared_bucket(bucket)?;
    Ok(wit_lock::Lock::new(ComponentLock {
        inner: Lock::restore(serialized, store, WasiRuntime),
    }))
}

impl wit_lock::Guest for Component {
    type Lock = ComponentLock;

    fn restore(serialized: String) -> Result<wit_lock::Lock, LockError> {
        restore_lock(DEFAULT_BUCKET, &serialized)
    }

    fn restore_in(bucket: String, serialized: String) -> Result<wit_lock::Lock, LockError> {
        restore_lock(&bucket, &serialized)
    }

    fn inspect(bucket: String, key: String) -> Result<wit_lock::LockInfo, LockError> {
        let key = Key::new(key).map_err(invalid)?;
        inspect_in(&open_bucket(&bucket)?, &key)
    }
}

impl wit_lock::GuestLock for ComponentLock {
    fn new(key: String, ttl_ms: u64) -> Result<wit_lock::Lock, LockError> {
        new_lock(DEFAULT_BUCKET, key, ttl_ms)
    }

    fn new_in(bucket: String, key: String, ttl_ms: u64) -> Result<wit_lock::Lock, LockError> {
        new_lock(&bucket, key, ttl_ms)
    }

    fn acquire(&self, timeout_ms: u64, retry_delay_ms: Option<u64>) -> Result<bool, LockError> {
        let options = AcquireOptions::from_ms(timeout_ms, retry_delay_ms).map_err(invalid)?;
        block_on(self.inner.acquire(options)).map_err(wit_error)
    }

    fn release(&self) -> Result<bool, LockError> {
        block_on(self.inner.release()).map_err(wit_error)
    }

    fn extend(&self, ttl_ms: Option<u64>) -> Result<(), LockError> {
        let ttl = ttl_ms.map(Ttl::from_ms).transpose().map_err(invalid)?;
        block_on(self.inner.extend(ttl)).map_err(wit_error)
    }

    fn serialize(&self) -> Result<String, LockError> {
        self.inner.serialize().map_err(wit_error)
    }

    fn is_locked(&self) -> Result<bool, LockError> {
        block_on(self.inner.is_locked()).map_err(wit_error)
    }

    fn is_expired(&self) -> bool {
        self.inner.is_expired()
    }

    fn remaining_time(&self) -> Result<Option<u64>, LockError> {
        block_on(self.inner.remaining_time()).map_err(wit_error)
    }

    fn fence(&self) -> Option<u64> {
        self.inner.fence().map(|f| f.get())
    }

    fn set_permits(&self, permits: u32) -> Result<(), LockError> {
        // A read lock is shared too, but its weight is 1 by definition.
        let limit = match self.inner.current_holding().share() {
            Some(share) if share.limit() != MAX_LIMIT => share.limit(),
            _ => {
                return Err(LockError::InvalidInput(
                    "set-permits needs a semaphore handle (shared.semaphore)".to_owned(),
                ))
            }
        };
        let share = Share::new(permits, limit).map_err(invalid)?;
        self.inner.set_holding(Holding::Shared(share));
        Ok(())
    }

    fn set_metadata(&self, text: Option<String>) -> Result<(), LockError> {
        self.inner.set_metadata(metadata(text)?);
        Ok(())
    }

    fn inspect(&self) -> Result<wit_lock::LockInfo, LockError> {
        inspect_in(self.inner.store(), self.inner.key())
    }

    fn key(&self) -> String {
        self.inner.key().as_str().to_owned()
    }

    fn ttl_ms(&self) -> u64 {
        self.inner.ttl().as_ms()
    }
}
