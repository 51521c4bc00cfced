//! A wasmtime embedding of keel-lock's component for the tests: the `keel-lock-testing` world
//! (`keel:lock@0.1.0`, the lock API plus `conformance`), built with the crate's `testing` feature.
//!
//! The host provides `wasi:keyvalue@0.2.0-draft2` (`store` + `atomics`) over one in-memory map
//! shared by every instance it creates, and the rest of WASI preview 2 from `wasmtime-wasi`.
//! Each [`Instance`] has its own `wasmtime::Store`, so instances on different threads run truly
//! in parallel and race on the shared map: a faithful model of many workers sharing one store.
//!
//! A host made with [`Host::with_faults`] misbehaves on purpose: a seeded share of its `get`,
//! `set`, `cas.new` and `swap` calls fail without touching the map, a share of its writes
//! (`set`, `swap`) land and then answer an error, and a share of calls are delayed before or
//! after they act. [`Broken`] makes it a host no lock can be built on (a compare-and-swap that
//! is not atomic, reads one write behind, a wall clock that stands still), for the tests that
//! must catch it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceAny, ResourceTable};
use wasmtime::{Config, Engine, Result, Store};
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxView, WasiView};

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "keel:lock/keel-lock-testing",
    with: {
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:keyvalue/store.bucket": BucketHandle,
        "wasi:keyvalue/atomics.cas": CasHandle,
    },
    // The world's `add_to_linker` reuses wasmtime-wasi's io bindings, which need `Send` data.
    require_store_data_send: true,
});

use exports::keel::lock::conformance::{Options as ConformanceOptions, Outcome};
pub use exports::keel::lock::lock::{HolderInfo, LockInfo};
pub use exports::keel::lock::multi::KeyFence;
pub use exports::keel::lock::types::{LockError, MismatchedLimits};
use wasi::keyvalue::{atomics, store};

/// Bucket names the host refuses with `no-such-store` start with this.
pub const MISSING_BUCKET_PREFIX: &str = "missing";

/// One stored value and the write that produced it (for a strict, version-based CAS).
#[derive(Clone)]
struct Entry {
    value: Vec<u8>,
    version: u64,
    /// The value this write replaced (what [`Broken::StaleReads`] may answer).
    previous: Option<Vec<u8>>,
}

/// The shared key-value store: buckets of keys, one lock for all (linearisable).
#[derive(Default)]
pub struct SharedKv {
    inner: Mutex<KvInner>,
}

#[derive(Default)]
struct KvInner {
    buckets: HashMap<String, HashMap<String, Entry>>,
    writes: u64,
    swaps: u64,
    failed_swaps: u64,
}

impl KvInner {
    /// Writes `value` at `key` as a new version.
    fn write(&mut self, bucket: String, key: String, value: Vec<u8>) {
        self.writes += 1;
        let version = self.writes;
        let slot = self.buckets.entry(bucket).or_default().entry(key);
        let previous = match &slot {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.get().value.clone()),
            std::collections::hash_map::Entry::Vacant(_) => None,
        };
        let entry = Entry {
            value,
            version,
            previous,
        };
        slot.insert_entry(entry);
    }
}

impl SharedKv {
    fn lock(&self) -> MutexGuard<'_, KvInner> {
        // A panicking test thread must not hide the other threads' results.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The raw value at `key`, as the component last wrote it.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        self.lock()
            .buckets
            .get(bucket)
            .and_then(|b| b.get(key))
            .map(|e| e.value.clone())
    }

    /// Writes a raw value, as some other program sharing the bucket might.
    pub fn put(&self, bucket: &str, key: &str, value: &[u8]) {
        self.lock()
            .write(bucket.to_owned(), key.to_owned(), value.to_vec());
    }

    /// (successful swaps, failed swaps) so far: proof that contenders really raced.
    pub fn swap_counts(&self) -> (u64, u64) {
        let kv = self.lock();
        (kv.swaps, kv.failed_swaps)
    }

    /// The value at `key` and its version; with `stale`, the value before the latest write
    /// (still with the latest version).
    fn version(&self, bucket: &str, key: &str, stale: bool) -> (Option<Vec<u8>>, u64) {
        match self.lock().buckets.get(bucket).and_then(|b| b.get(key)) {
            Some(e) if stale => (e.previous.clone(), e.version),
            Some(e) => (Some(e.value.clone()), e.version),
            None => (None, 0),
        }
    }
}

/// What a host made with [`Host::with_faults`] does wrong, and how often. Shares are
/// probabilities per call, drawn from a generator seeded with `seed` and the instance's number.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Seeds every instance's generator.
    pub seed: u64,
    /// Share of `get`, `set`, `cas.new` and `swap` calls that answer an error without acting.
    pub fail_before: f64,
    /// Share of writes (`set`, and `swap` when it succeeds) that act and then answer an error.
    pub fail_after: f64,
    /// Share of calls delayed by up to `max_delay_ms`, half of them before acting, half after.
    pub delay: f64,
    /// The longest ordinary delay, in ms.
    pub max_delay_ms: u64,
    /// Share of calls stalled for `stall_ms` (a store that stops answering for a while), half
    /// of them before acting, half after.
    pub stall: f64,
    /// How long a stall lasts, in ms.
    pub stall_ms: u64,
    /// A deliberately broken host, or `None` for a correct one.
    pub broken: Option<Broken>,
}

impl Faults {
    /// A correct host that injects nothing (a base to change fields of).
    pub fn none(seed: u64) -> Self {
        Faults {
            seed,
            fail_before: 0.0,
            fail_after: 0.0,
            delay: 0.0,
            max_delay_ms: 0,
            stall: 0.0,
            stall_ms: 0,
            broken: None,
        }
    }
}

/// A host no lock can be built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// `swap` compares the version, lets go of the map, yields for up to 0.3 ms, then writes
    /// whatever it was given: a get-then-set, so two instances can both win one key.
    RacyCompareAndSwap,
    /// Every instance's wall clock stands still at the host's creation: no hold ever expires.
    FrozenClock,
    /// A fifth of `cas.new` calls see the value before the latest write, with the latest
    /// version (a replica one write behind): the swap that follows is accepted on a stale read.
    StaleReads,
}

/// What a faulty host has injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Calls that went through the injector.
    pub calls: u64,
    /// Calls answered with an error without acting.
    pub failed_before: u64,
    /// Writes that acted and then answered an error.
    pub failed_after: u64,
    /// Calls delayed (ordinary delays).
    pub delayed: u64,
    /// Calls stalled.
    pub stalled: u64,
}

/// A faulty host's settings and counters, shared by its instances.
struct FaultPlan {
    faults: Faults,
    frozen_at: Duration,
    instances: AtomicU64,
    calls: AtomicU64,
    failed_before: AtomicU64,
    failed_after: AtomicU64,
    delayed: AtomicU64,
    stalled: AtomicU64,
}

/// splitmix64: a small seeded generator (fault decisions need no more).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Uniform in `0..=n`.
    fn upto(&mut self, n: u64) -> u64 {
        self.next() % n.saturating_add(1)
    }
}

/// One instance's side of a faulty host: the shared plan and the instance's own generator.
struct Injector {
    plan: Arc<FaultPlan>,
    rng: Rng,
}

fn injected(call: &str, when: &str) -> store::Error {
    store::Error::Other(format!("injected fault: {call} failed {when}"))
}

impl Injector {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Maybe sleeps (an ordinary delay or a stall).
    fn maybe_delay(&mut self) {
        let f = &self.plan.faults;
        if self.rng.chance(f.stall / 2.0) {
            Self::count(&self.plan.stalled);
            std::thread::sleep(Duration::from_millis(f.stall_ms));
        } else if self.rng.chance(f.delay / 2.0) {
            Self::count(&self.plan.delayed);
            std::thread::sleep(Duration::from_millis(self.rng.upto(f.max_delay_ms)));
        }
    }

    /// Before a call acts: maybe a delay, maybe an error in place of the call.
    fn before(&mut self, call: &str) -> Result<(), store::Error> {
        Self::count(&self.plan.calls);
        self.maybe_delay();
        if self.rng.chance(self.plan.faults.fail_before) {
            Self::count(&self.plan.failed_before);
            return Err(injected(call, "before acting"));
        }
        Ok(())
    }

    /// After a write acted: maybe an error in place of its answer, maybe a delay.
    fn after_write(&mut self, call: &str) -> Result<(), store::Error> {
        if self.rng.chance(self.plan.faults.fail_after) {
            Self::count(&self.plan.failed_after);
            return Err(injected(call, "after its write landed"));
        }
        self.maybe_delay();
        Ok(())
    }

    fn broken(&self) -> Option<Broken> {
        self.plan.faults.broken
    }
}

/// A wall clock that always answers the same instant.
struct FrozenClock(Duration);

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        self.0
    }
}

/// The host side of a `bucket` resource.
pub struct BucketHandle {
    name: String,
}

/// The host side of a `cas` resource: the value and version seen when it was made.
pub struct CasHandle {
    bucket: String,
    key: String,
    seen: Option<Vec<u8>>,
    version: u64,
}

/// Per-instance host state.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    kv: Arc<SharedKv>,
    faults: Option<Injector>,
}

impl State {
    fn before(&mut self, call: &str) -> Result<(), store::Error> {
        self.faults.as_mut().map_or(Ok(()), |f| f.before(call))
    }

    fn after_write(&mut self, call: &str) -> Result<(), store::Error> {
        self.faults.as_mut().map_or(Ok(()), |f| f.after_write(call))
    }

    fn after_read(&mut self) {
        if let Some(f) = self.faults.as_mut() {
            f.maybe_delay();
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn other(e: impl std::fmt::Display) -> store::Error {
    store::Error::Other(e.to_string())
}

impl store::Host for State {
    fn open(&mut self, identifier: String) -> Result<Resource<BucketHandle>, store::Error> {
        if identifier.starts_with(MISSING_BUCKET_PREFIX) {
            return Err(store::Error::NoSuchStore);
        }
        self.table
            .push(BucketHandle { name: identifier })
            .map_err(other)
    }
}

impl store::HostBucket for State {
    fn get(
        &mut self,
        bucket: Resource<BucketHandle>,
        key: String,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        self.before("get")?;
        let value = self.kv.get(&name, &key);
        self.after_read();
        Ok(value)
    }

    fn set(
        &mut self,
        bucket: Resource<BucketHandle>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        self.before("set")?;
        self.kv.put(&name, &key, &value);
        self.after_write("set")
    }

    fn delete(&mut self, bucket: Resource<BucketHandle>, key: String) -> Result<(), store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        if let Some(b) = self.kv.lock().buckets.get_mut(&name) {
            b.remove(&key);
        }
        Ok(())
    }

    fn exists(
        &mut self,
        bucket: Resource<BucketHandle>,
        key: String,
    ) -> Result<bool, store::Error> {
        let name = &self.table.get(&bucket).map_err(other)?.name;
        Ok(self.kv.get(name, &key).is_some())
    }

    fn list_keys(
        &mut self,
        bucket: Resource<BucketHandle>,
        _cursor: Option<String>,
    ) -> Result<store::KeyResponse, store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        let keys = self
            .kv
            .lock()
            .buckets
            .get(&name)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        Ok(store::KeyResponse { keys, cursor: None })
    }

    fn drop(&mut self, bucket: Resource<BucketHandle>) -> Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}

impl State {
    fn new_cas(
        &mut self,
        bucket: String,
        key: String,
    ) -> Result<Resource<CasHandle>, store::Error> {
        let stale = self
            .faults
            .as_mut()
            .is_some_and(|f| f.broken() == Some(Broken::StaleReads) && f.rng.chance(0.2));
        let (seen, version) = self.kv.version(&bucket, &key, stale);
        self.table
            .push(CasHandle {
                bucket,
                key,
                seen,
                version,
            })
            .map_err(other)
    }
}

impl State {
    /// The broken `swap` of [`Broken::RacyCompareAndSwap`]: compare, let go of the map, yield,
    /// write unconditionally. Another instance's swap can land in between and be overwritten.
    fn racy_swap(&mut self, cas: CasHandle, value: Vec<u8>) -> Result<(), atomics::CasError> {
        let current = self.kv.version(&cas.bucket, &cas.key, false).1;
        if current != cas.version {
            self.kv.lock().failed_swaps += 1;
            let next = self
                .new_cas(cas.bucket, cas.key)
                .map_err(atomics::CasError::StoreError)?;
            return Err(atomics::CasError::CasFailed(next));
        }
        let pause = self.faults.as_mut().map_or(0, |f| f.rng.upto(300));
        std::thread::sleep(Duration::from_micros(pause));
        {
            let mut kv = self.kv.lock();
            kv.swaps += 1;
            kv.write(cas.bucket, cas.key, value);
        }
        self.after_write("swap")
            .map_err(atomics::CasError::StoreError)
    }
}

impl atomics::Host for State {
    fn increment(
        &mut self,
        bucket: Resource<BucketHandle>,
        key: String,
        delta: i64,
    ) -> Result<i64, store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        let mut kv = self.kv.lock();
        let current = kv
            .buckets
            .get(&name)
            .and_then(|b| b.get(&key))
            .map_or_else(|| b"0".to_vec(), |e| e.value.clone());
        let n: i64 = std::str::from_utf8(&current)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| other("not a number"))?;
        let n = n.checked_add(delta).ok_or_else(|| other("overflow"))?;
        kv.write(name, key, n.to_string().into_bytes());
        Ok(n)
    }

    fn swap(&mut self, cas: Resource<CasHandle>, value: Vec<u8>) -> Result<(), atomics::CasError> {
        let cas = self
            .table
            .delete(cas)
            .map_err(|e| atomics::CasError::StoreError(other(e)))?;
        self.before("swap").map_err(atomics::CasError::StoreError)?;
        if self.faults.as_ref().and_then(Injector::broken) == Some(Broken::RacyCompareAndSwap) {
            return self.racy_swap(cas, value);
        }
        {
            let mut kv = self.kv.lock();
            let current = kv
                .buckets
                .get(&cas.bucket)
                .and_then(|b| b.get(&cas.key))
                .map_or(0, |e| e.version);
            if current == cas.version {
                kv.swaps += 1;
                kv.write(cas.bucket, cas.key, value);
                drop(kv);
                return self
                    .after_write("swap")
                    .map_err(atomics::CasError::StoreError);
            }
            kv.failed_swaps += 1;
        }
        // Someone wrote since `cas.new`: hand back a handle on the latest version.
        let next = self
            .new_cas(cas.bucket, cas.key)
            .map_err(atomics::CasError::StoreError)?;
        Err(atomics::CasError::CasFailed(next))
    }
}

impl atomics::HostCas for State {
    fn new(
        &mut self,
        bucket: Resource<BucketHandle>,
        key: String,
    ) -> Result<Resource<CasHandle>, store::Error> {
        let name = self.table.get(&bucket).map_err(other)?.name.clone();
        self.before("cas.new")?;
        let cas = self.new_cas(name, key);
        self.after_read();
        cas
    }

    fn current(&mut self, cas: Resource<CasHandle>) -> Result<Option<Vec<u8>>, store::Error> {
        Ok(self.table.get(&cas).map_err(other)?.seen.clone())
    }

    fn drop(&mut self, cas: Resource<CasHandle>) -> Result<()> {
        self.table.delete(cas)?;
        Ok(())
    }
}

/// The names a component exports (`keel:lock/lock@0.1.0`, …), as its type declares them.
pub fn component_exports(path: &Path) -> Result<Vec<String>> {
    let engine = Engine::new(&Config::new())?;
    let component = Component::from_file(&engine, path)
        .map_err(|e| e.context(format!("loading {}", path.display())))?;
    let ty = component.component_type();
    let mut names: Vec<String> = ty
        .exports(&engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// The testing component's default location (the root crate's release build with
/// `--features component,testing`).
pub fn default_component_path() -> PathBuf {
    if let Some(p) = std::env::var_os("KEEL_LOCK_COMPONENT") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/wasm32-wasip2/release/keel_lock.wasm")
}

/// A compiled component, a linker with every import, and the store all instances share.
pub struct Host {
    engine: Engine,
    pre: KeelLockTestingPre<State>,
    kv: Arc<SharedKv>,
    faults: Option<Arc<FaultPlan>>,
}

impl Host {
    /// Compiles the component at `path` and links the host's imports.
    pub fn new(path: &Path) -> Result<Self> {
        let engine = Engine::new(&Config::new())?;
        let component = Component::from_file(&engine, path)
            .map_err(|e| e.context(format!("loading {}", path.display())))?;
        let mut linker = Linker::<State>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        store::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
        atomics::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
        let pre = KeelLockTestingPre::new(linker.instantiate_pre(&component)?)?;
        Ok(Host {
            engine,
            pre,
            kv: Arc::new(SharedKv::default()),
            faults: None,
        })
    }

    /// A host sharing this one's compiled component but with a fresh, empty store.
    pub fn with_fresh_store(&self) -> Host {
        Host {
            engine: self.engine.clone(),
            pre: self.pre.clone(),
            kv: Arc::new(SharedKv::default()),
            faults: None,
        }
    }

    /// A host sharing this one's compiled component, with a fresh, empty store, that injects
    /// `faults` into every instance it creates from now on.
    pub fn with_faults(&self, faults: Faults) -> Host {
        let frozen_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Host {
            faults: Some(Arc::new(FaultPlan {
                faults,
                frozen_at,
                instances: AtomicU64::new(0),
                calls: AtomicU64::new(0),
                failed_before: AtomicU64::new(0),
                failed_after: AtomicU64::new(0),
                delayed: AtomicU64::new(0),
                stalled: AtomicU64::new(0),
            })),
            ..self.with_fresh_store()
        }
    }

    /// What this host has injected so far (all zero for a host without faults).
    pub fn fault_counts(&self) -> FaultCounts {
        self.faults.as_ref().map_or_else(FaultCounts::default, |p| {
            let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
            FaultCounts {
                calls: n(&p.calls),
                failed_before: n(&p.failed_before),
                failed_after: n(&p.failed_after),
                delayed: n(&p.delayed),
                stalled: n(&p.stalled),
            }
        })
    }

    /// The store every instance of this host shares.
    pub fn kv(&self) -> &SharedKv {
        &self.kv
    }

    /// A new component instance in its own `wasmtime::Store`, on the shared key-value store.
    pub fn instance(&self) -> Result<Instance> {
        let mut wasi = WasiCtx::builder();
        wasi.inherit_stderr();
        let faults = self.faults.as_ref().map(|plan| {
            let n = plan.instances.fetch_add(1, Ordering::Relaxed);
            if plan.faults.broken == Some(Broken::FrozenClock) {
                wasi.wall_clock(FrozenClock(plan.frozen_at));
            }
            Injector {
                plan: plan.clone(),
                rng: Rng(plan
                    .faults
                    .seed
                    .wrapping_mul(0x2545_f491_4f6c_dd1d)
                    .wrapping_add(n)),
            }
        });
        let state = State {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            kv: self.kv.clone(),
            faults,
        };
        let mut store = Store::new(&self.engine, state);
        let bindings = self.pre.instantiate(&mut store)?;
        Ok(Instance { store, bindings })
    }
}

/// One instance of the component. Outer `Result`s are traps (always a test failure);
/// inner ones are the component's `lock-error` answers.
pub struct Instance {
    store: Store<State>,
    bindings: KeelLockTesting,
}

fn api(bindings: &KeelLockTesting) -> &exports::keel::lock::lock::Guest {
    bindings.keel_lock_lock()
}

/// A `lock` resource owned by an [`Instance`].
#[derive(Clone, Copy, Debug)]
pub struct LockHandle(ResourceAny);

/// A `multi-lock` resource owned by an [`Instance`].
#[derive(Clone, Copy, Debug)]
pub struct MultiHandle(ResourceAny);

type Answer<T> = Result<Result<T, LockError>>;

impl Instance {
    /// `lock.new(key, ttl-ms)` in the `"default"` bucket.
    pub fn new_lock(&mut self, key: &str, ttl_ms: u64) -> Answer<LockHandle> {
        let r = api(&self.bindings)
            .lock()
            .call_new(&mut self.store, key, ttl_ms)?;
        Ok(r.map(LockHandle))
    }

    /// `lock.new-in(bucket, key, ttl-ms)`.
    pub fn new_lock_in(&mut self, bucket: &str, key: &str, ttl_ms: u64) -> Answer<LockHandle> {
        let r = api(&self.bindings)
            .lock()
            .call_new_in(&mut self.store, bucket, key, ttl_ms)?;
        Ok(r.map(LockHandle))
    }

    /// `restore(serialized)`.
    pub fn restore(&mut self, serialized: &str) -> Answer<LockHandle> {
        let r = api(&self.bindings).call_restore(&mut self.store, serialized)?;
        Ok(r.map(LockHandle))
    }

    /// `lock.acquire(timeout-ms, retry-delay-ms)`.
    pub fn acquire(
        &mut self,
        l: LockHandle,
        timeout_ms: u64,
        retry_ms: Option<u64>,
    ) -> Answer<bool> {
        api(&self.bindings)
            .lock()
            .call_acquire(&mut self.store, l.0, timeout_ms, retry_ms)
    }

    /// `lock.release()`.
    pub fn release(&mut self, l: LockHandle) -> Answer<bool> {
        api(&self.bindings)
            .lock()
            .call_release(&mut self.store, l.0)
    }

    /// `lock.extend(ttl-ms)`.
    pub fn extend(&mut self, l: LockHandle, ttl_ms: Option<u64>) -> Answer<()> {
        api(&self.bindings)
            .lock()
            .call_extend(&mut self.store, l.0, ttl_ms)
    }

    /// `lock.serialize()`.
    pub fn serialize(&mut self, l: LockHandle) -> Answer<String> {
        api(&self.bindings)
            .lock()
            .call_serialize(&mut self.store, l.0)
    }

    /// `lock.is-locked()`.
    pub fn is_locked(&mut self, l: LockHandle) -> Answer<bool> {
        api(&self.bindings)
            .lock()
            .call_is_locked(&mut self.store, l.0)
    }

    /// `lock.fence()`.
    pub fn fence(&mut self, l: LockHandle) -> Result<Option<u64>> {
        api(&self.bindings).lock().call_fence(&mut self.store, l.0)
    }

    /// `lock.is-expired()`.
    pub fn is_expired(&mut self, l: LockHandle) -> Result<bool> {
        api(&self.bindings)
            .lock()
            .call_is_expired(&mut self.store, l.0)
    }

    /// `lock.remaining-time()`.
    pub fn remaining_time(&mut self, l: LockHandle) -> Answer<Option<u64>> {
        api(&self.bindings)
            .lock()
            .call_remaining_time(&mut self.store, l.0)
    }

    /// `shared.semaphore(bucket, key, limit, ttl-ms)`.
    pub fn semaphore(
        &mut self,
        bucket: &str,
        key: &str,
        limit: u32,
        ttl_ms: u64,
    ) -> Answer<LockHandle> {
        let r = self.bindings.keel_lock_shared().call_semaphore(
            &mut self.store,
            bucket,
            key,
            limit,
            ttl_ms,
        )?;
        Ok(r.map(LockHandle))
    }

    /// `shared.read-lock(bucket, key, ttl-ms)`.
    pub fn read_lock(&mut self, bucket: &str, key: &str, ttl_ms: u64) -> Answer<LockHandle> {
        let r = self.bindings.keel_lock_shared().call_read_lock(
            &mut self.store,
            bucket,
            key,
            ttl_ms,
        )?;
        Ok(r.map(LockHandle))
    }

    /// `shared.write-lock(bucket, key, ttl-ms)`.
    pub fn write_lock(&mut self, bucket: &str, key: &str, ttl_ms: u64) -> Answer<LockHandle> {
        let r = self.bindings.keel_lock_shared().call_write_lock(
            &mut self.store,
            bucket,
            key,
            ttl_ms,
        )?;
        Ok(r.map(LockHandle))
    }

    /// `lock.set-permits(permits)`.
    pub fn set_permits(&mut self, l: LockHandle, permits: u32) -> Answer<()> {
        api(&self.bindings)
            .lock()
            .call_set_permits(&mut self.store, l.0, permits)
    }

    /// `lock.set-metadata(metadata)`.
    pub fn set_metadata(&mut self, l: LockHandle, metadata: Option<&str>) -> Answer<()> {
        api(&self.bindings)
            .lock()
            .call_set_metadata(&mut self.store, l.0, metadata)
    }

    /// `lock.inspect()`.
    pub fn inspect(&mut self, l: LockHandle) -> Answer<LockInfo> {
        api(&self.bindings)
            .lock()
            .call_inspect(&mut self.store, l.0)
    }

    /// `inspect(bucket, key)`, the free function.
    pub fn inspect_key(&mut self, bucket: &str, key: &str) -> Answer<LockInfo> {
        api(&self.bindings).call_inspect(&mut self.store, bucket, key)
    }

    /// `lock.key()`.
    pub fn key(&mut self, l: LockHandle) -> Result<String> {
        api(&self.bindings).lock().call_key(&mut self.store, l.0)
    }

    /// `lock.ttl-ms()`.
    pub fn ttl_ms(&mut self, l: LockHandle) -> Result<u64> {
        api(&self.bindings).lock().call_ttl_ms(&mut self.store, l.0)
    }

    /// Drops the resource (does not release the lock).
    pub fn drop_lock(&mut self, l: LockHandle) -> Result<()> {
        l.0.resource_drop(&mut self.store)
    }

    /// `multi-lock.new(keys, ttl-ms)` in the `"default"` bucket.
    pub fn new_multi(&mut self, keys: &[&str], ttl_ms: u64) -> Answer<MultiHandle> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let r = self.bindings.keel_lock_multi().multi_lock().call_new(
            &mut self.store,
            &keys,
            ttl_ms,
        )?;
        Ok(r.map(MultiHandle))
    }

    /// `multi-lock.new-in(bucket, keys, ttl-ms)`.
    pub fn new_multi_in(
        &mut self,
        bucket: &str,
        keys: &[&str],
        ttl_ms: u64,
    ) -> Answer<MultiHandle> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let r = self.bindings.keel_lock_multi().multi_lock().call_new_in(
            &mut self.store,
            bucket,
            &keys,
            ttl_ms,
        )?;
        Ok(r.map(MultiHandle))
    }

    /// `multi-lock.acquire(timeout-ms, retry-delay-ms)`.
    pub fn multi_acquire(
        &mut self,
        m: MultiHandle,
        timeout_ms: u64,
        retry_ms: Option<u64>,
    ) -> Answer<bool> {
        self.bindings.keel_lock_multi().multi_lock().call_acquire(
            &mut self.store,
            m.0,
            timeout_ms,
            retry_ms,
        )
    }

    /// `multi-lock.release()`.
    pub fn multi_release(&mut self, m: MultiHandle) -> Answer<bool> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_release(&mut self.store, m.0)
    }

    /// `multi-lock.extend(ttl-ms)`.
    pub fn multi_extend(&mut self, m: MultiHandle, ttl_ms: Option<u64>) -> Answer<()> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_extend(&mut self.store, m.0, ttl_ms)
    }

    /// `multi-lock.set-metadata(metadata)`.
    pub fn multi_set_metadata(&mut self, m: MultiHandle, metadata: Option<&str>) -> Answer<()> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_set_metadata(&mut self.store, m.0, metadata)
    }

    /// `multi-lock.fences()`.
    pub fn multi_fences(&mut self, m: MultiHandle) -> Result<Option<Vec<KeyFence>>> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_fences(&mut self.store, m.0)
    }

    /// `multi-lock.is-expired()`.
    pub fn multi_is_expired(&mut self, m: MultiHandle) -> Result<bool> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_is_expired(&mut self.store, m.0)
    }

    /// `multi-lock.keys()`.
    pub fn multi_keys(&mut self, m: MultiHandle) -> Result<Vec<String>> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_keys(&mut self.store, m.0)
    }

    /// `multi-lock.ttl-ms()`.
    pub fn multi_ttl_ms(&mut self, m: MultiHandle) -> Result<u64> {
        self.bindings
            .keel_lock_multi()
            .multi_lock()
            .call_ttl_ms(&mut self.store, m.0)
    }

    /// Drops the resource (does not release the keys).
    pub fn drop_multi(&mut self, m: MultiHandle) -> Result<()> {
        m.0.resource_drop(&mut self.store)
    }

    /// `conformance.properties()`.
    pub fn properties(&mut self) -> Result<Vec<String>> {
        self.bindings
            .keel_lock_conformance()
            .call_properties(&mut self.store)
    }

    /// `conformance.check-all(options)`.
    pub fn check_all(
        &mut self,
        bucket: &str,
        key_prefix: &str,
        short_ttl_ms: u64,
        settle_ms: u64,
        contenders: u32,
    ) -> Answer<Vec<Outcome>> {
        let options = ConformanceOptions {
            bucket: bucket.to_owned(),
            key_prefix: key_prefix.to_owned(),
            short_ttl_ms,
            settle_ms,
            contenders,
        };
        self.bindings
            .keel_lock_conformance()
            .call_check_all(&mut self.store, &options)
    }
}
