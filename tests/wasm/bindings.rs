//! The JS bindings (`keel_lock::js`), exercised the way JS callers use them: every exported
//! function and `Lock` method is called with JS values and its promise awaited. Shared by
//! `tests/wasm_node.rs` (Node) and `tests/wasm_browser.rs` (headless Chromium and Firefox).
//!
//! Rules these tests keep:
//! - Each test installs the store it needs with `setLockStore` and uses its own keys, so the
//!   order the runner picks (it runs one test at a time) never matters.
//! - Real timers only, and no assertions on durations. TTLs that must run out are short
//!   (30 ms, then a wait well past them); TTLs that must *not* run out while the test works are
//!   long, so a slow, shared machine cannot make a lock expire mid-test.
//! - JS stores and callbacks are Rust closures (`Closure`), except the `crypto.getRandomValues`
//!   spy, which is a few lines of JS built with the `Function` constructor.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use js_sys::{Array, Date, Function, Object, Promise, RangeError, Reflect, TypeError};
use keel_lock::conformance::PROPERTIES;
use keel_lock::input::{MAX_KEY_BYTES, MAX_TTL_MS};
use keel_lock::js::{
    check_lock_store, get_lock_store, lock, restore_lock, set_lock_store, JsLock, JsMemoryLockStore,
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

async fn fulfilled_bool(p: Promise, what: &str) -> bool {
    let v = fulfilled(p, what).await;
    v.as_bool()
        .unwrap_or_else(|| panic!("{what}: expected a boolean, got {v:?}"))
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

/// `getRemainingTime()`'s answer for an unheld key: `null`, as documented.
fn no_time_left(v: &JsValue) -> bool {
    v.is_null()
}

/// `value instanceof class`, by walking the prototype chain.
fn is_instance(value: &JsValue, class: &Function) -> bool {
    let wanted = get(class, "prototype");
    let mut proto: JsValue = Object::get_prototype_of(value).into();
    while proto.is_object() {
        if Object::is(&proto, &wanted) {
            return true;
        }
        proto = Object::get_prototype_of(&proto).into();
    }
    false
}

/// A plain object literal from pairs.
fn object(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in pairs {
        set(&o, k, v);
    }
    o.into()
}

fn js_error(text: &str) -> JsValue {
    js_sys::Error::new(text).into()
}

// --- JS functions made from Rust closures ---------------------------------------------------

fn fn0(f: impl Fn() -> JsResult + 'static) -> Function {
    Closure::<dyn Fn() -> JsResult>::new(f)
        .into_js_value()
        .unchecked_into()
}

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

/// A `run` callback that counts its calls and answers `value` synchronously.
fn counting_task(calls: &Rc<Cell<u32>>, value: JsValue) -> Function {
    let calls = calls.clone();
    fn0(move || {
        calls.set(calls.get() + 1);
        Ok(value.clone())
    })
}

/// A `run` callback that counts its calls and answers a promise of `value` after `ms` ms.
fn counting_async_task(calls: &Rc<Cell<u32>>, ms: u32, value: JsValue) -> Function {
    let calls = calls.clone();
    fn0(move || {
        calls.set(calls.get() + 1);
        Ok(later(ms, value.clone()).into())
    })
}

/// Splits a `run()` result into `(ran, result)`, checking it is a two-element array.
#[track_caller]
fn run_outcome(v: &JsValue) -> (bool, JsValue) {
    assert!(Array::is_array(v), "run() must resolve an array, got {v:?}");
    let a: &Array = v.unchecked_ref();
    assert_eq!(a.length(), 2, "run() must resolve a pair, got {v:?}");
    let ran = a
        .get(0)
        .as_bool()
        .unwrap_or_else(|| panic!("run()[0] must be a boolean, got {v:?}"));
    (ran, a.get(1))
}

// --- locks ------------------------------------------------------------------------------------

#[track_caller]
fn new_lock(key: &str, ttl_ms: f64) -> JsLock {
    fulfilled_sync(lock(s(key), num(ttl_ms)), "lock(key, ttl)")
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

    fn count(&self, method: &str) -> usize {
        self.calls.borrow().iter().filter(|m| *m == method).count()
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

/// Which store a parameterised test runs against.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The built-in `MemoryLockStore` (driven without JS calls).
    Memory,
    /// A JS store answering promises a timer resolves.
    Js,
}

/// Installs a fresh store of `kind`; its recorder when it is a JS store.
fn install(kind: Kind) -> Option<Rc<Recorder>> {
    match kind {
        Kind::Memory => {
            use_memory_store();
            None
        }
        Kind::Js => {
            let (store, rec) = js_store(Answer::After(1));
            fulfilled_sync(set_lock_store(store), "setLockStore(js store)");
            Some(rec)
        }
    }
}

// =============================================================================================
// Bad input: TypeError for the wrong type, RangeError for a value out of range, never a trap
// =============================================================================================

#[wasm_bindgen_test]
fn lock_rejects_keys_that_are_not_strings() {
    use_memory_store();
    let not_strings = [
        ("undefined", undef()),
        ("null", JsValue::NULL),
        ("number", num(42.0)),
        ("boolean", JsValue::TRUE),
        ("object", Object::new().into()),
        ("array", Array::of1(&s("k")).into()),
        ("symbol", js_sys::Symbol::for_("k").into()),
        ("bigint", js_sys::BigInt::from(7u32).into()),
        ("function", fn0(|| Ok(undef())).into()),
    ];
    for (what, key) in not_strings {
        let e = failed_sync(lock(key, undef()), what);
        assert_type_error(&e, &format!("lock({what})"));
        assert!(message(&e).contains("key"), "message: {}", message(&e));
    }
}

#[wasm_bindgen_test]
fn lock_rejects_empty_and_over_long_keys() {
    use_memory_store();
    let e = failed_sync(lock(s(""), undef()), "lock(\"\")");
    assert_range_error(&e, "lock(\"\")");

    let longest = "k".repeat(MAX_KEY_BYTES);
    assert_eq!(MAX_KEY_BYTES, 512, "the documented key limit");
    let l = fulfilled_sync(lock(s(&longest), undef()), "512-byte key");
    assert_eq!(l.key(), longest);
    let e = failed_sync(lock(s(&"k".repeat(513)), undef()), "513-byte key");
    assert_range_error(&e, "lock(513-byte key)");

    // The limit is in bytes of UTF-8, not UTF-16 code units: 256 × "é" is 512 bytes, 257 is 514.
    fulfilled_sync(lock(s(&"é".repeat(256)), undef()), "256 × é");
    let e = failed_sync(lock(s(&"é".repeat(257)), undef()), "257 × é");
    assert_range_error(&e, "lock(257 × é)");
}

#[wasm_bindgen_test]
fn lock_rejects_bad_ttls() {
    use_memory_store();
    let k = fresh_key("ttl");
    let out_of_range = [
        0.0,
        -0.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        MAX_TTL_MS as f64 + 1.0,
        1e300,
    ];
    for ttl in out_of_range {
        let e = failed_sync(lock(s(&k), num(ttl)), &format!("ttl {ttl}"));
        assert_range_error(&e, &format!("lock(key, {ttl})"));
    }
    let wrong_type = [
        ("\"5\"", s("5")),
        ("null", JsValue::NULL),
        ("true", JsValue::TRUE),
        ("{}", Object::new().into()),
        ("5n", js_sys::BigInt::from(5u32).into()),
    ];
    for (what, ttl) in wrong_type {
        let e = failed_sync(lock(s(&k), ttl), what);
        assert_type_error(&e, &format!("lock(key, {what})"));
    }
    // What is accepted: the default, whole and fractional ms (rounded up), the maximum.
    assert_eq!(new_lock(&k, 1.0).ttl_ms(), 1.0);
    assert_eq!(new_lock(&k, 0.5).ttl_ms(), 1.0);
    assert_eq!(new_lock(&k, MAX_TTL_MS as f64).ttl_ms(), MAX_TTL_MS as f64);
    let default = fulfilled_sync(lock(s(&k), undef()), "default TTL");
    assert_eq!(default.ttl_ms(), 30_000.0);
}

#[wasm_bindgen_test]
async fn acquire_options_are_checked() {
    use_memory_store();
    let k = fresh_key("options");
    let l = new_lock(&k, 10_000.0);
    let calls = Rc::new(Cell::new(0));
    let task = counting_task(&calls, s("ran"));

    let out_of_range = [
        ("{timeout: -1}", object(&[("timeout", num(-1.0))])),
        ("{timeout: NaN}", object(&[("timeout", num(f64::NAN))])),
        (
            "{timeout: Infinity}",
            object(&[("timeout", num(f64::INFINITY))]),
        ),
        (
            "{timeout: 2^31}",
            object(&[("timeout", num(2_147_483_648.0))]),
        ),
        (
            "{retryDelay: NaN}",
            object(&[("retryDelay", num(f64::NAN))]),
        ),
        ("{retryDelay: -5}", object(&[("retryDelay", num(-5.0))])),
        (
            "{retryDelay: -Infinity}",
            object(&[("retryDelay", num(f64::NEG_INFINITY))]),
        ),
    ];
    for (what, options) in &out_of_range {
        let e = rejected(l.run(task.clone().into(), options.clone()), what).await;
        assert_range_error(&e, &format!("run(fn, {what})"));
        let e = rejected(l.acquire(options.clone()), what).await;
        assert_range_error(&e, &format!("acquire({what})"));
    }

    let wrong_type = [
        ("{timeout: \"5\"}", object(&[("timeout", s("5"))])),
        (
            "{retryDelay: null}",
            object(&[("retryDelay", JsValue::NULL)]),
        ),
        ("5", num(5.0)),
        ("\"fast\"", s("fast")),
        ("true", JsValue::TRUE),
        ("a function", fn0(|| Ok(undef())).into()),
    ];
    for (what, options) in &wrong_type {
        let e = rejected(l.run(task.clone().into(), options.clone()), what).await;
        assert_type_error(&e, &format!("run(fn, {what})"));
        let e = rejected(l.acquire(options.clone()), what).await;
        assert_type_error(&e, &format!("acquire({what})"));
    }
    assert_eq!(calls.get(), 0, "fn ran despite bad options");
    assert!(
        !fulfilled_bool(l.is_locked(), "isLocked").await,
        "bad options left the key locked"
    );

    // undefined, null and {} mean the defaults.
    for (what, options) in [
        ("undefined", undef()),
        ("null", JsValue::NULL),
        ("{}", Object::new().into()),
    ] {
        let out = fulfilled(l.run(task.clone().into(), options), what).await;
        assert_eq!(run_outcome(&out), (true, s("ran")), "run(fn, {what})");
    }
    assert_eq!(calls.get(), 3);
}

#[wasm_bindgen_test]
async fn run_needs_a_function() {
    use_memory_store();
    let l = new_lock(&fresh_key("run-fn"), 10_000.0);
    let not_functions = [
        ("undefined", undef()),
        ("null", JsValue::NULL),
        ("5", num(5.0)),
        ("\"fn\"", s("fn")),
        ("{}", Object::new().into()),
        ("a promise", Promise::resolve(&num(1.0)).into()),
    ];
    for (what, task) in not_functions {
        let e = rejected(l.run(task.clone(), undef()), what).await;
        assert_type_error(&e, &format!("run({what})"));
        let e = rejected(l.run_immediately(task), what).await;
        assert_type_error(&e, &format!("runImmediately({what})"));
    }
    assert!(
        !fulfilled_bool(l.is_locked(), "isLocked").await,
        "a refused run() left the key locked"
    );
}

#[wasm_bindgen_test]
async fn extend_checks_its_ttl() {
    use_memory_store();
    let l = new_lock(&fresh_key("extend-ttl"), 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    for ttl in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = rejected(l.extend(num(ttl)), &format!("extend({ttl})")).await;
        assert_range_error(&e, &format!("extend({ttl})"));
    }
    let e = rejected(l.extend(s("5")), "extend(\"5\")").await;
    assert_type_error(&e, "extend(\"5\")");
    // Still held, and still ours.
    fulfilled(l.extend(num(20_000.0)), "extend(20000)").await;
    assert!(fulfilled_bool(l.release(), "release").await);
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
    let k = s(&fresh_key("memory-args"));
    let owner = s("owner-1");

    let e = failed_sync(m.acquire(s(""), owner.clone(), num(100.0)), "empty key");
    assert_range_error(&e, "MemoryLockStore.acquire(\"\", …)");
    let e = failed_sync(m.acquire(num(1.0), owner.clone(), num(100.0)), "key 1");
    assert_type_error(&e, "MemoryLockStore.acquire(1, …)");
    let e = failed_sync(m.acquire(k.clone(), num(1.0), num(100.0)), "owner 1");
    assert_type_error(&e, "MemoryLockStore.acquire(key, 1, …)");
    let e = failed_sync(m.acquire(k.clone(), s("has space"), num(100.0)), "owner");
    assert_range_error(&e, "MemoryLockStore.acquire(key, \"has space\", …)");
    let e = failed_sync(m.acquire(k.clone(), owner.clone(), undef()), "no ttl");
    assert_type_error(&e, "MemoryLockStore.acquire(key, owner)");
    let e = failed_sync(m.extend(k.clone(), owner.clone(), num(0.0)), "ttl 0");
    assert_range_error(&e, "MemoryLockStore.extend(key, owner, 0)");
    let e = failed_sync(m.release(k.clone(), undef()), "no owner");
    assert_type_error(&e, "MemoryLockStore.release(key)");

    // And it is a correct store through its own methods.
    let grant = fulfilled_sync(
        m.acquire(k.clone(), owner.clone(), num(10_000.0)),
        "acquire",
    );
    let fence = get(&grant, "fence")
        .as_f64()
        .expect("acquire answers { fence }");
    assert!(fence >= 1.0 && fence.fract() == 0.0, "fence {fence}");
    assert_eq!(
        fulfilled_sync(
            m.acquire(k.clone(), s("owner-2"), num(10_000.0)),
            "acquire 2"
        ),
        JsValue::FALSE
    );
    assert!(fulfilled_sync(m.is_locked(k.clone()), "isLocked"));
    let left = fulfilled_sync(m.remaining_time(k.clone()), "remainingTime")
        .as_f64()
        .expect("remainingTime of a held key");
    assert!(left > 0.0 && left <= 10_000.0, "remainingTime {left}");
    assert!(!fulfilled_sync(
        m.release(k.clone(), s("owner-2")),
        "stranger's release"
    ));
    assert!(!fulfilled_sync(
        m.extend(k.clone(), s("owner-2"), num(5.0)),
        "stranger's extend"
    ));
    assert!(fulfilled_sync(
        m.extend(k.clone(), owner.clone(), num(10_000.0)),
        "extend"
    ));
    assert!(fulfilled_sync(
        m.release(k.clone(), owner.clone()),
        "release"
    ));
    assert!(!fulfilled_sync(
        m.is_locked(k.clone()),
        "isLocked after release"
    ));
    assert!(fulfilled_sync(m.remaining_time(k), "remainingTime").is_null());
}

/// The exported class as JS sees it: methods called through the generated glue, with missing
/// and extra arguments, still answer errors, never traps.
#[wasm_bindgen_test]
async fn lock_methods_called_from_js_with_missing_arguments() {
    use_memory_store();
    let l: JsValue = new_lock(&fresh_key("glue"), 10_000.0).into();
    let method = |name: &str| -> Function {
        get(&l, name)
            .dyn_into()
            .unwrap_or_else(|v| panic!("Lock.{name} is not a function: {v:?}"))
    };
    let call_promise = |name: &str, args: &Array| -> Promise {
        method(name)
            .apply(&l, args)
            .unwrap_or_else(|e| panic!("Lock.{name} threw synchronously: {e:?}"))
            .dyn_into()
            .unwrap_or_else(|v| panic!("Lock.{name} returned a non-promise {v:?}"))
    };

    let e = rejected(call_promise("run", &Array::new()), "run()").await;
    assert_type_error(&e, "lock.run() with no arguments");
    let e = rejected(
        call_promise("runImmediately", &Array::new()),
        "runImmediately()",
    )
    .await;
    assert_type_error(&e, "lock.runImmediately() with no arguments");
    let e = rejected(
        call_promise("extend", &Array::of1(&s("x"))),
        "extend(\"x\")",
    )
    .await;
    assert_type_error(&e, "lock.extend(\"x\")");
    assert!(
        !fulfilled_bool(
            call_promise("release", &Array::of1(&num(1.0))),
            "release(1)"
        )
        .await
    );
    let extra = Array::of3(&JsValue::NULL, &JsValue::NULL, &JsValue::NULL);
    assert!(fulfilled_bool(call_promise("acquire", &extra), "acquire(null, null, null)").await);
    assert!(fulfilled_bool(call_promise("isLocked", &Array::new()), "isLocked()").await);
    assert_eq!(get(&l, "ttlMs").as_f64(), Some(10_000.0));
    assert!(get(&l, "key").as_string().is_some());
    let serialize = method("serialize");
    let text = serialize.call0(&l).expect("serialize() of a held lock");
    assert!(text
        .as_string()
        .is_some_and(|t| t.starts_with("keel-lock:2:")));
    assert!(fulfilled_bool(call_promise("release", &Array::new()), "release()").await);
}

// =============================================================================================
// run(): the result pair, held locks, errors from fn
// =============================================================================================

async fn run_gives_true_and_the_result(kind: Kind) {
    install(kind);
    let k = fresh_key("run-result");
    let l = new_lock(&k, 10_000.0);
    let calls = Rc::new(Cell::new(0));

    let sync_result = object(&[("answer", num(42.0))]);
    let out = fulfilled(
        l.run(counting_task(&calls, sync_result.clone()).into(), undef()),
        "run(sync fn)",
    )
    .await;
    let (ran, result) = run_outcome(&out);
    assert!(ran, "{kind:?}: run(sync fn) did not run");
    assert_same(&result, &sync_result, "run(sync fn) result");

    let out = fulfilled(
        l.run(counting_async_task(&calls, 5, s("later")).into(), undef()),
        "run(async fn)",
    )
    .await;
    assert_eq!(run_outcome(&out), (true, s("later")), "{kind:?}: async fn");

    let out = fulfilled(
        l.run_immediately(counting_task(&calls, undef()).into()),
        "runImmediately(fn)",
    )
    .await;
    assert_eq!(
        run_outcome(&out),
        (true, undef()),
        "{kind:?}: runImmediately"
    );
    assert_eq!(calls.get(), 3);

    // Released every time: the key is free and anyone can take it.
    assert!(!fulfilled_bool(l.is_locked(), "isLocked").await);
    let other = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(other.acquire(undef()), "acquire after run").await);
    assert!(fulfilled_bool(other.release(), "release").await);
}

#[wasm_bindgen_test]
async fn run_gives_true_and_the_result_memory() {
    run_gives_true_and_the_result(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn run_gives_true_and_the_result_js_store() {
    run_gives_true_and_the_result(Kind::Js).await;
}

async fn run_on_a_held_lock_skips_fn(kind: Kind) {
    install(kind);
    let k = fresh_key("held");
    let holder = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(holder.acquire(undef()), "holder acquire").await);

    let l = new_lock(&k, 10_000.0);
    let calls = Rc::new(Cell::new(0));
    let out = fulfilled(l.run(counting_task(&calls, s("x")).into(), undef()), "run").await;
    assert_eq!(run_outcome(&out), (false, undef()), "{kind:?}: run on held");
    let out = fulfilled(
        l.run_immediately(counting_task(&calls, s("x")).into()),
        "runImmediately",
    )
    .await;
    assert_eq!(
        run_outcome(&out),
        (false, undef()),
        "{kind:?}: runImmediately on held"
    );
    // A short wait that runs out before the holder lets go.
    let options = object(&[("timeout", num(20.0)), ("retryDelay", num(5.0))]);
    let out = fulfilled(l.run(counting_task(&calls, s("x")).into(), options), "run").await;
    assert_eq!(
        run_outcome(&out),
        (false, undef()),
        "{kind:?}: run with timeout"
    );
    assert!(!fulfilled_bool(l.acquire(undef()), "acquire on held").await);
    assert_eq!(
        calls.get(),
        0,
        "{kind:?}: fn ran while the lock was held elsewhere"
    );

    // The loser's failed attempts did not disturb the holder.
    assert!(fulfilled_bool(holder.is_locked(), "isLocked").await);
    assert!(!fulfilled_bool(l.release(), "loser's release").await);
    assert!(fulfilled_bool(holder.release(), "holder's release").await);
}

#[wasm_bindgen_test]
async fn run_on_a_held_lock_skips_fn_memory() {
    run_on_a_held_lock_skips_fn(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn run_on_a_held_lock_skips_fn_js_store() {
    run_on_a_held_lock_skips_fn(Kind::Js).await;
}

async fn errors_from_fn_propagate_unchanged_and_release(kind: Kind) {
    install(kind);
    let k = fresh_key("fn-throws");
    let l = new_lock(&k, 10_000.0);

    let thrown_values = [
        ("an Error", js_error("task failed")),
        ("a TypeError", TypeError::new("task type error").into()),
        ("a plain object", object(&[("code", num(7.0))])),
        ("a string", s("just a string")),
        ("undefined", undef()),
    ];
    for (what, error) in thrown_values {
        // Thrown synchronously.
        let thrown = error.clone();
        let task = fn0(move || Err(thrown.clone()));
        let e = rejected(l.run(task.into(), undef()), what).await;
        assert_same(&e, &error, &format!("{kind:?}: fn throwing {what}"));
        assert!(
            !fulfilled_bool(l.is_locked(), "isLocked").await,
            "{kind:?}: the lock stayed held after fn threw {what}"
        );

        // Rejected asynchronously.
        let reason = error.clone();
        let task = fn0(move || {
            let reason = reason.clone();
            Ok(future_to_promise(async move {
                sleep(2).await;
                Err(reason)
            })
            .into())
        });
        let e = rejected(l.run(task.into(), undef()), what).await;
        assert_same(&e, &error, &format!("{kind:?}: fn rejecting with {what}"));
        assert!(
            !fulfilled_bool(l.is_locked(), "isLocked").await,
            "{kind:?}: the lock stayed held after fn rejected with {what}"
        );
    }
    // And the key is free for the next caller.
    let out = fulfilled(l.run_immediately(fn0(|| Ok(s("ok"))).into()), "run").await;
    assert_eq!(run_outcome(&out), (true, s("ok")));
}

#[wasm_bindgen_test]
async fn errors_from_fn_propagate_unchanged_and_release_memory() {
    errors_from_fn_propagate_unchanged_and_release(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn errors_from_fn_propagate_unchanged_and_release_js_store() {
    errors_from_fn_propagate_unchanged_and_release(Kind::Js).await;
}

async fn extend_inside_run(kind: Kind) {
    let rec = install(kind);
    let l = Rc::new(new_lock(&fresh_key("extend-in-run"), 10_000.0));
    let inner = l.clone();
    let task = fn0(move || {
        let inner = inner.clone();
        Ok(future_to_promise(async move {
            JsFuture::from(inner.extend(undef())).await?;
            JsFuture::from(inner.extend(num(20_000.0))).await?;
            let locked = JsFuture::from(inner.is_locked()).await?;
            let left = JsFuture::from(inner.get_remaining_time()).await?;
            Ok(Array::of2(&locked, &left).into())
        })
        .into())
    });
    let out = fulfilled(l.run(task.into(), undef()), "run(fn that extends)").await;
    let (ran, result) = run_outcome(&out);
    assert!(ran);
    let result: Array = result.unchecked_into();
    assert_eq!(
        result.get(0),
        JsValue::TRUE,
        "{kind:?}: isLocked inside run"
    );
    let left = result.get(1).as_f64().expect("remaining time inside run");
    assert!(left > 0.0 && left <= 20_000.0, "{kind:?}: remaining {left}");
    assert!(!fulfilled_bool(l.is_locked(), "isLocked after").await);
    if let Some(rec) = rec {
        assert_eq!(
            rec.count("extend"),
            2,
            "{kind:?}: extends reached the store"
        );
    }
}

#[wasm_bindgen_test]
async fn extend_inside_run_memory() {
    extend_inside_run(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn extend_inside_run_js_store() {
    extend_inside_run(Kind::Js).await;
}

// =============================================================================================
// Holding, losing, releasing
// =============================================================================================

#[wasm_bindgen_test]
async fn extend_of_a_lock_never_acquired_is_lock_not_held_error() {
    use_memory_store();
    let k = fresh_key("not-held");
    let l = new_lock(&k, 10_000.0);
    let e = rejected(l.extend(undef()), "extend() never acquired").await;
    assert!(
        e.dyn_ref::<js_sys::Error>().is_some(),
        "LockNotHeldError must be an Error, got {e:?}"
    );
    assert!(e.dyn_ref::<TypeError>().is_none() && e.dyn_ref::<RangeError>().is_none());
    assert_eq!(
        get(&e, "name").as_string().as_deref(),
        Some("LockNotHeldError")
    );
    assert_eq!(get(&e, "key").as_string().as_deref(), Some(k.as_str()));
    assert!(
        message(&e).contains(&k),
        "message names the key: {}",
        message(&e)
    );
    // A real class: constructed by `new LockNotHeldError`, named so, extending Error.
    let class: Function = get(&e, "constructor").unchecked_into();
    assert_eq!(
        class.name().as_string().as_deref(),
        Some("LockNotHeldError")
    );
    assert!(is_instance(&e, &class));
    let parent: JsValue = Object::get_prototype_of(&get(&class, "prototype")).into();
    let error_class = get(&js_sys::global().into(), "Error");
    assert_same(
        &parent,
        &get(&error_class, "prototype"),
        "LockNotHeldError extends Error",
    );

    // Also after a release, and from serialize() (synchronously) with no hold.
    let e2 = failed_sync(l.serialize(), "serialize() never acquired");
    assert_eq!(
        get(&e2, "name").as_string().as_deref(),
        Some("LockNotHeldError")
    );
    assert!(
        is_instance(&e2, &class),
        "same class for every LockNotHeldError"
    );
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    assert!(fulfilled_bool(l.release(), "release").await);
    let e3 = rejected(l.extend(num(1_000.0)), "extend() after release").await;
    assert!(is_instance(&e3, &class));
    assert_eq!(get(&e3, "key").as_string().as_deref(), Some(k.as_str()));
}

/// One handle, two holds in turn: `run()`'s hold runs out while `fn` is still working, the same
/// handle takes the key again (a fresh owner token) and extends it. When `fn` ends, `run()` must
/// release only the hold *it* acquired — which is gone — and leave the newer hold in place.
/// (A regression test: `Lock::try_run` once released whatever the handle held at the end.)
#[wasm_bindgen_test]
async fn run_releases_only_the_hold_it_acquired() {
    use_memory_store();
    let l = Rc::new(new_lock(&fresh_key("same-handle"), 30.0));
    let calls = Rc::new(Cell::new(0));
    // Timers fire in deadline order, so the re-acquire at 80 ms completes (memory store:
    // microtasks only) before fn's 300 ms timer ends the run.
    let running = l.run(counting_async_task(&calls, 300, s("done")).into(), undef());
    sleep(80).await;
    assert!(fulfilled_bool(l.acquire(undef()), "re-acquire after the run's TTL").await);
    fulfilled(l.extend(num(10_000.0)), "extend the new hold").await;
    let out = fulfilled(running, "run").await;
    assert_eq!(run_outcome(&out), (true, s("done")));
    assert!(
        fulfilled_bool(l.is_locked(), "isLocked after run").await,
        "run() released the hold the handle took after run's own hold expired"
    );
    assert!(fulfilled_bool(l.release(), "release of the newer hold").await);
}

/// Keys are JS strings; two different keys must never lock each other. Strings with lone
/// surrogates are not valid UTF-16, and today the bindings convert them lossily (each lone
/// surrogate becomes U+FFFD in `convert::key`, src/js/convert.rs), so "\uD800" and "\uDBFF"
/// become the same key. Either refusing such keys (TypeError/RangeError) or keeping them apart
/// would pass.
#[wasm_bindgen_test]
async fn distinct_keys_with_lone_surrogates_do_not_alias() {
    use_memory_store();
    let a: JsValue = js_sys::JsString::from_char_code1(0xD800).into();
    let b: JsValue = js_sys::JsString::from_char_code1(0xDBFF).into();
    let (la, lb) = match (lock(a.clone(), undef()), lock(b, undef())) {
        (Ok(la), Ok(lb)) => (la, lb),
        (Err(e), _) | (_, Err(e)) => {
            assert!(
                e.dyn_ref::<TypeError>().is_some() || e.dyn_ref::<RangeError>().is_some(),
                "{e:?}"
            );
            return;
        }
    };
    assert_eq!(s(&la.key()), a, "the key getter must give back the key");
    assert!(fulfilled_bool(la.acquire(undef()), "acquire \\uD800").await);
    assert!(
        fulfilled_bool(lb.acquire(undef()), "acquire \\uDBFF").await,
        "a lock on \"\\uD800\" blocked a lock on \"\\uDBFF\""
    );
}

#[wasm_bindgen_test]
async fn release_answers_false_and_never_throws_when_not_held() {
    use_memory_store();
    let k = fresh_key("release");
    let l = new_lock(&k, 10_000.0);
    assert!(!fulfilled_bool(l.release(), "release never acquired").await);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    assert!(!fulfilled_bool(l.is_expired(), "isExpired while held").await);
    assert!(fulfilled_bool(l.release(), "release").await);
    assert!(!fulfilled_bool(l.release(), "second release").await);
    assert!(!fulfilled_bool(l.is_expired(), "isExpired after release").await);
}

async fn expired_holder_loses_to_the_next(kind: Kind) {
    install(kind);
    let k = fresh_key("expiry");
    let first = new_lock(&k, 30.0);
    assert!(fulfilled_bool(first.acquire(undef()), "first acquire").await);
    sleep(90).await;
    assert!(fulfilled_bool(first.is_expired(), "isExpired after the TTL").await);
    assert!(!fulfilled_bool(first.is_locked(), "isLocked after the TTL").await);
    assert!(
        no_time_left(&fulfilled(first.get_remaining_time(), "getRemainingTime").await),
        "{kind:?}: remaining time of an expired key must be null"
    );

    let second = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(second.acquire(undef()), "second acquire").await);
    // The old holder can neither release nor extend the new holder's lock.
    assert!(!fulfilled_bool(first.release(), "expired holder's release").await);
    let e = rejected(first.extend(undef()), "expired holder's extend").await;
    assert_eq!(
        get(&e, "name").as_string().as_deref(),
        Some("LockNotHeldError")
    );
    assert!(fulfilled_bool(first.is_expired(), "isExpired of the loser").await);
    assert!(fulfilled_bool(second.is_locked(), "new holder still holds").await);
    assert!(!fulfilled_bool(second.is_expired(), "new holder not expired").await);
    assert!(fulfilled_bool(second.release(), "new holder's release").await);
}

#[wasm_bindgen_test]
async fn expired_holder_loses_to_the_next_memory() {
    expired_holder_loses_to_the_next(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn expired_holder_loses_to_the_next_js_store() {
    expired_holder_loses_to_the_next(Kind::Js).await;
}

async fn inspection(kind: Kind) {
    install(kind);
    let k = fresh_key("inspect");
    let l = new_lock(&k, 10_000.0);
    assert!(!fulfilled_bool(l.is_locked(), "isLocked unheld").await);
    assert!(no_time_left(
        &fulfilled(l.get_remaining_time(), "remaining unheld").await
    ));
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    let other = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(other.is_locked(), "isLocked seen by another handle").await);
    let left = fulfilled(other.get_remaining_time(), "remaining").await;
    let left = left
        .as_f64()
        .unwrap_or_else(|| panic!("remaining {left:?}"));
    assert!(left > 0.0 && left <= 10_000.0, "{kind:?}: remaining {left}");
    assert!(!fulfilled_bool(other.is_expired(), "never held is not expired").await);
    assert!(fulfilled_bool(l.release(), "release").await);
}

/// `getRemainingTime()` of an unheld key is `null`, as documented (README, `.d.ts`, the doc
/// comment of `JsLock::get_remaining_time`), whichever store answers, and the memory store's
/// own `remainingTime()` says the same (not `undefined`, which is what Rust's `None` becomes).
#[wasm_bindgen_test]
async fn get_remaining_time_of_an_unheld_key_is_null() {
    for kind in [Kind::Memory, Kind::Js] {
        install(kind);
        let l = new_lock(&fresh_key("null-remaining"), 10_000.0);
        let left = fulfilled(l.get_remaining_time(), "getRemainingTime").await;
        assert!(
            left.is_null(),
            "{kind:?}: getRemainingTime() of an unheld key → {left:?}"
        );
    }
    let memory: JsValue = JsMemoryLockStore::new().into();
    let remaining: Function = get(&memory, "remainingTime").unchecked_into();
    let left = remaining.call1(&memory, &s("never-held")).unwrap();
    assert!(
        left.is_null(),
        "MemoryLockStore.remainingTime() of an unheld key → {left:?}"
    );
}

#[wasm_bindgen_test]
async fn inspection_memory() {
    inspection(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn inspection_js_store() {
    inspection(Kind::Js).await;
}

// =============================================================================================
// serialize() / restoreLock()
// =============================================================================================

#[wasm_bindgen_test]
async fn serialize_and_restore_round_trip() {
    use_memory_store();
    let k = format!("{} / ü:✓ \"quoted\"", fresh_key("serialize"));
    let l = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    let text = fulfilled_sync(l.serialize(), "serialize()");
    assert!(text.starts_with("keel-lock:2:"), "format: {text}");
    let fence = l.fence();
    assert!(
        fence.as_f64().is_some(),
        "a held lock on the memory store has a fence"
    );

    let restored = fulfilled_sync(restore_lock(s(&text)), "restoreLock(serialize())");
    assert_eq!(restored.key(), k);
    assert_eq!(restored.ttl_ms(), 10_000.0);
    assert_eq!(
        restored.fence(),
        fence,
        "the restored lock carries the fence"
    );
    assert!(!fulfilled_bool(restored.is_expired(), "restored isExpired").await);
    fulfilled(restored.extend(num(20_000.0)), "restored extend").await;
    assert_eq!(
        fulfilled_sync(restored.serialize(), "re-serialize")
            .split(':')
            .nth(5),
        text.split(':').nth(5),
        "the restored lock carries the same owner token"
    );
    assert!(fulfilled_bool(restored.release(), "restored release").await);
    assert!(!fulfilled_bool(l.is_locked(), "isLocked after release").await);
    // The original handle's hold is gone: its own release is refused, quietly.
    assert!(!fulfilled_bool(l.release(), "original release").await);

    // A restored string that no longer matches the holder cannot release the new holder.
    let stale = fulfilled_sync(restore_lock(s(&text)), "restoreLock again");
    let next = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(next.acquire(undef()), "next acquire").await);
    assert!(!fulfilled_bool(stale.release(), "stale release").await);
    assert!(fulfilled_bool(next.is_locked(), "next still holds").await);
    assert!(fulfilled_bool(next.release(), "next release").await);
}

/// A valid serialized lock to mangle.
async fn sample_serialized() -> String {
    use_memory_store();
    let l = new_lock(&fresh_key("sample"), 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    let text = fulfilled_sync(l.serialize(), "serialize()");
    assert!(fulfilled_bool(l.release(), "release").await);
    text
}

#[wasm_bindgen_test]
async fn restore_refuses_malformed_strings_with_type_error() {
    let text = sample_serialized().await;
    let fields: Vec<&str> = text.split(':').collect();
    assert_eq!(fields.len(), 7, "{text}");
    let with_field = |i: usize, value: &str| {
        let mut f = fields.clone();
        f[i] = value;
        f.join(":")
    };

    for (what, value) in [
        ("undefined", undef()),
        ("null", JsValue::NULL),
        ("42", num(42.0)),
        ("{}", Object::new().into()),
        ("true", JsValue::TRUE),
    ] {
        let e = failed_sync(restore_lock(value), what);
        assert_type_error(&e, &format!("restoreLock({what})"));
    }

    let mut bad: Vec<(String, String)> = vec![
        ("empty".into(), String::new()),
        ("garbage".into(), "garbage".into()),
        ("json".into(), "{\"key\":\"x\"}".into()),
        ("magic only".into(), "keel-lock".into()),
        (
            "wrong magic".into(),
            text.replacen("keel-lock", "keel-lick", 1),
        ),
        ("upper-case magic".into(), text.to_uppercase()),
        ("version 3".into(), with_field(1, "3")),
        ("version 0".into(), with_field(1, "0")),
        ("version v1".into(), with_field(1, "v1")),
        ("empty version".into(), with_field(1, "")),
        ("TTL not a number".into(), with_field(2, "abc")),
        ("negative TTL".into(), with_field(2, "-5")),
        ("deadline not a number".into(), with_field(3, "soon")),
        (
            "deadline overflows".into(),
            with_field(3, "99999999999999999999999"),
        ),
        ("owner not base64url".into(), with_field(5, "!!!")),
        ("key not base64url".into(), with_field(6, "@@")),
        ("key not UTF-8".into(), with_field(6, "_w")),
        // Edits that parse as numbers but are not what serialize() writes.
        ("TTL with a plus sign".into(), with_field(2, "+10000")),
        ("TTL with leading zeros".into(), with_field(2, "0010000")),
        ("deadline 0".into(), with_field(3, "0")),
        (
            "deadline 2^64 - 1".into(),
            with_field(3, "18446744073709551615"),
        ),
        ("fence 0".into(), with_field(4, "0")),
        (
            "fence with leading zero".into(),
            with_field(4, &format!("0{}", fields[4])),
        ),
        (
            "fence past 2^53 - 1".into(),
            with_field(4, "9007199254740992"),
        ),
        ("extra field".into(), format!("{text}:extra")),
        ("7 KB".into(), format!("{text}{}", "A".repeat(7_000))),
        ("leading space".into(), format!(" {text}")),
    ];
    // Truncated anywhere before the last field.
    let last_colon = text.rfind(':').unwrap();
    for cut in 0..last_colon {
        bad.push((format!("cut at {cut}"), text[..cut].to_owned()));
    }
    for (what, value) in bad {
        let e = failed_sync(restore_lock(s(&value)), &what);
        assert_type_error(&e, &format!("restoreLock({what}: {value:?})"));
        assert!(
            message(&e).contains("restoreLock"),
            "{what}: the message should say it is about restoreLock: {}",
            message(&e)
        );
    }
}

/// Serialized strings whose *fields* parse but hold values no lock can have: a string cut
/// right after the last ':' (empty key), a zero or over-long TTL, an empty or unprintable
/// owner, an over-long key. They are malformed serialized locks, so restoreLock should refuse
/// them with a TypeError that says so, not a RangeError about a "lock key" or "ttlMs" the
/// caller never passed.
#[wasm_bindgen_test]
async fn restore_refuses_malformed_fields_with_type_error() {
    let text = sample_serialized().await;
    for (what, value) in malformed_field_strings(&text) {
        let e = failed_sync(restore_lock(s(&value)), &what);
        assert_type_error(&e, &format!("restoreLock({what}: {value:?})"));
    }
}

/// The same strings as above, checked for what must hold today and after a fix: a real JS
/// error with a message, never a trap, and nothing restored.
#[wasm_bindgen_test]
async fn restore_refuses_malformed_fields_without_trapping() {
    let text = sample_serialized().await;
    for (what, value) in malformed_field_strings(&text) {
        let e = failed_sync(restore_lock(s(&value)), &what);
        assert!(
            e.dyn_ref::<TypeError>().is_some() || e.dyn_ref::<RangeError>().is_some(),
            "restoreLock({what}): expected a TypeError or RangeError, got {e:?}"
        );
        assert!(!message(&e).is_empty());
    }
}

fn malformed_field_strings(text: &str) -> Vec<(String, String)> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let fields: Vec<&str> = text.split(':').collect();
    let with_field = |i: usize, value: &str| {
        let mut f = fields.clone();
        f[i] = value;
        f.join(":")
    };
    let b64 = |t: &str| URL_SAFE_NO_PAD.encode(t);
    vec![
        (
            "cut after the last ':'".into(),
            text[..=text.rfind(':').unwrap()].to_owned(),
        ),
        ("TTL 0".into(), with_field(2, "0")),
        ("TTL over the maximum".into(), with_field(2, "9999999999")),
        ("empty owner".into(), with_field(5, "")),
        ("owner with a space".into(), with_field(5, &b64("a b"))),
        ("one-character owner".into(), with_field(5, &b64("x"))),
        (
            "key of 513 bytes".into(),
            with_field(6, &b64(&"k".repeat(513))),
        ),
    ]
}

// =============================================================================================
// setLockStore / getLockStore and the JS store seam
// =============================================================================================

#[wasm_bindgen_test]
async fn get_lock_store_returns_the_object_that_was_set() {
    let memory = use_memory_store();
    assert_same(
        &get_lock_store(),
        &memory,
        "getLockStore() after a MemoryLockStore",
    );
    assert_same(&get_lock_store(), &get_lock_store(), "getLockStore() twice");

    let (store, rec) = js_store(Answer::Resolved);
    fulfilled_sync(set_lock_store(store.clone()), "setLockStore(js store)");
    assert_same(&get_lock_store(), &store, "getLockStore() after a JS store");

    // Locks are bound to the store that was current when they were made.
    let k = fresh_key("bound");
    let on_js = new_lock(&k, 10_000.0);
    fulfilled_sync(set_lock_store(memory.clone()), "setLockStore(memory) again");
    assert_same(
        &get_lock_store(),
        &memory,
        "getLockStore() after switching back",
    );
    let on_memory = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(on_memory.acquire(undef()), "acquire on memory").await);
    assert_eq!(
        rec.calls.borrow().len(),
        0,
        "a memory-store lock called the JS store"
    );
    assert!(fulfilled_bool(on_js.acquire(undef()), "acquire on js").await);
    assert_eq!(
        rec.count("acquire"),
        1,
        "the JS-store lock did not use its store"
    );
    assert!(fulfilled_bool(on_js.release(), "release on js").await);
    assert!(fulfilled_bool(on_memory.release(), "release on memory").await);
}

#[wasm_bindgen_test]
async fn memory_lock_store_object_is_the_store_the_lock_uses() {
    let memory = use_memory_store();
    let k = fresh_key("memory-object");
    let l = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    // The JS object's own methods see the lock the core took.
    let is_locked: Function = get(&memory, "isLocked").unchecked_into();
    assert_eq!(is_locked.call1(&memory, &s(&k)).unwrap(), JsValue::TRUE);
    assert_eq!(get(&memory, "size").as_f64(), Some(1.0));
    assert!(fulfilled_bool(l.release(), "release").await);
    assert_eq!(is_locked.call1(&memory, &s(&k)).unwrap(), JsValue::FALSE);
}

/// An object that inherits from a `MemoryLockStore` and overrides a method (to log, count or
/// veto calls) is a store with five methods like any other: the override must be what runs.
#[wasm_bindgen_test]
async fn store_inheriting_from_a_memory_store_keeps_its_overrides() {
    let base: JsValue = JsMemoryLockStore::new().into();
    let derived: JsValue = Object::create(base.unchecked_ref::<Object>()).into();
    let calls = Rc::new(Cell::new(0));
    let base_acquire: Function = get(&base, "acquire").unchecked_into();
    let (counter, target) = (calls.clone(), base.clone());
    let counting_acquire = fn3(move |k, o, t| {
        counter.set(counter.get() + 1);
        base_acquire.call3(&target, &k, &o, &t)
    });
    set(&derived, "acquire", &counting_acquire);
    fulfilled_sync(set_lock_store(derived.clone()), "setLockStore(derived)");
    assert_same(&get_lock_store(), &derived, "getLockStore()");
    let l = new_lock(&fresh_key("derived"), 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    assert!(fulfilled_bool(l.release(), "release").await);
    assert_eq!(calls.get(), 1, "the store's own acquire() was bypassed");
}

#[wasm_bindgen_test]
async fn memory_store_does_not_grow_without_bound() {
    let memory = use_memory_store();
    let size = || get(&memory, "size").as_f64().expect("size") as usize;
    const PER_WAVE: usize = 600;
    let mut largest = 0;
    for wave in 0..5 {
        for i in 0..PER_WAVE {
            let l = new_lock(&format!("wasm-test:sweep:{wave}:{i}"), 30.0);
            assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
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
    let purge: Function = get(&memory, "purgeExpired").unchecked_into();
    purge.call0(&memory).unwrap();
    assert_eq!(size(), 0, "purgeExpired() left rows behind");
}

#[wasm_bindgen_test]
async fn js_store_drives_the_lock() {
    for answer in [Answer::Plain, Answer::Resolved, Answer::After(2)] {
        let (store, rec) = js_store(answer);
        fulfilled_sync(set_lock_store(store), "setLockStore");
        let k = fresh_key("js-store");
        let l = new_lock(&k, 10_000.0);
        let calls = Rc::new(Cell::new(0));
        let out = fulfilled(l.run(counting_task(&calls, s("v")).into(), undef()), "run").await;
        assert_eq!(run_outcome(&out), (true, s("v")));
        assert_eq!(calls.get(), 1);
        assert_eq!(*rec.calls.borrow(), ["acquire", "release"]);
        let owner = rec.owners.borrow()[0].clone();
        assert_eq!(owner.len(), 32, "owner token {owner:?}");
        assert!(owner.bytes().all(|b| b.is_ascii_hexdigit()), "{owner:?}");

        // Everything goes through the store.
        assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
        assert!(fulfilled_bool(l.is_locked(), "isLocked").await);
        let left = fulfilled(l.get_remaining_time(), "remaining")
            .await
            .as_f64();
        assert!(
            left.is_some_and(|ms| ms > 0.0 && ms <= 10_000.0),
            "{left:?}"
        );
        fulfilled(l.extend(num(5_000.0)), "extend").await;
        assert!(fulfilled_bool(l.release(), "release").await);
        assert_eq!(
            rec.calls.borrow()[2..],
            ["acquire", "isLocked", "remainingTime", "extend", "release"]
        );
        // Each acquisition brought its own token; release used the acquirer's.
        assert_ne!(rec.owners.borrow()[0], rec.owners.borrow()[1]);

        // Held in the store by someone else: fn never runs.
        rec.rows
            .borrow_mut()
            .insert(k.clone(), ("someone-else".into(), Date::now() + 60_000.0));
        let out = fulfilled(l.run(counting_task(&calls, s("v")).into(), undef()), "run").await;
        assert_eq!(run_outcome(&out), (false, undef()));
        assert_eq!(
            calls.get(),
            1,
            "fn ran although the store said the key is held"
        );
    }
}

#[wasm_bindgen_test]
async fn js_store_errors_reach_the_caller_unchanged() {
    let (good, _) = js_store(Answer::Resolved);
    let thrower = |error: &JsValue| {
        let error = error.clone();
        fn3(move |_, _, _| Err(error.clone()))
    };
    let rejecter = |error: &JsValue| {
        let error = error.clone();
        fn3(move |_, _, _| Ok(Promise::reject(&error).into()))
    };
    let calls = Rc::new(Cell::new(0));

    for (how, make) in [
        ("throws", &thrower as &dyn Fn(&JsValue) -> Function),
        ("rejects", &rejecter),
    ] {
        // acquire: the error reaches run()/acquire(), fn never runs.
        let error = js_error(&format!("acquire {how}"));
        fulfilled_sync(
            set_lock_store(with_method(&good, "acquire", make(&error))),
            "set",
        );
        let l = new_lock(&fresh_key("store-error"), 10_000.0);
        let e = rejected(l.run(counting_task(&calls, undef()).into(), undef()), how).await;
        assert_same(&e, &error, &format!("run() when acquire {how}"));
        let e = rejected(
            l.run_immediately(counting_task(&calls, undef()).into()),
            how,
        )
        .await;
        assert_same(&e, &error, &format!("runImmediately() when acquire {how}"));
        let e = rejected(l.acquire(undef()), how).await;
        assert_same(&e, &error, &format!("acquire() when acquire {how}"));
        assert_eq!(calls.get(), 0, "fn ran although the store's acquire {how}");

        // A non-Error value is passed through just the same.
        let odd = object(&[("status", num(503.0))]);
        fulfilled_sync(
            set_lock_store(with_method(&good, "acquire", make(&odd))),
            "set",
        );
        let l = new_lock(&fresh_key("store-error"), 10_000.0);
        let e = rejected(l.acquire(undef()), how).await;
        assert_same(
            &e,
            &odd,
            &format!("acquire() when acquire {how} a plain object"),
        );

        // release: fn ran, then run() rejects with the store's error.
        let error = js_error(&format!("release {how}"));
        fulfilled_sync(
            set_lock_store(with_method(&good, "release", make(&error))),
            "set",
        );
        let l = new_lock(&fresh_key("store-error"), 10_000.0);
        let ran = Rc::new(Cell::new(0));
        let e = rejected(l.run(counting_task(&ran, undef()).into(), undef()), how).await;
        assert_same(&e, &error, &format!("run() when release {how}"));
        assert_eq!(ran.get(), 1);
        // When fn fails too, fn's error is the one the caller sees.
        let task_error = js_error("task error");
        let thrown = task_error.clone();
        let e = rejected(
            new_lock(&fresh_key("store-error"), 10_000.0)
                .run(fn0(move || Err(thrown.clone())).into(), undef()),
            how,
        )
        .await;
        assert_same(
            &e,
            &task_error,
            &format!("fn error wins over release {how}"),
        );

        // extend, isLocked, remainingTime.
        for method in ["extend", "isLocked", "remainingTime"] {
            let error = js_error(&format!("{method} {how}"));
            fulfilled_sync(
                set_lock_store(with_method(&good, method, make(&error))),
                "set",
            );
            let l = new_lock(&fresh_key("store-error"), 10_000.0);
            let p = match method {
                "extend" => {
                    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
                    l.extend(undef())
                }
                "isLocked" => l.is_locked(),
                _ => l.get_remaining_time(),
            };
            let e = rejected(p, method).await;
            assert_same(&e, &error, &format!("{method}() when the store {how}"));
        }
    }
}

#[wasm_bindgen_test]
async fn js_store_wrong_answers_are_type_errors_naming_the_method() {
    let (good, _) = js_store(Answer::Resolved);
    let answering = |value: JsValue, promised: bool| {
        fn3(move |_, _, _| {
            Ok(if promised {
                Promise::resolve(&value).into()
            } else {
                value.clone()
            })
        })
    };
    let not_booleans = [
        ("1", num(1.0)),
        ("0", num(0.0)),
        ("\"true\"", s("true")),
        ("null", JsValue::NULL),
        ("undefined", undef()),
        ("{}", Object::new().into()),
    ];
    let calls = Rc::new(Cell::new(0));
    for promised in [false, true] {
        for (what, value) in &not_booleans {
            let ctx = |m: &str| format!("{m}() answering {what} (promised: {promised})");

            // acquire: run() rejects, fn never runs.
            let store = with_method(&good, "acquire", answering(value.clone(), promised));
            fulfilled_sync(set_lock_store(store), "set");
            let l = new_lock(&fresh_key("wrong-type"), 10_000.0);
            let e = rejected(l.run(counting_task(&calls, undef()).into(), undef()), "run").await;
            assert_type_error(&e, &ctx("acquire"));
            assert!(message(&e).contains("acquire()"), "{}", message(&e));
            assert_eq!(calls.get(), 0, "fn ran on a broken acquire answer");

            // release, after fn ran.
            let store = with_method(&good, "release", answering(value.clone(), promised));
            fulfilled_sync(set_lock_store(store), "set");
            let l = new_lock(&fresh_key("wrong-type"), 10_000.0);
            let ran = Rc::new(Cell::new(0));
            let e = rejected(l.run(counting_task(&ran, undef()).into(), undef()), "run").await;
            assert_type_error(&e, &ctx("release"));
            assert!(message(&e).contains("release()"), "{}", message(&e));

            // extend and isLocked.
            for method in ["extend", "isLocked"] {
                let store = with_method(&good, method, answering(value.clone(), promised));
                fulfilled_sync(set_lock_store(store), "set");
                let l = new_lock(&fresh_key("wrong-type"), 10_000.0);
                let p = if method == "extend" {
                    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
                    l.extend(undef())
                } else {
                    l.is_locked()
                };
                let e = rejected(p, method).await;
                assert_type_error(&e, &ctx(method));
                assert!(
                    message(&e).contains(&format!("{method}()")),
                    "{}",
                    message(&e)
                );
            }
        }

        // acquire may answer { fence }, but only with a whole number from 1 to 2^53 - 1.
        for (what, fence) in [
            ("{ fence: 0 }", num(0.0)),
            ("{ fence: 1.5 }", num(1.5)),
            ("{ fence: \"3\" }", s("3")),
            ("{ fence: 2^53 }", num(9_007_199_254_740_992.0)),
            ("{ fence: null }", JsValue::NULL),
            ("{ fence: -1 }", num(-1.0)),
        ] {
            let answer = Object::new();
            Reflect::set(&answer, &s("fence"), &fence).unwrap();
            let store = with_method(&good, "acquire", answering(answer.into(), promised));
            fulfilled_sync(set_lock_store(store), "set");
            let l = new_lock(&fresh_key("wrong-fence"), 10_000.0);
            let e = rejected(l.acquire(undef()), "acquire").await;
            assert_type_error(&e, &format!("acquire() answering {what}"));
            assert!(message(&e).contains("acquire()"), "{}", message(&e));
        }

        // remainingTime must be null or a number of ms within the longest TTL.
        for (what, value) in [
            ("undefined", undef()),
            ("1e300", num(1e300)),
            ("2^31", num(2_147_483_648.0)),
            ("\"5\"", s("5")),
            ("-1", num(-1.0)),
            ("NaN", num(f64::NAN)),
            ("Infinity", num(f64::INFINITY)),
            ("true", JsValue::TRUE),
            ("{}", Object::new().into()),
        ] {
            let store = with_method(&good, "remainingTime", answering(value, promised));
            fulfilled_sync(set_lock_store(store), "set");
            let l = new_lock(&fresh_key("wrong-type"), 10_000.0);
            let e = rejected(l.get_remaining_time(), "getRemainingTime").await;
            assert_type_error(&e, &format!("remainingTime() answering {what}"));
            assert!(message(&e).contains("remainingTime()"), "{}", message(&e));
        }
        for (what, value) in [("null", JsValue::NULL)] {
            let store = with_method(&good, "remainingTime", answering(value, promised));
            fulfilled_sync(set_lock_store(store), "set");
            let l = new_lock(&fresh_key("wrong-type"), 10_000.0);
            let left = fulfilled(l.get_remaining_time(), what).await;
            assert!(
                no_time_left(&left),
                "remainingTime() answering {what} → {left:?}"
            );
        }
    }
}

// =============================================================================================
// Fences
// =============================================================================================

#[wasm_bindgen_test]
async fn fences_increase_and_reach_fn_through_its_context() {
    use_memory_store();
    let k = fresh_key("fence");
    let l = new_lock(&k, 10_000.0);
    assert!(l.fence().is_null(), "no fence before acquiring");
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    let first = l.fence().as_f64().expect("fence while held");
    assert!(fulfilled_bool(l.release(), "release").await);
    assert!(l.fence().is_null(), "no fence after release");

    // run(fn) calls fn({ fence }) with the hold's fence.
    let seen = Rc::new(RefCell::new(JsValue::UNDEFINED));
    let task = {
        let seen = seen.clone();
        Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |context: JsValue| {
            *seen.borrow_mut() = context;
            JsValue::from_str("done")
        })
        .into_js_value()
    };
    let out = fulfilled(new_lock(&k, 10_000.0).run(task, undef()), "run").await;
    assert_eq!(run_outcome(&out), (true, s("done")));
    let context = seen.borrow().clone();
    assert!(context.is_object(), "fn got a context object: {context:?}");
    let second = get(&context, "fence").as_f64().expect("context.fence");
    assert!(second > first, "fence {second} after {first}");
}

#[wasm_bindgen_test]
async fn a_js_store_decides_whether_locks_have_fences() {
    // A seed five-method store answering true: locks work, without fences.
    let (good, _) = js_store(Answer::Resolved);
    fulfilled_sync(set_lock_store(good.clone()), "set");
    let l = new_lock(&fresh_key("unfenced"), 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    assert!(l.fence().is_null(), "a store answering true gives no fence");
    assert!(fulfilled_bool(l.release(), "release").await);

    // The same store answering { fence: 41 }: the lock carries 41.
    let answer = Object::new();
    Reflect::set(&answer, &s("fence"), &num(41.0)).unwrap();
    let answer: JsValue = answer.into();
    let store = with_method(
        &good,
        "acquire",
        fn3(move |_, _, _| Ok(Promise::resolve(&answer).into())),
    );
    fulfilled_sync(set_lock_store(store), "set");
    let l = new_lock(&fresh_key("fenced"), 10_000.0);
    assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
    assert_eq!(l.fence().as_f64(), Some(41.0));
    use_memory_store();
}

// =============================================================================================
// Waiting: hand-over in order, AbortSignal
// =============================================================================================

fn abort_controller() -> JsValue {
    let class = get(&js_sys::global(), "AbortController");
    Reflect::construct(class.unchecked_ref::<Function>(), &Array::new())
        .expect("new AbortController()")
}

fn abort(controller: &JsValue, reason: &JsValue) {
    let f: Function = get(controller, "abort").unchecked_into();
    f.call1(controller, reason).expect("controller.abort()");
}

fn with_signal(options: &[(&str, JsValue)], controller: &JsValue) -> JsValue {
    let o = object(options);
    set(&o, "signal", &get(controller, "signal"));
    o
}

#[wasm_bindgen_test]
async fn memory_store_waiters_run_in_arrival_order_without_polling() {
    use_memory_store();
    let k = fresh_key("fifo");
    let holder = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(holder.acquire(undef()), "holder").await);
    let order = Rc::new(RefCell::new(Vec::new()));
    let runs = Array::new();
    for i in 0..6 {
        let order = order.clone();
        let task = fn0(move || {
            order.borrow_mut().push(i);
            Ok(later(5, JsValue::from(i)).into())
        });
        // A retry delay far longer than the test: only a hand-over can get them in on time.
        let options = object(&[("timeout", num(20_000.0)), ("retryDelay", num(60_000.0))]);
        runs.push(&new_lock(&k, 10_000.0).run(task.into(), options));
    }
    sleep(20).await;
    assert!(fulfilled_bool(holder.release(), "release").await);
    let all: Array = fulfilled(Promise::all(&runs), "all waiters")
        .await
        .unchecked_into();
    assert_eq!(all.length(), 6);
    assert_eq!(
        *order.borrow(),
        vec![0, 1, 2, 3, 4, 5],
        "not first come, first served"
    );
}

#[wasm_bindgen_test]
async fn aborting_a_queued_run_rejects_with_the_reason_and_leaves_nothing_held() {
    use_memory_store();
    let k = fresh_key("abort");
    let holder = new_lock(&k, 10_000.0);
    assert!(fulfilled_bool(holder.acquire(undef()), "holder").await);
    let controller = abort_controller();
    let calls = Rc::new(Cell::new(0));
    let waiting = new_lock(&k, 10_000.0).run(
        counting_task(&calls, undef()).into(),
        with_signal(&[("timeout", num(20_000.0))], &controller),
    );
    sleep(10).await;
    let reason: JsValue = js_sys::Error::new("user went away").into();
    abort(&controller, &reason);
    let e = rejected(waiting, "aborted run").await;
    assert!(
        Object::is(&e, &reason),
        "rejected with {e:?}, not the signal's reason"
    );
    assert_eq!(calls.get(), 0, "fn ran after the abort");
    assert!(fulfilled_bool(holder.release(), "release").await);
    assert!(
        !fulfilled_bool(new_lock(&k, 1_000.0).is_locked(), "isLocked").await,
        "the aborted waiter was handed the key"
    );
}

#[wasm_bindgen_test]
async fn an_aborted_signal_rejects_without_touching_the_store() {
    let rec = install(Kind::Js).unwrap();
    let controller = abort_controller();
    abort(&controller, &s("stop"));
    let l = new_lock(&fresh_key("pre-aborted"), 1_000.0);
    let e = rejected(l.acquire(with_signal(&[], &controller)), "acquire").await;
    assert_eq!(e, s("stop"));
    let calls = Rc::new(Cell::new(0));
    let e = rejected(
        l.run(
            counting_task(&calls, undef()).into(),
            with_signal(&[], &controller),
        ),
        "run",
    )
    .await;
    assert_eq!(e, s("stop"));
    assert_eq!(calls.get(), 0);
    assert!(
        rec.calls.borrow().is_empty(),
        "the store was called: {:?}",
        rec.calls.borrow()
    );
    use_memory_store();
}

#[wasm_bindgen_test]
async fn a_signal_that_is_not_an_abort_signal_is_a_type_error() {
    use_memory_store();
    let l = new_lock(&fresh_key("bad-signal"), 1_000.0);
    for (what, signal) in [
        ("42", num(42.0)),
        ("{}", Object::new().into()),
        ("null", JsValue::NULL),
    ] {
        let options = object(&[("signal", signal)]);
        let e = rejected(l.acquire(options), what).await;
        assert_type_error(&e, &format!("acquire({{ signal: {what} }})"));
    }
}

#[wasm_bindgen_test]
async fn a_js_store_with_acquire_or_wait_is_waited_on_and_withdrawn_from() {
    let (good, rec) = js_store(Answer::Resolved);
    // acquireOrWait never grants: it resolves false once withdraw is called.
    let wait = Function::new_with_args(
        "k, o, t, waitMs, pollMs",
        "this.__args = [k, o, t, waitMs, pollMs]; return new Promise((r) => { this.__finish = r; });",
    );
    let withdraw =
        Function::new_with_args("k, o", "this.__withdrawn = true; this.__finish(false);");
    let store = with_method(
        &with_method(&good, "acquireOrWait", wait),
        "withdraw",
        withdraw,
    );
    fulfilled_sync(set_lock_store(store.clone()), "set");
    let controller = abort_controller();
    let l = new_lock(&fresh_key("waiting-store"), 1_000.0);
    let pending = l.acquire(with_signal(
        &[("timeout", num(5_000.0)), ("retryDelay", num(25.0))],
        &controller,
    ));
    sleep(20).await;
    // No polling: the store's plain acquire was tried at most never (it waits instead).
    assert!(
        !rec.calls.borrow().iter().any(|c| c.starts_with("acquire")),
        "{:?}",
        rec.calls.borrow()
    );
    abort(&controller, &s("enough"));
    assert_eq!(rejected(pending, "aborted acquire").await, s("enough"));
    assert_eq!(
        get(&store, "__withdrawn"),
        JsValue::TRUE,
        "withdraw was not called"
    );
    let args: Array = get(&store, "__args").unchecked_into();
    assert_eq!(args.get(3).as_f64(), Some(5_000.0), "waitMs");
    assert_eq!(args.get(4).as_f64(), Some(25.0), "pollMs");
    use_memory_store();
}

// =============================================================================================
// Holding: the loss signal, auto-extend, force-release, hold() and await using
// =============================================================================================

/// Runs `body` (an async JS function body) with `lock(key, ttl)`, `key` and `sleep(ms)` in scope
/// and answers what it returns.
async fn scenario(name: &str, body: &str) -> JsValue {
    use_memory_store();
    let make =
        Closure::<dyn Fn(JsValue, JsValue) -> JsResult>::new(|k, t| lock(k, t).map(JsValue::from))
            .into_js_value();
    let f = Function::new_with_args(
        "lock, key",
        &format!(
            "const sleep = (ms) => new Promise((r) => setTimeout(r, ms));\n\
             return (async () => {{ {body} }})();"
        ),
    );
    let promise = f
        .call2(&JsValue::UNDEFINED, &make, &s(&fresh_key(name)))
        .unwrap_or_else(|e| panic!("{name}: threw {e:?}"));
    fulfilled(promise.unchecked_into(), name).await
}

#[track_caller]
fn assert_json(value: &JsValue, expected: &str) {
    let got = js_sys::JSON::stringify(value)
        .map(String::from)
        .unwrap_or_default();
    assert_eq!(got, expected);
}

#[wasm_bindgen_test]
async fn the_run_signal_aborts_at_the_local_deadline_without_auto_extend() {
    let out = scenario(
        "signal-expiry",
        r#"
        const [ran, seen] = await lock(key, 150).run(async ({ signal }) => {
          const before = signal.aborted;
          await sleep(400);
          return { before, after: signal.aborted, name: signal.reason?.name, key: signal.reason?.key === key };
        });
        return { ran, ...seen };
        "#,
    )
    .await;
    assert_json(
        &out,
        r#"{"ran":true,"before":false,"after":true,"name":"LockNotHeldError","key":true}"#,
    );
}

#[wasm_bindgen_test]
async fn auto_extend_keeps_the_lock_through_five_ttls() {
    let out = scenario(
        "auto-extend",
        r#"
        let rivalWon = false;
        const [ran, aborted] = await lock(key, 150).run(async ({ signal }) => {
          for (let i = 0; i < 15; i++) {
            if (await lock(key, 150).acquire()) rivalWon = true;
            await sleep(50);
          }
          return signal.aborted;
        }, { autoExtend: true });
        return { ran, aborted, rivalWon, free: !(await lock(key).isLocked()) };
        "#,
    )
    .await;
    assert_json(
        &out,
        r#"{"ran":true,"aborted":false,"rivalWon":false,"free":true}"#,
    );
}

#[wasm_bindgen_test]
async fn max_hold_ms_stops_extending_and_aborts_the_signal() {
    let out = scenario(
        "max-hold",
        r#"
        const started = Date.now();
        const [, seen] = await lock(key, 100).run(async ({ signal }) => {
          await new Promise((r) => signal.addEventListener("abort", r));
          return { after: Date.now() - started, message: signal.reason.message };
        }, { autoExtend: { every: 30, maxHoldMs: 250 } });
        return { early: seen.after < 240, late: seen.after > 5000, cap: /maximum hold/.test(seen.message) };
        "#,
    )
    .await;
    assert_json(&out, r#"{"early":false,"late":false,"cap":true}"#);
}

#[wasm_bindgen_test]
async fn force_release_frees_a_held_key_and_the_holder_is_told_at_its_next_extend() {
    let out = scenario(
        "force",
        r#"
        const [, seen] = await lock(key, 10000).run(async ({ signal }) => {
          const forced = await lock(key).forceRelease();
          await Promise.race([new Promise((r) => signal.addEventListener("abort", r)), sleep(3000)]);
          return { forced, aborted: signal.aborted };
        }, { autoExtend: { every: 40 } });
        return { ...seen, again: await lock(key).forceRelease() };
        "#,
    )
    .await;
    assert_json(&out, r#"{"forced":true,"aborted":true,"again":false}"#);
}

#[wasm_bindgen_test]
async fn hold_and_async_dispose_release_the_lock() {
    let out = scenario(
        "dispose",
        r#"
        const held = await lock(key, 10000).hold({ timeout: 50 });
        const fence = held.fence;
        const busy = await lock(key, 10000).hold({ timeout: 30 }).catch((e) => e);
        const dispose = Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose");
        await held[dispose]();
        return {
          fence: Number.isSafeInteger(fence),
          busy: busy.name, busyKey: busy.key === key, isError: busy instanceof Error,
          free: !(await lock(key).isLocked()),
        };
        "#,
    )
    .await;
    assert_json(
        &out,
        r#"{"fence":true,"busy":"LockUnavailableError","busyKey":true,"isError":true,"free":true}"#,
    );
}

#[wasm_bindgen_test]
async fn auto_extend_outside_run_holds_until_release_and_stops_there() {
    let out = scenario(
        "keeper",
        r#"
        const l = lock(key, 120);
        await l.acquire();
        const context = l.autoExtend({ every: 30 });
        const same = l.autoExtend() === context;
        await sleep(600);
        const alive = !(await l.isExpired()) && !context.signal.aborted && l.signal === context.signal;
        const released = await l.release();
        await sleep(200);
        return { same, alive, released, free: !(await lock(key).isLocked()), signalAfter: l.signal === undefined };
        "#,
    )
    .await;
    assert_json(
        &out,
        r#"{"same":true,"alive":true,"released":true,"free":true,"signalAfter":true}"#,
    );
}

#[wasm_bindgen_test]
async fn bad_auto_extend_options_are_refused() {
    use_memory_store();
    let l = new_lock(&fresh_key("bad-keep"), 1_000.0);
    let calls = Rc::new(Cell::new(0));
    for (what, value, range) in [
        ("\"yes\"", s("yes"), false),
        ("{ every: 0 }", object(&[("every", num(0.0))]), true),
        ("{ every: \"1\" }", object(&[("every", s("1"))]), false),
        (
            "{ maxHoldMs: -1 }",
            object(&[("maxHoldMs", num(-1.0))]),
            true,
        ),
    ] {
        let options = object(&[("autoExtend", value)]);
        let e = rejected(l.run(counting_task(&calls, undef()).into(), options), what).await;
        if range {
            assert!(e.dyn_ref::<RangeError>().is_some(), "{what}: {e:?}");
        } else {
            assert_type_error(&e, what);
        }
    }
    assert_eq!(calls.get(), 0);
}

#[wasm_bindgen_test]
async fn a_waited_grant_s_ttl_runs_from_the_hand_over() {
    let (good, _) = js_store(Answer::Resolved);
    // The store answers after 300 ms, saying the grant waited 290 ms in its queue; the TTL is
    // 200 ms. Counted from the request, the hold would already look expired; from the grant, not.
    let wait = Function::new_with_args(
        "k, o, t, waitMs, pollMs",
        "return new Promise((r) => setTimeout(() => r({ fence: 7, waitedMs: 290 }), 300));",
    );
    fulfilled_sync(
        set_lock_store(with_method(&good, "acquireOrWait", wait.clone())),
        "set",
    );
    let l = new_lock(&fresh_key("waited"), 200.0);
    let options = object(&[("timeout", num(5_000.0))]);
    assert!(fulfilled_bool(l.acquire(options.clone()), "acquire").await);
    assert_eq!(l.fence().as_f64(), Some(7.0));
    assert!(
        !fulfilled_bool(l.is_expired(), "isExpired").await,
        "waitedMs was ignored"
    );
    // A waitedMs that is not a whole number of ms is a broken store.
    let bad = Function::new_with_args("k, o, t, w, p", "return { fence: 8, waitedMs: -1 };");
    fulfilled_sync(
        set_lock_store(with_method(&good, "acquireOrWait", bad)),
        "set",
    );
    let e = rejected(
        new_lock(&fresh_key("waited-bad"), 200.0).acquire(options),
        "acquire",
    )
    .await;
    assert_type_error(&e, "acquireOrWait answering waitedMs: -1");
    use_memory_store();
}

// =============================================================================================
// Concurrency
// =============================================================================================

async fn hundred_concurrent_runs_have_one_winner(kind: Kind) {
    install(kind);
    let k = fresh_key("hundred");
    let calls = Rc::new(Cell::new(0));
    let task = counting_async_task(&calls, 30, s("won"));
    let runs = Array::new();
    for _ in 0..100 {
        runs.push(&new_lock(&k, 10_000.0).run(task.clone().into(), undef()));
    }
    let all = fulfilled(Promise::all(&runs), "Promise.all(100 runs)").await;
    let all: Array = all.unchecked_into();
    let mut winners = 0;
    for out in all.iter() {
        match run_outcome(&out) {
            (true, v) => {
                assert_eq!(v, s("won"));
                winners += 1;
            }
            (false, v) => assert!(v.is_undefined()),
        }
    }
    assert_eq!(winners, 1, "{kind:?}: {winners} of 100 concurrent runs ran");
    assert_eq!(calls.get(), 1, "{kind:?}: fn ran {} times", calls.get());
    assert!(!fulfilled_bool(new_lock(&k, 10_000.0).is_locked(), "isLocked").await);
}

#[wasm_bindgen_test]
async fn hundred_concurrent_runs_have_one_winner_memory() {
    hundred_concurrent_runs_have_one_winner(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn hundred_concurrent_runs_have_one_winner_js_store() {
    hundred_concurrent_runs_have_one_winner(Kind::Js).await;
}

async fn twenty_waiters_all_run_one_at_a_time(kind: Kind) {
    install(kind);
    let k = fresh_key("waiters");
    let inside = Rc::new(Cell::new(0u32));
    let most_inside = Rc::new(Cell::new(0u32));
    let ran = Rc::new(Cell::new(0u32));
    let task = {
        let (inside, most_inside, ran) = (inside.clone(), most_inside.clone(), ran.clone());
        fn0(move || {
            ran.set(ran.get() + 1);
            inside.set(inside.get() + 1);
            most_inside.set(most_inside.get().max(inside.get()));
            let inside = inside.clone();
            Ok(future_to_promise(async move {
                sleep(3).await;
                inside.set(inside.get() - 1);
                Ok(undef())
            })
            .into())
        })
    };
    // Generous timeout so a busy machine cannot starve a waiter; the TTL is long so the lock
    // can only change hands by release.
    let options = object(&[("timeout", num(60_000.0)), ("retryDelay", num(2.0))]);
    let runs = Array::new();
    for _ in 0..20 {
        let l = new_lock(&k, 10_000.0);
        runs.push(&l.run(task.clone().into(), options.clone()));
    }
    let all: Array = fulfilled(Promise::all(&runs), "Promise.all(20 waiters)")
        .await
        .unchecked_into();
    let ran_count = all.iter().filter(|out| run_outcome(out).0).count();
    assert_eq!(
        ran_count, 20,
        "{kind:?}: only {ran_count} of 20 waiters ran"
    );
    assert_eq!(ran.get(), 20);
    assert_eq!(
        most_inside.get(),
        1,
        "{kind:?}: {} callers were inside at once",
        most_inside.get()
    );
    assert_eq!(inside.get(), 0);
}

#[wasm_bindgen_test]
async fn twenty_waiters_all_run_one_at_a_time_memory() {
    twenty_waiters_all_run_one_at_a_time(Kind::Memory).await;
}

#[wasm_bindgen_test]
async fn twenty_waiters_all_run_one_at_a_time_js_store() {
    twenty_waiters_all_run_one_at_a_time(Kind::Js).await;
}

// =============================================================================================
// Owner tokens
// =============================================================================================

/// Wraps `globalThis.crypto.getRandomValues` to count calls and bytes; `restore()` undoes it.
fn spy_on_get_random_values() -> JsValue {
    let body = r#"
        const c = globalThis.crypto;
        const original = c.getRandomValues;
        const own = Object.prototype.hasOwnProperty.call(c, "getRandomValues");
        const spy = { calls: 0, bytes: 0 };
        spy.restore = () => { if (own) c.getRandomValues = original; else delete c.getRandomValues; };
        c.getRandomValues = function (array) {
            spy.calls += 1;
            spy.bytes += array.byteLength;
            return original.call(c, array);
        };
        return spy;
    "#;
    Function::new_no_args(body)
        .call0(&JsValue::NULL)
        .expect("installing the getRandomValues spy")
}

#[wasm_bindgen_test]
async fn owner_tokens_are_fresh_and_come_from_crypto_get_random_values() {
    let (store, rec) = js_store(Answer::Plain);
    fulfilled_sync(set_lock_store(store), "setLockStore");
    let spy = spy_on_get_random_values();
    const N: usize = 1000;
    let outcome = async {
        for i in 0..N {
            let l = new_lock(&format!("wasm-test:tokens:{i}"), 10_000.0);
            assert!(fulfilled_bool(l.acquire(undef()), "acquire").await);
            assert!(fulfilled_bool(l.release(), "release").await);
        }
    };
    outcome.await;
    let calls = get(&spy, "calls").as_f64().unwrap_or(0.0);
    let bytes = get(&spy, "bytes").as_f64().unwrap_or(0.0);
    let restore: Function = get(&spy, "restore").unchecked_into();
    restore.call0(&spy).unwrap();

    let owners = rec.owners.borrow();
    assert_eq!(owners.len(), N);
    let distinct: HashSet<&String> = owners.iter().collect();
    assert_eq!(distinct.len(), N, "owner tokens repeated");
    for owner in owners.iter() {
        assert_eq!(
            owner.len(),
            32,
            "a token must carry 128 bits as hex: {owner:?}"
        );
        assert!(
            owner
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{owner:?}"
        );
    }
    // Every token's 16 bytes came from the platform CSPRNG (the core may draw a few tokens'
    // worth ahead of time, so allow one pool's worth — 256 bytes — drawn before the spy).
    assert!(calls >= 1.0, "crypto.getRandomValues was never called");
    assert!(
        bytes >= (N * 16 - 256) as f64,
        "only {bytes} random bytes were drawn for {N} tokens of 16 bytes"
    );
}

// =============================================================================================
// checkLockStore
// =============================================================================================

async fn conformance(store: JsValue) -> Vec<(String, bool, String)> {
    let options = object(&[
        ("shortTtlMs", num(40.0)),
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
