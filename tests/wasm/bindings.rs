//! The Rust-level JS bindings (`keel_lock::js`) that Rust code can call: `setLockStore` /
//! `getLockStore` and the checks behind them, the `MemoryLockStore` class (its `acquireShared`
//! too), a JS store's `acquireShared` as the seam calls and judges it, and `checkLockStore`,
//! called with JS values the way JS calls them. Shared by `tests/wasm_node.rs` (Node) and
//! `tests/wasm_browser.rs` (headless Chromium and Firefox). The lock API itself (`lock()`, the
//! JS `Lock` class over the numeric exports) is tested through the npm package, in Node and in
//! the same two browsers (`tests/package`).
//!
//! Rules these tests keep:
//! - Each test installs the store it needs with `setLockStore` and uses its own keys, so the
//!   order the runner picks (it runs one test at a time) never matters.
//! - Real timers only, and no assertions on durations.
//! - JS stores and callbacks are Rust closures (`Closure`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use js_sys::{Array, Date, Function, Object, Promise, RangeError, Reflect, TypeError};
use keel_lock::conformance::PROPERTIES;
use keel_lock::js::{
    check_lock_store, get_lock_store, memory_call, set_lock_store, JsMemoryLockStore,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use wasm_bindgen_test::wasm_bindgen_test;

// =============================================================================================
// Helpers
// =============================================================================================

type JsResult = Result<JsValue, JsValue>;

thread_local! {
    static NEXT_KEY: Cell<u32> = const { Cell::new(0) };
}

/// A key no other test (or earlier part of this test) has used.
fn fresh_key(tag: &str) -> String {
    let n = NEXT_KEY.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    format!("wasm-test:{tag}:{n}")
}

fn undef() -> JsValue {
    JsValue::UNDEFINED
}

fn num(n: f64) -> JsValue {
    JsValue::from_f64(n)
}

fn s(text: &str) -> JsValue {
    JsValue::from_str(text)
}

async fn sleep(ms: u32) {
    gloo_timers::future::TimeoutFuture::new(ms).await;
}

async fn settle(p: Promise) -> JsResult {
    JsFuture::from(p).await
}

#[track_caller]
fn fulfilled_sync<T>(r: Result<T, JsValue>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: failed with {e:?}"),
    }
}

#[track_caller]
fn failed_sync<T>(r: Result<T, JsValue>, what: &str) -> JsValue {
    match r {
        Ok(_) => panic!("{what}: expected an error, but it succeeded"),
        Err(e) => e,
    }
}

async fn fulfilled(p: Promise, what: &str) -> JsValue {
    match settle(p).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: rejected with {e:?}"),
    }
}

async fn rejected(p: Promise, what: &str) -> JsValue {
    match settle(p).await {
        Ok(v) => panic!("{what}: expected a rejection, but it resolved to {v:?}"),
        Err(e) => e,
    }
}

fn get(target: &JsValue, name: &str) -> JsValue {
    Reflect::get(target, &s(name)).unwrap_or_else(|e| panic!("reading .{name}: {e:?}"))
}

fn set(target: &JsValue, name: &str, value: &JsValue) {
    Reflect::set(target, &s(name), value).unwrap_or_else(|e| panic!("setting .{name}: {e:?}"));
}

fn message(error: &JsValue) -> String {
    Reflect::get(error, &s("message"))
        .ok()
        .and_then(|m| m.as_string())
        .unwrap_or_default()
}

#[track_caller]
fn assert_type_error(error: &JsValue, what: &str) {
    assert!(
        error.dyn_ref::<TypeError>().is_some(),
        "{what}: expected a TypeError, got {error:?}"
    );
    assert!(
        !message(error).is_empty(),
        "{what}: the TypeError has no message"
    );
}

#[track_caller]
fn assert_range_error(error: &JsValue, what: &str) {
    assert!(
        error.dyn_ref::<RangeError>().is_some(),
        "{what}: expected a RangeError, got {error:?}"
    );
    assert!(
        !message(error).is_empty(),
        "{what}: the RangeError has no message"
    );
}

#[track_caller]
fn assert_same(actual: &JsValue, expected: &JsValue, what: &str) {
    assert!(
        Object::is(actual, expected),
        "{what}: expected the very same JS value {expected:?}, got {actual:?}"
    );
}

/// A plain object literal from pairs.
fn object(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in pairs {
        set(&o, k, v);
    }
    o.into()
}

// --- JS functions made from Rust closures ---------------------------------------------------

fn fn1(f: impl Fn(JsValue) -> JsResult + 'static) -> Function {
    Closure::<dyn Fn(JsValue) -> JsResult>::new(f)
        .into_js_value()
        .unchecked_into()
}

fn fn2(f: impl Fn(JsValue, JsValue) -> JsResult + 'static) -> Function {
    Closure::<dyn Fn(JsValue, JsValue) -> JsResult>::new(f)
        .into_js_value()
        .unchecked_into()
}

fn fn3(f: impl Fn(JsValue, JsValue, JsValue) -> JsResult + 'static) -> Function {
    Closure::<dyn Fn(JsValue, JsValue, JsValue) -> JsResult>::new(f)
        .into_js_value()
        .unchecked_into()
}

/// A promise that resolves to `value` after `ms` ms of real time.
fn later(ms: u32, value: JsValue) -> Promise {
    future_to_promise(async move {
        sleep(ms).await;
        Ok(value)
    })
}

/// Installs a fresh built-in `MemoryLockStore` as the current store and returns its JS object.
fn use_memory_store() -> JsValue {
    let store: JsValue = JsMemoryLockStore::new().into();
    fulfilled_sync(
        set_lock_store(store.clone()),
        "setLockStore(new MemoryLockStore())",
    );
    store
}

// --- a lock store written in JS ---------------------------------------------------------------

/// How a [`Recorder`] store hands back its answers.
#[derive(Clone, Copy)]
enum Answer {
    /// Plain values.
    Plain,
    /// Already-resolved promises (settled in a microtask).
    Resolved,
    /// Promises resolved by a real timer after this many ms, like a network store.
    After(u32),
}

/// A correct JS lock store (a map with expiry, judged by `Date.now()`) that records every call.
/// Its decisions are made synchronously when a method is called — atomic, like a real store's
/// server — and answered according to [`Answer`].
struct Recorder {
    rows: RefCell<HashMap<String, (String, f64)>>,
    calls: RefCell<Vec<String>>,
    owners: RefCell<Vec<String>>,
    answer: Answer,
}

impl Recorder {
    fn answer(&self, value: JsValue) -> JsResult {
        Ok(match self.answer {
            Answer::Plain => value,
            Answer::Resolved => Promise::resolve(&value).into(),
            Answer::After(ms) => later(ms, value).into(),
        })
    }

    fn note(&self, method: &str) {
        self.calls.borrow_mut().push(method.to_owned());
    }

    fn live_owner(&self, key: &str) -> Option<(String, f64)> {
        let now = Date::now();
        self.rows
            .borrow()
            .get(key)
            .filter(|(_, expires)| *expires > now)
            .cloned()
    }

    fn acquire(&self, key: &str, owner: &str, ttl: f64) -> bool {
        self.note("acquire");
        self.owners.borrow_mut().push(owner.to_owned());
        if self.live_owner(key).is_some() {
            return false;
        }
        self.rows
            .borrow_mut()
            .insert(key.to_owned(), (owner.to_owned(), Date::now() + ttl));
        true
    }

    fn release(&self, key: &str, owner: &str) -> bool {
        self.note("release");
        match self.live_owner(key) {
            Some((o, _)) if o == owner => self.rows.borrow_mut().remove(key).is_some(),
            _ => false,
        }
    }

    fn extend(&self, key: &str, owner: &str, ttl: f64) -> bool {
        self.note("extend");
        match self.live_owner(key) {
            Some((o, _)) if o == owner => {
                self.rows
                    .borrow_mut()
                    .insert(key.to_owned(), (o, Date::now() + ttl));
                true
            }
            _ => false,
        }
    }

    fn is_locked(&self, key: &str) -> bool {
        self.note("isLocked");
        self.live_owner(key).is_some()
    }

    fn remaining_time(&self, key: &str) -> JsValue {
        self.note("remainingTime");
        match self.live_owner(key) {
            Some((_, expires)) => num(expires - Date::now()),
            None => JsValue::NULL,
        }
    }
}

/// The arguments a store method receives, checked for their JS types.
#[track_caller]
fn key_arg(v: &JsValue) -> String {
    v.as_string()
        .unwrap_or_else(|| panic!("store got a non-string key {v:?}"))
}

#[track_caller]
fn owner_arg(v: &JsValue) -> String {
    v.as_string()
        .unwrap_or_else(|| panic!("store got a non-string owner {v:?}"))
}

#[track_caller]
fn ttl_arg(v: &JsValue) -> f64 {
    let ttl = v
        .as_f64()
        .unwrap_or_else(|| panic!("store got a non-number TTL {v:?}"));
    assert!(ttl >= 1.0 && ttl.fract() == 0.0, "store got TTL {ttl}");
    ttl
}

/// A new JS store object `{ acquire, release, extend, isLocked, remainingTime }` and its recorder.
fn js_store(answer: Answer) -> (JsValue, Rc<Recorder>) {
    let rec = Rc::new(Recorder {
        rows: RefCell::new(HashMap::new()),
        calls: RefCell::new(Vec::new()),
        owners: RefCell::new(Vec::new()),
        answer,
    });
    let (r1, r2, r3, r4, r5) = (
        rec.clone(),
        rec.clone(),
        rec.clone(),
        rec.clone(),
        rec.clone(),
    );
    let store = object(&[
        (
            "acquire",
            fn3(move |k, o, t| {
                let won = r1.acquire(&key_arg(&k), &owner_arg(&o), ttl_arg(&t));
                r1.answer(won.into())
            })
            .into(),
        ),
        (
            "release",
            fn2(move |k, o| {
                let released = r2.release(&key_arg(&k), &owner_arg(&o));
                r2.answer(released.into())
            })
            .into(),
        ),
        (
            "extend",
            fn3(move |k, o, t| {
                let extended = r3.extend(&key_arg(&k), &owner_arg(&o), ttl_arg(&t));
                r3.answer(extended.into())
            })
            .into(),
        ),
        (
            "isLocked",
            fn1(move |k| {
                let locked = r4.is_locked(&key_arg(&k));
                r4.answer(locked.into())
            })
            .into(),
        ),
        (
            "remainingTime",
            fn1(move |k| {
                let left = r5.remaining_time(&key_arg(&k));
                r5.answer(left)
            })
            .into(),
        ),
    ]);
    (store, rec)
}

/// A copy of `store` with one method replaced.
fn with_method(store: &JsValue, name: &str, method: Function) -> JsValue {
    let copy: JsValue = Object::assign(&Object::new(), store.unchecked_ref()).into();
    set(&copy, name, &method);
    copy
}

#[wasm_bindgen_test]
fn set_lock_store_refuses_what_is_not_a_store() {
    let before = use_memory_store();
    for (what, value) in [
        ("undefined", undef()),
        ("null", JsValue::NULL),
        ("5", num(5.0)),
        ("\"redis\"", s("redis")),
        ("true", JsValue::TRUE),
    ] {
        let e = failed_sync(set_lock_store(value), what);
        assert_type_error(&e, &format!("setLockStore({what})"));
    }

    let (good, _) = js_store(Answer::Plain);
    for method in ["acquire", "release", "extend", "isLocked", "remainingTime"] {
        // The method missing…
        let missing: JsValue = Object::assign(&Object::new(), good.unchecked_ref()).into();
        Reflect::delete_property(missing.unchecked_ref::<Object>(), &s(method)).unwrap();
        let e = failed_sync(set_lock_store(missing), method);
        assert_type_error(&e, &format!("setLockStore(store without {method})"));
        assert!(
            message(&e).contains(method),
            "the TypeError must name {method}: {}",
            message(&e)
        );
        // …or not a function.
        let not_fn: JsValue = Object::assign(&Object::new(), good.unchecked_ref()).into();
        set(&not_fn, method, &JsValue::TRUE);
        let e = failed_sync(set_lock_store(not_fn), method);
        assert_type_error(&e, &format!("setLockStore(store with {method}: true)"));
        assert!(message(&e).contains(method), "{}", message(&e));
    }
    let e = failed_sync(set_lock_store(Object::new().into()), "{}");
    assert_type_error(&e, "setLockStore({})");

    // A refused store changes nothing.
    assert_same(
        &get_lock_store(),
        &before,
        "getLockStore() after refused stores",
    );
}

#[wasm_bindgen_test]
fn memory_store_methods_check_their_arguments() {
    let m = JsMemoryLockStore::new();
    // The class's methods, as memory-store.js defines them: one export, the operation by number.
    let acquire =
        |k: JsValue, o: JsValue, t: JsValue| memory_call(&m, 0, k, o, t, undef(), undef());
    let boolean = |v: JsValue| v.as_bool().expect("answers a boolean");
    let release =
        |k: JsValue, o: JsValue| memory_call(&m, 1, k, o, undef(), undef(), undef()).map(boolean);
    let extend = |k: JsValue, o: JsValue, t: JsValue| {
        memory_call(&m, 2, k, o, t, undef(), undef()).map(boolean)
    };
    let is_locked =
        |k: JsValue| memory_call(&m, 3, k, undef(), undef(), undef(), undef()).map(boolean);
    let remaining_time = |k: JsValue| memory_call(&m, 4, k, undef(), undef(), undef(), undef());
    let k = s(&fresh_key("memory-args"));
    let owner = s("owner-1");

    let e = failed_sync(acquire(s(""), owner.clone(), num(100.0)), "empty key");
    assert_range_error(&e, "MemoryLockStore.acquire(\"\", …)");
    let e = failed_sync(acquire(num(1.0), owner.clone(), num(100.0)), "key 1");
    assert_type_error(&e, "MemoryLockStore.acquire(1, …)");
    let e = failed_sync(acquire(k.clone(), num(1.0), num(100.0)), "owner 1");
    assert_type_error(&e, "MemoryLockStore.acquire(key, 1, …)");
    let e = failed_sync(acquire(k.clone(), s("has space"), num(100.0)), "owner");
    assert_range_error(&e, "MemoryLockStore.acquire(key, \"has space\", …)");
    let e = failed_sync(acquire(k.clone(), owner.clone(), undef()), "no ttl");
    assert_type_error(&e, "MemoryLockStore.acquire(key, owner)");
    let e = failed_sync(extend(k.clone(), owner.clone(), num(0.0)), "ttl 0");
    assert_range_error(&e, "MemoryLockStore.extend(key, owner, 0)");
    let e = failed_sync(release(k.clone(), undef()), "no owner");
    assert_type_error(&e, "MemoryLockStore.release(key)");

    // And it is a correct store through its own methods.
    let grant = fulfilled_sync(acquire(k.clone(), owner.clone(), num(10_000.0)), "acquire");
    let fence = get(&grant, "fence")
        .as_f64()
        .expect("acquire answers { fence }");
    assert!(fence >= 1.0 && fence.fract() == 0.0, "fence {fence}");
    assert_eq!(
        fulfilled_sync(acquire(k.clone(), s("owner-2"), num(10_000.0)), "acquire 2"),
        JsValue::FALSE
    );
    assert!(fulfilled_sync(is_locked(k.clone()), "isLocked"));
    let left = fulfilled_sync(remaining_time(k.clone()), "remainingTime")
        .as_f64()
        .expect("remainingTime of a held key");
    assert!(left > 0.0 && left <= 10_000.0, "remainingTime {left}");
    assert!(!fulfilled_sync(
        release(k.clone(), s("owner-2")),
        "stranger's release"
    ));
    assert!(!fulfilled_sync(
        extend(k.clone(), s("owner-2"), num(5.0)),
        "stranger's extend"
    ));
    assert!(fulfilled_sync(
        extend(k.clone(), owner.clone(), num(10_000.0)),
        "extend"
    ));
    assert!(fulfilled_sync(release(k.clone(), owner.clone()), "release"));
    assert!(!fulfilled_sync(
        is_locked(k.clone()),
        "isLocked after release"
    ));
    assert!(fulfilled_sync(remaining_time(k), "remainingTime").is_null());
}

// =============================================================================================
// setLockStore / getLockStore and the memory store
// =============================================================================================

#[wasm_bindgen_test]
fn get_lock_store_returns_the_object_that_was_set() {
    let memory = use_memory_store();
    assert_same(
        &get_lock_store(),
        &memory,
        "getLockStore() after a MemoryLockStore",
    );
    assert_same(&get_lock_store(), &get_lock_store(), "getLockStore() twice");
    let (store, _) = js_store(Answer::Resolved);
    fulfilled_sync(set_lock_store(store.clone()), "setLockStore(js store)");
    assert_same(&get_lock_store(), &store, "getLockStore() after a JS store");
    fulfilled_sync(set_lock_store(memory.clone()), "setLockStore(memory) again");
    assert_same(
        &get_lock_store(),
        &memory,
        "getLockStore() after switching back",
    );
}

#[wasm_bindgen_test]
async fn memory_store_does_not_grow_without_bound() {
    let memory = JsMemoryLockStore::new();
    let size = || memory.size();
    const PER_WAVE: usize = 600;
    let mut largest = 0;
    for wave in 0..5 {
        for i in 0..PER_WAVE {
            let key = s(&format!("wasm-test:sweep:{wave}:{i}"));
            let grant = fulfilled_sync(
                memory_call(&memory, 0, key, s("owner"), num(30.0), undef(), undef()),
                "acquire",
            );
            assert!(grant.is_object(), "a fresh key is granted: {grant:?}");
            largest = largest.max(size());
        }
        sleep(70).await; // every key of this wave has expired
    }
    // 3000 keys were taken; expired rows are swept as new keys arrive, so the map stays within
    // about twice the keys alive at once (at most one wave) plus a small floor.
    assert!(
        largest <= 2 * PER_WAVE + 64,
        "the memory store grew to {largest} rows"
    );
    memory.purge_expired();
    assert_eq!(size(), 0, "purgeExpired() left rows behind");
}

/// How long the short TTL of the expiry properties is, for a store that must pass: the owner's
/// extend has to reach a hold of that TTL before it runs out, whatever stalls a loaded machine.
const PASSING_SHORT_TTL_MS: f64 = 1_000.0;
/// For a store that must fail a property unrelated to timing: the kit runs fast.
const FAILING_SHORT_TTL_MS: f64 = 100.0;

async fn conformance(store: JsValue, short_ttl_ms: f64) -> Vec<(String, bool, String)> {
    let options = object(&[
        ("shortTtlMs", num(short_ttl_ms)),
        ("settleMs", num(60.0)),
        ("contenders", num(20.0)),
    ]);
    let results = fulfilled(check_lock_store(store, options), "checkLockStore").await;
    assert!(Array::is_array(&results), "{results:?}");
    results
        .unchecked_into::<Array>()
        .iter()
        .map(|r| {
            (
                get(&r, "property").as_string().unwrap_or_default(),
                get(&r, "ok").as_bool().expect("ok is a boolean"),
                get(&r, "message").as_string().unwrap_or_default(),
            )
        })
        .collect()
}

#[wasm_bindgen_test]
async fn check_lock_store_passes_the_memory_store() {
    let results = conformance(JsMemoryLockStore::new().into(), PASSING_SHORT_TTL_MS).await;
    let names: Vec<&str> = results.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(names, PROPERTIES, "one result per property, in order");
    for (property, ok, message) in &results {
        assert!(ok, "MemoryLockStore failed {property}: {message}");
    }
}

#[wasm_bindgen_test]
async fn check_lock_store_passes_a_correct_js_store_and_catches_a_broken_one() {
    let (store, _) = js_store(Answer::After(1));
    for (property, ok, message) in conformance(store.clone(), PASSING_SHORT_TTL_MS).await {
        assert!(ok, "the test JS store failed {property}: {message}");
    }

    // A store whose release ignores the owner: anyone can free anyone's lock.
    let broken = broken_release_store();
    let results = conformance(broken, FAILING_SHORT_TTL_MS).await;
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(p, _, _)| p.as_str())
        .collect();
    assert!(
        failed.contains(&"release_requires_owner"),
        "a release that ignores the owner must fail release_requires_owner; failed: {failed:?}"
    );

    // Bad arguments.
    let e = rejected(check_lock_store(num(5.0), undef()), "checkLockStore(5)").await;
    assert_type_error(&e, "checkLockStore(5)");
    let e = rejected(
        check_lock_store(
            JsMemoryLockStore::new().into(),
            object(&[("shortTtlMs", num(-1.0))]),
        ),
        "checkLockStore(store, {shortTtlMs: -1})",
    )
    .await;
    assert_range_error(&e, "checkLockStore(store, {shortTtlMs: -1})");
}

/// A JS store whose `release(key, owner)` frees the key whoever asks.
fn broken_release_store() -> JsValue {
    let (store, rec) = js_store(Answer::Resolved);
    let careless = fn2(move |k, _owner| {
        rec.note("release");
        let freed = rec.rows.borrow_mut().remove(&key_arg(&k)).is_some();
        Ok(Promise::resolve(&JsValue::from(freed)).into())
    });
    with_method(&store, "release", careless)
}

// =============================================================================================
// Shared holds: the memory store's acquireShared and a JS store's
// =============================================================================================

/// `MemoryLockStore.prototype.acquireShared(key, owner, ttlMs, weight, limit)` as
/// `memory-store.js` defines it: `__kMemoryCall` with the operation's number and the share's two
/// numbers.
fn acquire_shared(
    m: &JsMemoryLockStore,
    k: &str,
    owner: &str,
    ttl: f64,
    weight: JsValue,
    limit: JsValue,
) -> JsResult {
    memory_call(
        m,
        OP_ACQUIRE_SHARED,
        s(k),
        s(owner),
        num(ttl),
        weight,
        limit,
    )
}

/// `protocol.rs`'s number for `acquireShared` (`OP_ACQUIRE_SHARED`).
const OP_ACQUIRE_SHARED: u32 = 6;

#[wasm_bindgen_test]
fn memory_store_acquire_shared_keeps_the_limit_weights_and_fences() {
    let m = JsMemoryLockStore::new();
    let k = fresh_key("shared");
    let take = |owner: &str, weight: f64, limit: f64| {
        fulfilled_sync(
            acquire_shared(&m, &k, owner, 10_000.0, num(weight), num(limit)),
            &format!("acquireShared({owner}, {weight} of {limit})"),
        )
    };
    let fence = |grant: &JsValue| -> f64 {
        get(grant, "fence")
            .as_f64()
            .unwrap_or_else(|| panic!("a grant is {{ fence }}, got {grant:?}"))
    };

    let a = take("owner-a", 2.0, 3.0);
    let fa = fence(&a);
    assert_eq!(take("owner-b", 2.0, 3.0), JsValue::FALSE, "2 + 2 > 3");
    let b = take("owner-b", 1.0, 3.0);
    assert!(fence(&b) > fa, "every grant a higher fence");
    assert_eq!(
        take("owner-c", 1.0, 3.0),
        JsValue::FALSE,
        "all 3 permits held"
    );

    // A plain acquire waits for every permit.
    let plain = memory_call(&m, 0, s(&k), s("owner-x"), num(10_000.0), undef(), undef());
    assert_eq!(
        fulfilled_sync(plain, "acquire beside permits"),
        JsValue::FALSE
    );
    let locked = memory_call(&m, 3, s(&k), undef(), undef(), undef(), undef());
    assert_eq!(fulfilled_sync(locked, "isLocked"), JsValue::TRUE);

    // Another limit answers the held one as a number (JS makes it { heldLimit }).
    assert_eq!(
        take("owner-d", 1.0, 4.0).as_f64(),
        Some(3.0),
        "limit mismatch"
    );
    assert_eq!(
        take("owner-d", 1.0, 4_294_967_295.0).as_f64(),
        Some(3.0),
        "a read lock's limit on a semaphore's key"
    );

    // Each owner releases its own hold only; its weight comes free.
    let release = |owner: &str| {
        fulfilled_sync(
            memory_call(&m, 1, s(&k), s(owner), undef(), undef(), undef()),
            "release",
        )
    };
    assert_eq!(release("owner-c"), JsValue::FALSE, "a stranger's release");
    assert_eq!(release("owner-a"), JsValue::TRUE);
    let c = take("owner-c", 2.0, 3.0);
    assert!(fence(&c) > fence(&b));
    assert_eq!(release("owner-b"), JsValue::TRUE);
    assert_eq!(release("owner-c"), JsValue::TRUE);
    // Free again: any limit goes.
    let d = take("owner-d", 4.0, 4.0);
    assert!(fence(&d) > fence(&c));
}

#[wasm_bindgen_test]
fn memory_store_acquire_shared_refuses_bad_terms_with_clear_errors() {
    let m = JsMemoryLockStore::new();
    let k = fresh_key("shared-bad");
    let call = |weight: JsValue, limit: JsValue| {
        acquire_shared(&m, &k, "owner-1", 10_000.0, weight, limit)
    };
    for (what, weight, limit) in [
        ("weight undefined", undef(), num(3.0)),
        ("weight \"1\"", s("1"), num(3.0)),
        ("weight null", JsValue::NULL, num(3.0)),
        ("limit undefined", num(1.0), undef()),
        ("limit \"3\"", num(1.0), s("3")),
        ("limit {}", num(1.0), Object::new().into()),
        ("limit true", num(1.0), JsValue::TRUE),
    ] {
        let e = failed_sync(call(weight, limit), what);
        assert_type_error(&e, &format!("acquireShared with {what}"));
    }
    for (what, weight, limit) in [
        ("limit 0", 1.0, 0.0),
        ("limit -1", 1.0, -1.0),
        ("limit 1.5", 1.0, 1.5),
        ("limit NaN", 1.0, f64::NAN),
        ("limit Infinity", 1.0, f64::INFINITY),
        ("limit 2^32", 1.0, 4_294_967_296.0),
        ("weight 0", 0.0, 3.0),
        ("weight -1", -1.0, 3.0),
        ("weight 1.5", 1.5, 3.0),
        ("weight NaN", f64::NAN, 3.0),
        ("weight above the limit", 4.0, 3.0),
    ] {
        let e = failed_sync(call(num(weight), num(limit)), what);
        assert_range_error(&e, &format!("acquireShared with {what}"));
    }
    // The key and owner are checked as acquire checks them.
    let e = failed_sync(
        memory_call(
            &m,
            OP_ACQUIRE_SHARED,
            s(""),
            s("o"),
            num(100.0),
            num(1.0),
            num(2.0),
        ),
        "empty key",
    );
    assert_range_error(&e, "acquireShared(\"\", …)");
    let e = failed_sync(
        memory_call(
            &m,
            OP_ACQUIRE_SHARED,
            s(&k),
            num(1.0),
            num(100.0),
            num(1.0),
            num(2.0),
        ),
        "owner 1",
    );
    assert_type_error(&e, "acquireShared(key, 1, …)");
    let e = failed_sync(
        memory_call(
            &m,
            OP_ACQUIRE_SHARED,
            s(&k),
            s("o"),
            undef(),
            num(1.0),
            num(2.0),
        ),
        "no ttl",
    );
    assert_type_error(&e, "acquireShared(key, owner, undefined, …)");
    // An operation number that names none is a TypeError, not a trap.
    let e = failed_sync(
        memory_call(&m, 99, s(&k), s("o"), num(100.0), num(1.0), num(2.0)),
        "op 99",
    );
    assert_type_error(&e, "__kMemoryCall(store, 99, …)");

    // Nothing was taken, and the store still works.
    let grant = fulfilled_sync(call(num(3.0), num(3.0)), "acquireShared after the errors");
    assert!(get(&grant, "fence").as_f64().is_some(), "{grant:?}");
}

/// A JS store with `acquireShared(key, owner, ttlMs, weight, limit)` answering `answer()` and
/// recording the arguments it got.
fn shared_js_store(answer: impl Fn() -> JsValue + 'static) -> (JsValue, Rc<RefCell<Vec<Array>>>) {
    let (store, _) = js_store(Answer::Plain);
    let calls = Rc::new(RefCell::new(Vec::new()));
    let seen = calls.clone();
    let method: Function =
        Closure::<dyn Fn(JsValue, JsValue, JsValue, JsValue, JsValue) -> JsResult>::new(
            move |k, o, t, w, l| {
                seen.borrow_mut().push(Array::of5(&k, &o, &t, &w, &l));
                Ok(answer())
            },
        )
        .into_js_value()
        .unchecked_into();
    (with_method(&store, "acquireShared", method), calls)
}

#[wasm_bindgen_test]
async fn a_js_store_acquire_shared_is_called_with_the_share_and_its_answers_judged() {
    use keel_lock::js::JsLockStore;
    use keel_lock::{Key, LockStore, OwnerToken, Share, SharedGrant, Ttl};

    let key = Key::new(fresh_key("js-shared")).unwrap();
    let owner = OwnerToken::mint().unwrap();
    let ttl = Ttl::from_ms(5_000).unwrap();
    let share = Share::new(2, 5).unwrap();
    let ask = |answer: JsValue| {
        let (object, calls) = shared_js_store(move || answer.clone());
        let store = JsLockStore::new(object).expect("a store with acquireShared");
        (store, calls)
    };

    // The call carries the key, the owner, the TTL, the weight and the limit, as JS values.
    let (store, calls) = ask(object(&[("fence", num(7.0))]));
    let answer = store.acquire_shared(&key, &owner, ttl, share).await;
    match answer {
        Ok(SharedGrant::Granted(grant)) => {
            assert_eq!(grant.fence().map(|f| f.get()), Some(7), "{grant:?}")
        }
        other => panic!("{{ fence: 7 }} is a grant, got {other:?}"),
    }
    let args = calls.borrow()[0].clone();
    assert_eq!(args.get(0).as_string().as_deref(), Some(key.as_str()));
    assert_eq!(args.get(1).as_string().as_deref(), Some(owner.as_str()));
    assert_eq!(args.get(2).as_f64(), Some(5_000.0));
    assert_eq!(args.get(3).as_f64(), Some(2.0), "weight");
    assert_eq!(args.get(4).as_f64(), Some(5.0), "limit");

    let (store, _) = ask(JsValue::FALSE);
    assert!(matches!(
        store.acquire_shared(&key, &owner, ttl, share).await,
        Ok(SharedGrant::Busy)
    ));
    let (store, _) = ask(object(&[("heldLimit", num(3.0))]));
    assert!(matches!(
        store.acquire_shared(&key, &owner, ttl, share).await,
        Ok(SharedGrant::LimitMismatch { held: 3 })
    ));

    // Answers outside the seam's rules are TypeErrors naming the method, not traps.
    for (what, bad) in [
        (
            "{ heldLimit: \"three\" }",
            object(&[("heldLimit", s("three"))]),
        ),
        ("{ heldLimit: 0 }", object(&[("heldLimit", num(0.0))])),
        ("{ heldLimit: 1.5 }", object(&[("heldLimit", num(1.5))])),
        ("{ fence: -1 }", object(&[("fence", num(-1.0))])),
        ("\"yes\"", s("yes")),
        ("undefined", undef()),
    ] {
        let (store, _) = ask(bad);
        let e = match store.acquire_shared(&key, &owner, ttl, share).await {
            Err(e) => e,
            Ok(other) => panic!("acquireShared answering {what}: expected an error, got {other:?}"),
        };
        assert_type_error(&e, &format!("acquireShared answering {what}"));
        assert!(
            message(&e).contains("acquireShared"),
            "the TypeError must name acquireShared: {}",
            message(&e)
        );
    }

    // A store without acquireShared is not one that keeps shared holds; one whose
    // acquireShared is not a function is refused when it is set.
    let (plain, _) = js_store(Answer::Plain);
    let store = JsLockStore::new(plain.clone()).unwrap();
    assert!(matches!(
        store.acquire_shared(&key, &owner, ttl, share).await,
        Ok(SharedGrant::Unsupported)
    ));
    let e = failed_sync(
        set_lock_store(with_method_value(&plain, "acquireShared", &JsValue::TRUE)),
        "acquireShared: true",
    );
    assert_type_error(&e, "setLockStore(store with acquireShared: true)");
    assert!(message(&e).contains("acquireShared"), "{}", message(&e));
}

/// A copy of `store` with `name` set to `value` (a method or not).
fn with_method_value(store: &JsValue, name: &str, value: &JsValue) -> JsValue {
    let copy: JsValue = Object::assign(&Object::new(), store.unchecked_ref()).into();
    set(&copy, name, value);
    copy
}
