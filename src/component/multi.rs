//! The exported `multi` interface: a core [`MultiLock`] over the host's bucket, every key's
//! lock sharing one opened bucket ([`Bucket`], the store type of the `lock` resource too).

use super::bindings::exports::keel::lock::multi as wit_multi;
use super::bindings::exports::keel::lock::types::LockError;
use super::{
    block_on, invalid, metadata, open_shared_bucket, wit_error, Bucket, Component, WasiRuntime,
    DEFAULT_BUCKET,
};
use crate::input::{AcquireOptions, Key, Ttl};
use crate::lock::MultiLock;

/// The exported `multi-lock` resource.
pub struct ComponentMultiLock {
    inner: MultiLock<Bucket, WasiRuntime>,
}

fn new_multi(
    bucket: &str,
    keys: Vec<String>,
    ttl_ms: u64,
) -> Result<wit_multi::MultiLock, LockError> {
    let keys = keys
        .into_iter()
        .map(Key::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let ttl = Ttl::from_ms(ttl_ms).map_err(invalid)?;
    let store = open_shared_bucket(bucket)?;
    let inner = MultiLock::new(keys, ttl, store, WasiRuntime).map_err(invalid)?;
    Ok(wit_multi::MultiLock::new(ComponentMultiLock { inner }))
}

impl wit_multi::Guest for Component {
    type MultiLock = ComponentMultiLock;
}

impl wit_multi::GuestMultiLock for ComponentMultiLock {
    fn new(keys: Vec<String>, ttl_ms: u64) -> Result<wit_multi::MultiLock, LockError> {
        new_multi(DEFAULT_BUCKET, keys, ttl_ms)
    }

    fn new_in(
        bucket: String,
        keys: Vec<String>,
        ttl_ms: u64,
    ) -> Result<wit_multi::MultiLock, LockError> {
        new_multi(&bucket, keys, ttl_ms)
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

    fn set_metadata(&self, text: Option<String>) -> Result<(), LockError> {
        let said = metadata(text)?;
        for lock in self.inner.locks() {
            lock.set_metadata(said.clone());
        }
        Ok(())
    }

    fn fences(&self) -> Option<Vec<wit_multi::KeyFence>> {
        let fences = self.inner.fences()?;
        Some(
            fences
                .into_iter()
                .map(|(key, fence)| wit_multi::KeyFence {
                    key: key.as_str().to_owned(),
                    fence: fence.get(),
                })
                .collect(),
        )
    }

    fn is_expired(&self) -> bool {
        self.inner.is_expired()
    }

    fn keys(&self) -> Vec<String> {
        self.inner.keys().map(|k| k.as_str().to_owned()).collect()
    }

    fn ttl_ms(&self) -> u64 {
        self.inner.ttl().as_ms()
    }
}
