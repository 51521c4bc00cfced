//! The Rust-level JS bindings (`keel_lock::js`) that Rust code can call: `setLockStore` /
//! `getLockStore` and the checks behind them, the `MemoryLockStore` class, and `checkLockStore`,
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
    // The class's methods, as api.js defines them: one export, the operation by number.
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

async fn conformance(store: JsValue) -> Vec<(String, bool, String)> {
    let options = object(&[
        ("shortTtlMs", num(100.0)),
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
    let results = conformance(JsMemoryLockStore::new().into()).await;
    let names: Vec<&str> = results.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(names, PROPERTIES, "one result per property, in order");
    for (property, ok, message) in &results {
        assert!(ok, "MemoryLockStore failed {property}: {message}");
    }
}

#[wasm_bindgen_test]
async fn check_lock_store_passes_a_correct_js_store_and_catches_a_broken_one() {
    let (store, _) = js_store(Answer::After(1));
    for (property, ok, message) in conformance(store.clone()).await {
        assert!(ok, "the test JS store failed {property}: {message}");
    }

    // A store whose release ignores the owner: anyone can free anyone's lock.
    let broken = broken_release_store();
    let results = conformance(broken).await;
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
