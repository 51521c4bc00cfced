//! `LockDurableObjectCore`: the Durable Object's logic, which owns lock rows. Each handler is
//! decode → [`crate::rows`] → encode; the SQL read, the decision and the write happen in one
//! synchronous turn (SQLite-backed Durable Object storage is synchronous), so no other event
//! can run between them and every operation is atomic.
//!
//! Waiting (`acquireOrWait`) keeps the call open in an in-memory FIFO queue per key. A grant to
//! a waiter is decided and written (row and fence) in the synchronous turn that found the key
//! free — a release or force-release, any acquire or `acquireOrWait` call arriving after the
//! holder expired, a queued call's own look (when it queues, and its timer at the holder's
//! expiry), or the alarm — and only then is the waiting call resolved. The key goes to the
//! oldest waiter whose wait is not spent at that turn's clock reading, and never to a plain
//! acquire while anyone waits. The queue lives in memory only: when the object is evicted or
//! restarted, the waiting calls fail and their callers fall back to plain attempts (see
//! `DurableObjectLockStore::acquire_or_wait`).
//!
//! No handler runs a Rust future: each answers a promise that is already settled, or the
//! promise of the alarm call its writes needed, chained to the answer; a queued call's promise
//! is settled by whoever ends its wait (`src/worker/object.js` holds the JS side).
//!
//! Shared holds (semaphore permits, read locks; `acquireShared`, `acquireSharedOrWait`) live in
//! a second table, one row per `(key, owner)`, judged by [`crate::share::fit`]; their waiters
//! join the same queue, and a hand-over grants the front waiters in order while each fits. An
//! object that never kept a shared hold never reads that table on the exclusive path.
//!
//! The parts: `sql.rs` (rows, shared holds and fences in storage), `queue.rs` (the waiting
//! calls), `alarm.rs`; this file has the handlers.

use alloc::collections::VecDeque;
use alloc::rc::{Rc, Weak};
use core::cell::{Cell, RefCell};

use hashbrown::HashMap;
use js_sys::{Array, Function, Promise, Reflect};
use wasm_bindgen::prelude::*;

use super::{describe, key, type_error};
use crate::grant::{Fence, Grant};
use crate::input::{whole_wait_ms, Key, Ttl, MAX_WAIT_MS};
use crate::js::convert::{
    fence_to_js, grant_to_js, metadata, not_a_number, object, owner, required_ttl as ttl, share,
    wait_range_error,
};
use crate::memory::KeyHasher;
use crate::prelude::*;
use crate::rows::{self, Change, Decision, RowView};
use crate::share::{Holding, SharedGrant};
use crate::token::OwnerToken;

mod alarm;
mod queue;
mod sql;

use queue::*;
use sql::*;

#[wasm_bindgen(module = "/src/worker/object.js")]
extern "C" {
    /// `[promise, resolve, reject]`: a queued call's promise and its settling functions.
    fn opened() -> Array;
    /// `look(key, id)` after `ms`; answers the timer.
    #[wasm_bindgen(js_name = lookLater)]
    fn look_later(ms: f64, look: &Function, key: &str, id: u32) -> JsValue;
    #[wasm_bindgen(js_name = stopLooking)]
    fn stop_looking(timer: &JsValue);
    /// `value` once `call` has landed, or what `failed(error)` answers.
    fn after(call: &Promise, value: &JsValue, failed: &Function) -> Promise;
    /// `out` with its `alarm` field from what `read` answers, or what `failed(error)` answers.
    #[wasm_bindgen(js_name = withAlarm)]
    fn with_alarm(read: &Promise, out: &JsValue, failed: &Function) -> Promise;
    /// `snapshot`'s answer, but for its alarm, from the rows of `LIST` and `LIST_SHARED`.
    #[wasm_bindgen(catch, js_name = snapshotOf)]
    fn snapshot_of(
        rows: &js_sys::Iterator,
        shared: &js_sys::Iterator,
        now: f64,
        waiting: f64,
    ) -> Result<JsValue, JsValue>;
    /// `inspect`'s answer from the rows of `HOLDERS` and the count of waiters.
    #[wasm_bindgen(catch)]
    fn inspected(rows: &js_sys::Iterator, waiting: f64) -> Result<JsValue, JsValue>;
}

/// What [`LockDurableObjectCore::edit`] does to a key's holds.
#[derive(Clone, Copy)]
enum Edit<'a> {
    Release(&'a OwnerToken),
    Extend(&'a OwnerToken, Ttl),
    /// Whoever holds it.
    Force,
}

/// A Durable Object holding lock rows in its SQLite storage; the object's own clock decides
/// expiry. Exported to JS under the same name: workerd instantiates the JS
/// `LockDurableObject extends DurableObject` class, which builds one of these and forwards
/// `acquire`, `acquireOrWait`, `acquireShared`, `acquireSharedOrWait`, `withdraw`, `release`,
/// `forceRelease`, `extend`, `isLocked`, `remainingTime`, `inspect`, `snapshot` and `alarm` to
/// it.
#[wasm_bindgen(js_name = LockDurableObjectCore)]
pub struct LockDurableObjectCore {
    inner: Rc<Inner>,
}

pub(super) struct Inner {
    /// `state.storage` and its `sql`, looked up once: every operation uses them.
    storage: DurableObjectStorage,
    sql: SqlStorage,
    /// The alarm this instance last scheduled: `None` = unknown (fresh instance, or a
    /// `setAlarm` that failed), `Some(None)` = no alarm, `Some(Some(t))` = alarm at `t`.
    ///
    /// The alarm is kept at or before the earliest `expires_at` in storage (expired rows
    /// included), never necessarily at it: a release leaves it where it is, and a write whose
    /// expiry is not earlier than it leaves it too. When it fires, the handler deletes what
    /// expired and points it at the next expiry, or leaves none when no row remains.
    alarm_at: Cell<Option<Option<u64>>>,
    /// Whether storage may hold shared holds: read once by the constructor, set by the first
    /// shared grant. While false, no handler reads the shared table.
    shared_seen: Cell<bool>,
    /// The earliest expiry written since the alarm was last brought up to date
    /// ([`Inner::cover_writes`]).
    uncovered: Cell<Option<u64>>,
    /// Calls waiting for a key, oldest first. In memory only: gone with the instance.
    queues: RefCell<HashMap<String, VecDeque<Rc<Waiter>>, KeyHasher>>,
    /// The id of the last waiter queued.
    last_waiter: Cell<u32>,
    /// `(key, id)`: the next look of a queued call, which its timer calls. Made once per
    /// instance, holding the instance weakly.
    look: Function,
    /// `(error)`: an alarm call failed. This instance no longer knows the alarm, so the next
    /// write sets it again from the next expiry; the error is thrown on as a storage error.
    alarm_failed: Function,
}

/// `waitMs` of an `acquireOrWait` call: whole milliseconds from 0 to 2^31 − 1 (fractions round
/// up); a `TypeError` for a non-number, a `RangeError` outside the range.
pub(super) fn wait_ms(name: &str, value: &JsValue) -> Result<u64, JsValue> {
    let ms = value.as_f64().ok_or_else(|| not_a_number(name, value))?;
    whole_wait_ms(ms).ok_or_else(|| wait_range_error(name, ms, MAX_WAIT_MS))
}

/// A waited grant as `acquireOrWait` answers it: `{ fence, waitedMs }` (`true` for a grant
/// without a fence, which this object never makes).
pub(super) fn waited_grant_to_js(grant: Grant) -> Result<JsValue, JsValue> {
    if grant.fence().is_none() {
        return Ok(JsValue::TRUE);
    }
    object(&[
        ("fence", fence_to_js(grant.fence())),
        ("waitedMs", JsValue::from_f64(grant.waited_ms() as f64)),
    ])
}

/// A storage failure (`e`, the exception or a message of ours) as the error a handler answers.
fn storage_error(e: impl Into<JsValue>) -> JsValue {
    storage_error_of(e.into())
}

/// [`storage_error`]'s one body, not one per argument type.
#[inline(never)]
fn storage_error_of(e: JsValue) -> JsValue {
    let text = e
        .as_string()
        .or_else(|| {
            Reflect::get(&e, &JsValue::from_str("message"))
                .ok()?
                .as_string()
        })
        .unwrap_or_else(|| describe(&e));
    js_sys::Error::new(&["LockDurableObject storage failed: ", &text].concat()).into()
}

/// A stored time or counter: SQLite integers arrive as JS numbers.
fn as_ms(value: &JsValue) -> Option<u64> {
    value
        .as_f64()
        .filter(|f| f.is_finite() && *f >= 0.0)
        .map(|f| f as u64)
}

/// The object's clock. Each call reads it once and decides everything by that reading: workerd's
/// clock can move within one synchronous turn, and a hand-over that saw the holder live a
/// millisecond before a take saw the key free would let a plain acquire overtake the queue.
fn now() -> u64 {
    js_sys::Date::now() as u64
}

impl Inner {
    /// Answers `granted`, after covering what this turn wrote with the alarm (at once when that
    /// needs no alarm call).
    pub(super) fn answer_with(&self, granted: JsValue) -> Result<Promise, JsValue> {
        Ok(match self.cover_writes()? {
            None => Promise::resolve(&granted),
            Some(set) => after(&set, &granted, &self.alarm_failed),
        })
    }
}

#[wasm_bindgen(js_class = LockDurableObjectCore)]
impl LockDurableObjectCore {
    /// Built by the JS `LockDurableObject` class's constructor with workerd's `(ctx, env)`.
    /// Creates the tables if needed and brings an older object's up to the current columns;
    /// fails with a clear error when the class was not declared SQLite-backed
    /// (`new_sqlite_classes`).
    #[wasm_bindgen(constructor)]
    pub fn new(ctx: JsValue, _env: JsValue) -> Result<LockDurableObjectCore, JsValue> {
        let storage = Reflect::get(&ctx, &JsValue::from_str("storage"))
            .ok()
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                type_error("LockDurableObject must be constructed with a Durable Object state")
            })?;
        let Some(sql) = Reflect::get(&storage, &JsValue::from_str("sql"))
            .ok()
            .filter(|s| s.is_object())
        else {
            return Err(js_sys::Error::new(
                "LockDurableObject needs SQLite-backed storage: list it under `new_sqlite_classes` in a migration of your wrangler.toml",
            )
            .into());
        };
        // The queue map's keys, drawn now (a request is running, so randomness is allowed):
        // drawing may call JS, which must not happen with the map borrowed.
        let hasher = KeyHasher::default();
        hasher.keys();
        let storage: DurableObjectStorage = storage.unchecked_into();
        let inner = Rc::new_cyclic(|this: &Weak<Inner>| Inner {
            sql: sql.unchecked_into(),
            storage,
            alarm_at: Cell::new(None),
            uncovered: Cell::new(None),
            shared_seen: Cell::new(false),
            queues: RefCell::new(HashMap::with_hasher(hasher)),
            last_waiter: Cell::new(0),
            look: looker(this.clone()),
            alarm_failed: alarm_failed(this.clone()),
        });
        inner.exec(CREATE, &[])?;
        inner.exec(CREATE_FENCES, &[])?;
        inner.exec(CREATE_SHARED, &[])?;
        let opening = next_row(&inner.exec(OPENING, &[])?.raw())?
            .ok_or_else(|| storage_error("the opening read answered no row"))?;
        let yes = |i: u32| as_ms(&opening.get(i)).is_some_and(|n| n > 0);
        inner.shared_seen.set(yes(0));
        // Each statement of an upgrade is written in this synchronous turn, so it lands whole.
        if !yes(1) {
            inner.exec(UPGRADE, &[])?;
        }
        if !yes(2) {
            inner.exec(UPGRADE_SHARED, &[])?;
        }
        Ok(LockDurableObjectCore { inner })
    }

    /// Set-if-absent (an expired row counts as absent). Resolves `{ fence }` when acquired,
    /// `false` otherwise. Never overtakes waiting calls: a free key goes to the oldest waiter
    /// still waiting first, and while anyone is still queued (the hand-over to the one before
    /// failed in storage) a plain acquire is refused. Every acquiring call takes the hold's
    /// metadata (a string of at most 1 KiB of UTF-8) as an optional last argument, which the
    /// hold keeps until it ends.
    pub fn acquire(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        m: &JsValue,
    ) -> Result<Promise, JsValue> {
        self.acquiring(k, o, t, None, None, m)
    }

    /// A shared hold of `weight` permits out of `limit` (a read lock: 1 out of 2^32 − 1) when
    /// it fits beside the live holds and nobody is queued: `{ fence }`; `false` when not now;
    /// `{ heldLimit }` when the live shared holds have another limit (never granted, never
    /// queued). Refused while an exclusive hold is live; an exclusive acquire is refused while
    /// any shared hold is.
    #[wasm_bindgen(js_name = acquireShared)]
    pub fn acquire_shared(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        weight: &JsValue,
        limit: &JsValue,
        m: &JsValue,
    ) -> Result<Promise, JsValue> {
        self.acquiring(k, o, t, Some((weight, limit)), None, m)
    }

    /// `acquireShared`, or wait in the key's one FIFO queue (exclusive and shared waiters alike)
    /// for up to `waitMs`: `{ fence, waitedMs }` once a hand-over grants it, `false` when the
    /// wait is spent, `{ heldLimit }` at once on a limit mismatch.
    #[wasm_bindgen(js_name = acquireSharedOrWait)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_shared_or_wait(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        weight: &JsValue,
        limit: &JsValue,
        w: &JsValue,
        m: &JsValue,
    ) -> Result<Promise, JsValue> {
        self.acquiring(k, o, t, Some((weight, limit)), Some(w), m)
    }

    /// Acquire now if the key is free and nobody is still waiting for it (`{ fence }`); otherwise
    /// wait in the key's FIFO queue for up to `waitMs` for the object to hand it over on release
    /// or at the holder's expiry (`{ fence, waitedMs }`, the grant already in storage), or
    /// resolve `false` when the wait is spent. The call stays open while it waits, and its
    /// metadata is the grant's when the key is handed to it.
    #[wasm_bindgen(js_name = acquireOrWait)]
    pub fn acquire_or_wait(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        w: &JsValue,
        m: &JsValue,
    ) -> Result<Promise, JsValue> {
        self.acquiring(k, o, t, None, Some(w), m)
    }

    /// The four acquiring handlers in one body (kept out of line, so that each export's glue
    /// does not carry its own copy): checks the arguments in the order the handlers take them
    /// (key, owner, TTL, then the share's terms, then `waitMs`, then the metadata), then takes
    /// the hold now or queues the call. A plain acquire is a wait of 0 ms: it never queues.
    #[inline(never)]
    fn acquiring(
        &self,
        k: &JsValue,
        o: &JsValue,
        t: &JsValue,
        terms: Option<(&JsValue, &JsValue)>,
        w: Option<&JsValue>,
        m: &JsValue,
    ) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(k)?, owner(o)?, ttl(t)?);
        let holding = match terms {
            Some((weight, limit)) => Holding::Shared(share(weight, limit)?),
            None => Holding::Exclusive,
        };
        let w = match w {
            Some(w) => wait_ms("waitMs", w)?,
            None => 0,
        };
        self.wait_for(k, o, t, holding, w, metadata(m)?)
    }

    /// Takes `holding` now if it may, or queues the call for up to `w` ms; `said` is the
    /// hold's metadata, or `null`.
    fn wait_for(
        &self,
        k: Key,
        o: OwnerToken,
        t: Ttl,
        holding: Holding,
        w: u64,
        said: JsValue,
    ) -> Result<Promise, JsValue> {
        let since = now();
        self.inner.hand_over(&k, since);
        match self.inner.try_now(&k, &o, t, holding, &said, since)? {
            SharedGrant::Busy if w > 0 => {}
            answer => return self.inner.answer_with(shared_to_js(answer)?),
        }
        let id = self.inner.last_waiter.get().wrapping_add(1);
        self.inner.last_waiter.set(id);
        let call = opened();
        let waiter = Rc::new(Waiter {
            id,
            owner: o,
            ttl: t,
            holding,
            said,
            since,
            give_up_at: since.saturating_add(w),
            answer: RefCell::new(Some((
                call.get(1).unchecked_into(),
                call.get(2).unchecked_into(),
            ))),
            timer: RefCell::new(None),
        });
        self.inner
            .queues
            .borrow_mut()
            .entry(k.as_str().to_owned())
            .or_default()
            .push_back(waiter.clone());
        self.inner.look(&k, &waiter);
        Ok(call.get(0).unchecked_into())
    }

    /// The caller with `owner` stopped waiting for the key: a queued call leaves the queue and
    /// resolves `false`; a key already handed to `owner` is released (and handed on). Resolves
    /// `true` when it did either.
    pub fn withdraw(&self, k: &JsValue, o: &JsValue) -> Result<Promise, JsValue> {
        let (k, o) = (key(k)?, owner(o)?);
        if let Some(waiter) = self.inner.dequeue(&k, &o) {
            self.inner.settle(&waiter, Outcome::NotGranted);
            // It may have been the front waiter that did not fit: those behind may now.
            self.inner.hand_over(&k, now());
            return Ok(Promise::resolve(&JsValue::TRUE));
        }
        self.edit(&k, Edit::Release(&o))
    }

    /// Compare-owner-and-delete. Resolves `true` when this owner held the key and freed it;
    /// the oldest waiter still waiting, if any, holds the key when it resolves.
    pub fn release(&self, k: &JsValue, o: &JsValue) -> Result<Promise, JsValue> {
        let (k, o) = (key(k)?, owner(o)?);
        self.edit(&k, Edit::Release(&o))
    }

    /// Frees the key whoever holds it (operators clearing a stuck lock): every hold goes, and
    /// the waiters at the front are handed the key, as on a release. Resolves whether any hold
    /// was live. The holders learn at their next extend.
    #[wasm_bindgen(js_name = forceRelease)]
    pub fn force_release(&self, k: &JsValue) -> Result<Promise, JsValue> {
        self.edit(&key(k)?, Edit::Force)
    }

    /// Compare-owner-and-reset-expiry to `ttlMs` from now; moves the alarm.
    pub fn extend(&self, k: &JsValue, o: &JsValue, t: &JsValue) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(k)?, owner(o)?, ttl(t)?);
        self.edit(&k, Edit::Extend(&o, t))
    }

    /// Release, force-release and extend in one body, kept out of line: the exclusive row
    /// first (its owner's, or the holder's when forced), then the shared holds; a key that
    /// came free is handed to its waiters. Resolves whether a live hold was changed.
    #[inline(never)]
    fn edit(&self, k: &Key, edit: Edit<'_>) -> Result<Promise, JsValue> {
        let inner = &self.inner;
        let now = now();
        let forced;
        let owner = match edit {
            Edit::Release(o) | Edit::Extend(o, _) => Some(o),
            Edit::Force => match inner.row(k)? {
                Some((holder, _)) => {
                    forced = OwnerToken::parse(holder)
                        .map_err(|_| storage_error("a lock row has a malformed owner"))?;
                    Some(&forced)
                }
                None => None,
            },
        };
        let mut changed = false;
        if let Some(o) = owner {
            changed = inner
                .decide(k, now, &|row, now| match edit {
                    Edit::Extend(_, t) => rows::extend(row, now, o, t),
                    _ => rows::release(row, now, o),
                })?
                .granted;
        }
        changed = match edit {
            Edit::Release(o) => changed || inner.release_shared(k, o, now)?,
            Edit::Extend(o, t) => changed || inner.extend_shared(k, o, t, now)?,
            // Every shared hold goes, whether or not an exclusive one was live.
            Edit::Force => inner.force_release_shared(k, now)? || changed,
        };
        if changed && !matches!(edit, Edit::Extend(..)) {
            inner.hand_over(k, now);
        }
        inner.answer_with(JsValue::from_bool(changed))
    }

    /// Whether any hold of the key is live now.
    #[wasm_bindgen(js_name = isLocked)]
    pub fn is_locked(&self, k: &JsValue) -> Result<bool, JsValue> {
        Ok(self.remaining_ms(k)?.is_some())
    }

    /// Milliseconds until the key's last live hold expires, or `null` (never `undefined`: the
    /// seam's answer rules refuse anything else).
    #[wasm_bindgen(js_name = remainingTime)]
    #[wasm_bindgen(unchecked_return_type = "number | null")]
    pub fn remaining_time(&self, k: &JsValue) -> Result<JsValue, JsValue> {
        Ok(self
            .remaining_ms(k)?
            .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)))
    }

    fn remaining_ms(&self, k: &JsValue) -> Result<Option<u64>, JsValue> {
        let k = key(k)?;
        self.inner.remaining(&k, now())
    }

    /// The alarm handler: hands expired keys to their waiters, deletes the remaining expired
    /// rows, then points the alarm at the next expiry. When it fails (workerd retries it), this
    /// instance no longer knows the alarm, so the next write sets it again from the next expiry.
    pub fn alarm(&self) -> Promise {
        match self.inner.fire() {
            Ok(None) => Promise::resolve(&JsValue::UNDEFINED),
            Ok(Some(set)) => after(&set, &JsValue::UNDEFINED, &self.inner.alarm_failed),
            Err(e) => {
                self.inner.alarm_at.set(None);
                Promise::reject(&e)
            }
        }
    }

    /// Who holds the key and who waits, read in this one synchronous turn: `{ holders:
    /// [{ metadata, fence, remainingMs }], waiting }` — the live holds in fence order
    /// (`metadata` `null` where the hold has none), `remainingMs` whole ms by this object's
    /// clock, `waiting` the calls queued for the key whose wait is not spent. Never an owner
    /// token.
    pub fn inspect(&self, k: &JsValue) -> Result<JsValue, JsValue> {
        let (k, now) = (key(k)?, now());
        let at = JsValue::from_f64(now as f64);
        let rows = self.inner.exec(HOLDERS, &[k.as_str().into(), at])?;
        let waiting = self.inner.waiting_for(&k, now) as f64;
        inspected(&rows.raw(), waiting).map_err(storage_error)
    }

    /// Diagnostics: `{ now, alarm, rows: [{ key, expiresAt }], shared: [{ key, expiresAt,
    /// weight, limit }], waiting }` — what storage holds right now, expired rows not yet deleted
    /// included, and how many waiting calls this instance has queued. Owner tokens are never
    /// exposed.
    pub fn snapshot(&self) -> Promise {
        self.snapshot_now().unwrap_or_else(|e| Promise::reject(&e))
    }

    fn snapshot_now(&self) -> Result<Promise, JsValue> {
        let inner = &self.inner;
        let rows = inner.exec(LIST, &[])?.raw();
        let shared = inner.exec(LIST_SHARED, &[])?.raw();
        let alarm = inner.storage.get_alarm().map_err(storage_error)?;
        let (now, waiting) = (now() as f64, inner.waiting() as f64);
        snapshot_of(&rows, &shared, now, waiting)
            .map_err(storage_error)
            .map(|out| with_alarm(&alarm, &out, &inner.alarm_failed))
    }
}

/// The instance's `look` function (see [`Inner::look`]); it does nothing once the instance is
/// gone or the waiter has left the queue.
fn looker(this: Weak<Inner>) -> Function {
    Closure::<dyn Fn(JsValue, u32)>::new(move |k: JsValue, id: u32| {
        let Some(inner) = this.upgrade() else { return };
        let Some(k) = k.as_string().and_then(|k| Key::new(k).ok()) else {
            return;
        };
        if let Some(waiter) = inner.waiter(k.as_str(), id) {
            waiter.timer.borrow_mut().take();
            inner.look(&k, &waiter);
        }
    })
    .into_js_value()
    .unchecked_into()
}

/// The instance's `alarm_failed` function (see [`Inner::alarm_failed`]).
fn alarm_failed(this: Weak<Inner>) -> Function {
    Closure::<dyn Fn(JsValue) -> Result<JsValue, JsValue>>::new(move |e: JsValue| {
        if let Some(inner) = this.upgrade() {
            inner.alarm_at.set(None);
        }
        Err(storage_error(e))
    })
    .into_js_value()
    .unchecked_into()
}
