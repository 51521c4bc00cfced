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
    fence_to_js, grant_to_js, not_a_number, object, owner, required_ttl as ttl, wait_range_error,
};
use crate::memory::KeyHasher;
use crate::prelude::*;
use crate::rows::{self, Change, Decision, RowView};
use crate::token::OwnerToken;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS keel_locks (
    key TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID";
/// The last fence handed out per key. Never deleted with the lock row, so fences keep rising
/// across release, expiry, alarms and restarts.
const CREATE_FENCES: &str = "CREATE TABLE IF NOT EXISTS keel_fences (
    key TEXT PRIMARY KEY NOT NULL,
    last INTEGER NOT NULL
) WITHOUT ROWID";
const NEXT_FENCE: &str = "INSERT INTO keel_fences (key, last) VALUES (?, 1)
    ON CONFLICT (key) DO UPDATE SET last = last + 1 RETURNING last";
const SELECT: &str = "SELECT owner, expires_at FROM keel_locks WHERE key = ?";
const UPSERT: &str = "INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at";
const DELETE: &str = "DELETE FROM keel_locks WHERE key = ?";
const DELETE_EXPIRED: &str = "DELETE FROM keel_locks WHERE expires_at <= ?";
const NEXT_EXPIRY: &str = "SELECT MIN(expires_at) FROM keel_locks";
const LIST: &str = "SELECT key, expires_at FROM keel_locks ORDER BY key";

#[wasm_bindgen]
extern "C" {
    /// `ctx.storage` of a SQLite-backed Durable Object: its alarm (its `sql` is read once, by
    /// the constructor).
    type DurableObjectStorage;
    #[wasm_bindgen(method, catch, js_name = getAlarm)]
    fn get_alarm(this: &DurableObjectStorage) -> Result<Promise, JsValue>;
    /// `at` in epoch ms (workerd takes a number or a `Date`).
    #[wasm_bindgen(method, catch, js_name = setAlarm)]
    fn set_alarm(this: &DurableObjectStorage, at: f64) -> Result<Promise, JsValue>;

    /// `ctx.storage.sql`: synchronous SQLite.
    type SqlStorage;
    /// `exec(query, ...bindings)`: the bindings cross as one slice, not one call per binding.
    #[wasm_bindgen(method, catch, variadic)]
    fn exec(
        this: &SqlStorage,
        query: &str,
        bindings: &[JsValue],
    ) -> Result<SqlStorageCursor, JsValue>;

    /// What `exec` answers; `raw()` iterates its rows as arrays of column values.
    type SqlStorageCursor;
    #[wasm_bindgen(method)]
    fn raw(this: &SqlStorageCursor) -> js_sys::Iterator;
}

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
}

/// A Durable Object holding lock rows in its SQLite storage; the object's own clock decides
/// expiry. Exported to JS under the same name: workerd instantiates the JS
/// `LockDurableObject extends DurableObject` class, which builds one of these and forwards
/// `acquire`, `acquireOrWait`, `withdraw`, `release`, `forceRelease`, `extend`, `isLocked`,
/// `remainingTime`, `inspect` and `alarm` to it.
#[wasm_bindgen(js_name = LockDurableObjectCore)]
pub struct LockDurableObjectCore {
    inner: Rc<Inner>,
}

struct Inner {
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
    /// The earliest expiry written since the alarm was last brought up to date
    /// ([`Inner::cover_writes`]).
    uncovered: Cell<Option<u64>>,
    /// Calls waiting for a key, oldest first. In memory only: gone with the instance.
    queues: RefCell<HashMap<String, VecDeque<Rc<Ticket>>, KeyHasher>>,
    /// The id of the last ticket queued.
    last_ticket: Cell<u32>,
    /// `(key, id)`: the next look of a queued call, which its timer calls. Made once per
    /// instance, holding the instance weakly.
    look: Function,
    /// `(error)`: an alarm call failed. This instance no longer knows the alarm, so the next
    /// write sets it again from the next expiry; the error is thrown on as a storage error.
    alarm_failed: Function,
}

/// An `acquireOrWait` call parked in its key's queue.
struct Ticket {
    id: u32,
    owner: OwnerToken,
    ttl: Ttl,
    /// When it joined the queue, by the object's clock.
    since: u64,
    /// When its wait is spent, by the object's clock: from then on it is never handed the key.
    give_up_at: u64,
    /// `resolve` and `reject` of the waiting call's promise, until whoever ends the wait takes
    /// them.
    answer: RefCell<Option<(Function, Function)>>,
    /// The timer of its next look, while one is set.
    timer: RefCell<Option<JsValue>>,
}

/// How a wait ended.
enum Outcome {
    /// The key was handed over; the grant is already in storage.
    Granted(Grant),
    /// The caller withdrew, or the wait was spent before the key came free.
    NotGranted,
    /// The hand-over failed in storage.
    Failed(JsValue),
}

impl Ticket {
    fn is_settled(&self) -> bool {
        self.answer.borrow().is_none()
    }
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

fn storage_error(e: impl Into<JsValue>) -> JsValue {
    let e: JsValue = e.into();
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

/// The next row of a cursor's `raw()` iterator, as an array of column values.
fn next_row(rows: &js_sys::Iterator) -> Result<Option<Array>, JsValue> {
    let next = rows.next().map_err(storage_error)?;
    if next.done() {
        return Ok(None);
    }
    let row = next.value();
    if !Array::is_array(&row) {
        return Err(storage_error("a row is not an array"));
    }
    Ok(Some(row.unchecked_into()))
}

/// The first column of a cursor's first row, as a time or counter.
fn first_number(cursor: SqlStorageCursor) -> Result<Option<u64>, JsValue> {
    Ok(next_row(&cursor.raw())?.and_then(|row| as_ms(&row.get(0))))
}

/// The object's clock. Each call reads it once and decides everything by that reading: workerd's
/// clock can move within one synchronous turn, and a hand-over that saw the holder live a
/// millisecond before a take saw the key free would let a plain acquire overtake the queue.
fn now() -> u64 {
    js_sys::Date::now() as u64
}

impl Inner {
    fn exec(&self, query: &str, args: &[JsValue]) -> Result<SqlStorageCursor, JsValue> {
        self.sql.exec(query, args).map_err(storage_error)
    }

    fn row(&self, key: &Key) -> Result<Option<(String, u64)>, JsValue> {
        let cursor = self.exec(SELECT, &[key.as_str().into()])?;
        let Some(row) = next_row(&cursor.raw())? else {
            return Ok(None);
        };
        match (row.length(), row.get(0).as_string()) {
            (2, Some(owner)) => match as_ms(&row.get(1)) {
                Some(ms) => Ok(Some((owner, ms))),
                None => Err(storage_error("a lock row has a malformed expires_at")),
            },
            _ => Err(storage_error("a lock row has an unexpected shape")),
        }
    }

    /// Reads the row, decides with `rule` at `now`, writes the decision. Synchronous: atomic.
    fn decide(
        &self,
        key: &Key,
        owner: &OwnerToken,
        now: u64,
        rule: impl FnOnce(Option<RowView<'_>>, u64) -> Decision,
    ) -> Result<Decision, JsValue> {
        let row = self.row(key)?;
        let view = row.as_ref().map(|(owner, expires_at)| RowView {
            owner,
            expires_at: *expires_at,
        });
        let decision = rule(view, now);
        match decision.change {
            Change::Keep => {}
            Change::Put { expires_at } => {
                let earliest = self
                    .uncovered
                    .get()
                    .map_or(expires_at, |e| e.min(expires_at));
                self.uncovered.set(Some(earliest));
                self.exec(
                    UPSERT,
                    &[
                        key.as_str().into(),
                        owner.as_str().into(),
                        JsValue::from_f64(expires_at as f64),
                    ],
                )?;
            }
            Change::Delete => {
                self.exec(DELETE, &[key.as_str().into()])?;
            }
        }
        Ok(decision)
    }

    /// Bumps and answers `key`'s fence counter. Runs in the same synchronous turn as the row
    /// write it belongs to, so no other call can take a fence in between.
    fn next_fence(&self, key: &Key) -> Result<Fence, JsValue> {
        first_number(self.exec(NEXT_FENCE, &[key.as_str().into()])?)?
            .and_then(|n| Fence::new(n).ok())
            .ok_or_else(|| storage_error("the fence counter is missing or spent"))
    }

    /// Set-if-absent for `owner`, with the fence in the same synchronous turn as the row write.
    /// Does not look at the queue.
    fn take(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        now: u64,
    ) -> Result<Option<Grant>, JsValue> {
        let d = self.decide(key, owner, now, |row, now| rows::acquire(row, now, ttl))?;
        Ok(match d.granted {
            true => Some(Grant::new(Some(self.next_fence(key)?))),
            false => None,
        })
    }

    /// The expiry of `key`'s live hold, if any.
    fn expiry(&self, key: &Key, now: u64) -> Result<Option<u64>, JsValue> {
        Ok(self.row(key)?.map(|(_, at)| at).filter(|at| *at > now))
    }

    fn has_waiters(&self, key: &Key) -> bool {
        self.queues.borrow().contains_key(key.as_str())
    }

    fn waiting(&self) -> usize {
        self.queues.borrow().values().map(VecDeque::len).sum()
    }

    /// When `key` is free at `now` and has waiters, grants it to the oldest one still waiting:
    /// writes the row and the fence, then settles the ticket (its call resolves once the alarm
    /// covers the new row). A waiter whose wait is spent by `now` (the object was busy when its
    /// timer was due) is answered `false` and passed over, as if its timer had run first. A
    /// storage failure fails that waiter's call rather than the operation that freed the key;
    /// a failed read leaves the queue alone (the waiters' timers try again). Answers whether
    /// it took any waiter out of the queue.
    fn hand_over(&self, key: &Key, now: u64) -> bool {
        if !self.has_waiters(key) {
            return false;
        }
        if !matches!(self.expiry(key, now), Ok(None)) {
            return false;
        }
        let mut popped = false;
        while let Some(ticket) = self.pop_waiter(key) {
            popped = true;
            if ticket.give_up_at <= now {
                self.settle(&ticket, Outcome::NotGranted);
                continue;
            }
            let outcome = match self.take(key, &ticket.owner, ticket.ttl, now) {
                Ok(Some(grant)) => Outcome::Granted(grant.waited(now.saturating_sub(ticket.since))),
                Ok(None) => Outcome::Failed(storage_error("a free key refused its hand-over")),
                Err(e) => Outcome::Failed(e),
            };
            self.settle(&ticket, outcome);
            break;
        }
        popped
    }

    /// Takes the oldest ticket out of `key`'s queue.
    fn pop_waiter(&self, key: &Key) -> Option<Rc<Ticket>> {
        self.remove_waiter(key, VecDeque::pop_front)
    }

    /// Takes the ticket `pick` chooses out of `key`'s queue; a queue left empty goes with it.
    fn remove_waiter(
        &self,
        key: &Key,
        pick: impl FnOnce(&mut VecDeque<Rc<Ticket>>) -> Option<Rc<Ticket>>,
    ) -> Option<Rc<Ticket>> {
        let mut queues = self.queues.borrow_mut();
        let queue = queues.get_mut(key.as_str())?;
        let picked = pick(queue);
        if queue.is_empty() {
            queues.remove(key.as_str());
        }
        picked
    }

    /// Takes `ticket` out of `key`'s queue (a no-op when the hand-over already took it).
    fn leave(&self, key: &Key, ticket: &Ticket) {
        self.remove_waiter(key, |queue| {
            let at = queue.iter().position(|t| t.id == ticket.id)?;
            queue.remove(at)
        });
    }

    /// Takes `owner`'s oldest ticket out of `key`'s queue, if it is queued.
    fn dequeue(&self, key: &Key, owner: &OwnerToken) -> Option<Rc<Ticket>> {
        self.remove_waiter(key, |queue| {
            let at = queue.iter().position(|t| t.owner == *owner)?;
            queue.remove(at)
        })
    }

    /// `key`'s queued ticket `id`, if it is still queued.
    fn ticket(&self, key: &str, id: u32) -> Option<Rc<Ticket>> {
        let queues = self.queues.borrow();
        queues.get(key)?.iter().find(|t| t.id == id).cloned()
    }

    /// Ends `ticket`'s wait with `outcome` (once: later calls do nothing) and stops its timer.
    /// A grant is answered once the alarm covers the rows written so far.
    fn settle(&self, ticket: &Ticket, outcome: Outcome) {
        let Some((resolve, reject)) = ticket.answer.borrow_mut().take() else {
            return;
        };
        if let Some(timer) = ticket.timer.borrow_mut().take() {
            stop_looking(&timer);
        }
        let answer = match outcome {
            Outcome::Granted(grant) => {
                waited_grant_to_js(grant).and_then(|grant| self.answer_with(grant).map(Into::into))
            }
            Outcome::NotGranted => Ok(JsValue::FALSE),
            Outcome::Failed(e) => Err(e),
        };
        // Settling a promise runs no JS code of its own, so these calls cannot fail.
        let _ = match answer {
            Ok(value) => resolve.call1(&JsValue::UNDEFINED, &value),
            Err(error) => reject.call1(&JsValue::UNDEFINED, &error),
        };
    }

    /// A queued call's look, when it queues and whenever its timer fires: it ends the wait
    /// once it is spent, hands the key over at once when it finds the key free, and otherwise
    /// sets its timer for the holder's expiry (the holder may never release) or its own
    /// deadline, whichever is first. A hand-over settles the ticket in between.
    fn look(&self, key: &Key, ticket: &Ticket) {
        loop {
            if ticket.is_settled() {
                return;
            }
            let now = now();
            if now >= ticket.give_up_at {
                self.leave(key, ticket);
                self.settle(ticket, Outcome::NotGranted);
                return;
            }
            let until = match self.expiry(key, now) {
                Ok(Some(expiry)) => expiry.min(ticket.give_up_at),
                // Free by this reading (the holder expired since the call queued): hand it over
                // now rather than wait for the alarm. Each such pass takes at least one waiter
                // out of the queue (this one, or one before it), so the loop ends; a pass that
                // took none (a failed read) waits for the deadline instead.
                Ok(None) if self.hand_over(key, now) => continue,
                Ok(None) | Err(_) => ticket.give_up_at,
            };
            let ms = until.saturating_sub(now).max(1) as f64;
            let timer = look_later(ms, &self.look, key.as_str(), ticket.id);
            *ticket.timer.borrow_mut() = Some(timer);
            return;
        }
    }

    fn next_expiry(&self) -> Result<Option<u64>, JsValue> {
        first_number(self.exec(NEXT_EXPIRY, &[])?)
    }

    /// Brings the alarm up to date with the rows written since it last was: when one of them
    /// expires before the alarm (or there is none, or this instance does not know it), calls
    /// `setAlarm` — synchronously, in the turn of the write, so alarm updates land in the order
    /// of the writes — and answers its promise. Otherwise (steady use: the alarm is already due
    /// at or before the new expiry) no storage call.
    fn cover_writes(&self) -> Result<Option<Promise>, JsValue> {
        let Some(written) = self.uncovered.take() else {
            return Ok(None);
        };
        let at = match self.alarm_at.get() {
            Some(Some(at)) if at <= written => return Ok(None),
            // No alarm means no row but those just written (the alarm handler leaves none only
            // then, and every write since was covered), so the earliest of them is the next
            // expiry; an alarm later than a new expiry moves to it, which keeps it at or before
            // every row's.
            Some(_) => written,
            // Unknown: whatever a previous instance scheduled, the next expiry is right.
            None => match self.next_expiry() {
                Ok(next) => next.map_or(written, |n| n.min(written)),
                Err(e) => {
                    self.uncovered.set(Some(written));
                    return Err(e);
                }
            },
        };
        match self.storage.set_alarm(at as f64) {
            Ok(promise) => {
                self.alarm_at.set(Some(Some(at)));
                Ok(Some(promise))
            }
            Err(e) => {
                self.alarm_at.set(None);
                self.uncovered.set(Some(written));
                Err(storage_error(e))
            }
        }
    }

    /// The alarm's work (see [`LockDurableObjectCore::alarm`]), up to the `setAlarm` call it
    /// makes, if any.
    fn fire(&self) -> Result<Option<Promise>, JsValue> {
        let now = now();
        let waited_for: Vec<String> = self.queues.borrow().keys().cloned().collect();
        for k in waited_for {
            if let Ok(k) = Key::new(k) {
                self.hand_over(&k, now);
            }
        }
        self.exec(DELETE_EXPIRED, &[JsValue::from_f64(now as f64)])?;
        // The alarm that just fired is spent (workerd drops it when this handler succeeds
        // without setting another). The next expiry covers every row, those just handed over
        // included.
        let next = self.next_expiry()?;
        self.uncovered.set(None);
        self.alarm_at.set(Some(None));
        let Some(at) = next else {
            return Ok(None);
        };
        let set = self.storage.set_alarm(at as f64).map_err(storage_error)?;
        self.alarm_at.set(Some(Some(at)));
        Ok(Some(set))
    }

    /// Answers `decision.granted`, after covering what this turn wrote with the alarm.
    fn answer(&self, decision: Decision) -> Result<Promise, JsValue> {
        self.answer_with(JsValue::from_bool(decision.granted))
    }

    /// Answers `granted`, after covering what this turn wrote with the alarm (at once when that
    /// needs no alarm call).
    fn answer_with(&self, granted: JsValue) -> Result<Promise, JsValue> {
        Ok(match self.cover_writes()? {
            None => Promise::resolve(&granted),
            Some(set) => after(&set, &granted, &self.alarm_failed),
        })
    }
}

#[wasm_bindgen(js_class = LockDurableObjectCore)]
impl LockDurableObjectCore {
    /// Built by the JS `LockDurableObject` class's constructor with workerd's `(ctx, env)`.
    /// Creates the lock table if needed; fails with a clear error when the class was not
    /// declared SQLite-backed (`new_sqlite_classes`).
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
            queues: RefCell::new(HashMap::with_hasher(hasher)),
            last_ticket: Cell::new(0),
            look: looker(this.clone()),
            alarm_failed: alarm_failed(this.clone()),
        });
        inner.exec(CREATE, &[])?;
        inner.exec(CREATE_FENCES, &[])?;
        Ok(LockDurableObjectCore { inner })
    }

    /// Set-if-absent (an expired row counts as absent). Resolves `{ fence }` when acquired,
    /// `false` otherwise. Never overtakes waiting calls: a free key goes to the oldest waiter
    /// still waiting first, and while anyone is still queued (the hand-over to the one before
    /// failed in storage) a plain acquire is refused.
    pub fn acquire(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(&k)?, owner(&o)?, ttl(&t)?);
        let now = now();
        self.inner.hand_over(&k, now);
        if self.inner.has_waiters(&k) {
            return Ok(Promise::resolve(&JsValue::FALSE));
        }
        let grant = self.inner.take(&k, &o, t, now)?;
        self.inner.answer_with(grant_to_js(grant)?)
    }

    /// Acquire now if the key is free and nobody is still waiting for it (`{ fence }`); otherwise
    /// wait in the key's FIFO queue for up to `waitMs` for the object to hand it over on release
    /// or at the holder's expiry (`{ fence, waitedMs }`, the grant already in storage), or
    /// resolve `false` when the wait is spent. The call stays open while it waits.
    #[wasm_bindgen(js_name = acquireOrWait)]
    pub fn acquire_or_wait(
        &self,
        k: JsValue,
        o: JsValue,
        t: JsValue,
        w: JsValue,
    ) -> Result<Promise, JsValue> {
        let (k, o, t, w) = (key(&k)?, owner(&o)?, ttl(&t)?, wait_ms("waitMs", &w)?);
        let since = now();
        self.inner.hand_over(&k, since);
        if !self.inner.has_waiters(&k) {
            let grant = self.inner.take(&k, &o, t, since)?;
            if grant.is_some() || w == 0 {
                return self.inner.answer_with(grant_to_js(grant)?);
            }
        } else if w == 0 {
            return Ok(Promise::resolve(&JsValue::FALSE));
        }
        let id = self.inner.last_ticket.get().wrapping_add(1);
        self.inner.last_ticket.set(id);
        let call = opened();
        let ticket = Rc::new(Ticket {
            id,
            owner: o,
            ttl: t,
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
            .push_back(ticket.clone());
        self.inner.look(&k, &ticket);
        Ok(call.get(0).unchecked_into())
    }

    /// The caller with `owner` stopped waiting for the key: a queued call leaves the queue and
    /// resolves `false`; a key already handed to `owner` is released (and handed on). Resolves
    /// `true` when it did either.
    pub fn withdraw(&self, k: JsValue, o: JsValue) -> Result<Promise, JsValue> {
        let (k, o) = (key(&k)?, owner(&o)?);
        if let Some(ticket) = self.inner.dequeue(&k, &o) {
            self.inner.settle(&ticket, Outcome::NotGranted);
            return Ok(Promise::resolve(&JsValue::TRUE));
        }
        self.release(k.as_str().into(), o.as_str().into())
    }

    /// Compare-owner-and-delete. Resolves `true` when this owner held the key and freed it;
    /// the oldest waiter still waiting, if any, holds the key when it resolves.
    pub fn release(&self, k: JsValue, o: JsValue) -> Result<Promise, JsValue> {
        let (k, o) = (key(&k)?, owner(&o)?);
        let now = now();
        let d = self
            .inner
            .decide(&k, &o, now, |row, now| rows::release(row, now, &o))?;
        if d.granted {
            self.inner.hand_over(&k, now);
        }
        self.inner.answer(d)
    }

    /// Frees the key whoever holds it (operators clearing a stuck lock): the row goes, or the
    /// oldest waiter still waiting is handed the key, as on a release. Resolves whether anyone held it. The
    /// holder learns at its next extend.
    #[wasm_bindgen(js_name = forceRelease)]
    pub fn force_release(&self, k: JsValue) -> Result<Promise, JsValue> {
        let k = key(&k)?;
        let now = now();
        let Some((holder, _)) = self.inner.row(&k)? else {
            return Ok(Promise::resolve(&JsValue::FALSE));
        };
        let holder = OwnerToken::parse(holder)
            .map_err(|_| storage_error("a lock row has a malformed owner"))?;
        let d = self.inner.decide(&k, &holder, now, |row, now| {
            rows::release(row, now, &holder)
        })?;
        if d.granted {
            self.inner.hand_over(&k, now);
        }
        self.inner.answer(d)
    }

    /// Compare-owner-and-reset-expiry to `ttlMs` from now; moves the alarm.
    pub fn extend(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(&k)?, owner(&o)?, ttl(&t)?);
        let d = self
            .inner
            .decide(&k, &o, now(), |row, now| rows::extend(row, now, &o, t))?;
        self.inner.answer(d)
    }

    /// Whether anyone holds the key now.
    #[wasm_bindgen(js_name = isLocked)]
    pub fn is_locked(&self, k: JsValue) -> Result<bool, JsValue> {
        Ok(self.remaining_ms(k)?.is_some())
    }

    /// Milliseconds until the key expires, or `null` (never `undefined`: the seam's answer rules
    /// refuse anything else).
    #[wasm_bindgen(js_name = remainingTime)]
    #[wasm_bindgen(unchecked_return_type = "number | null")]
    pub fn remaining_time(&self, k: JsValue) -> Result<JsValue, JsValue> {
        Ok(self
            .remaining_ms(k)?
            .map_or(JsValue::NULL, |ms| JsValue::from_f64(ms as f64)))
    }

    fn remaining_ms(&self, k: JsValue) -> Result<Option<u64>, JsValue> {
        let k = key(&k)?;
        let row = self.inner.row(&k)?;
        let view = row.as_ref().map(|(owner, expires_at)| RowView {
            owner,
            expires_at: *expires_at,
        });
        Ok(rows::remaining_time(view, now()))
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

    /// Diagnostics: `{ now, alarm, rows: [{ key, expiresAt }], waiting }` — what storage holds
    /// right now, expired rows not yet deleted included, and how many `acquireOrWait` calls
    /// this instance has queued. Owner tokens are never exposed.
    pub fn inspect(&self) -> Promise {
        self.inspected().unwrap_or_else(|e| Promise::reject(&e))
    }

    fn inspected(&self) -> Result<Promise, JsValue> {
        let inner = &self.inner;
        let rows = Array::new();
        let list = inner.exec(LIST, &[])?.raw();
        while let Some(row) = next_row(&list)? {
            let key = row.get(0);
            if key.is_string() {
                let at = as_ms(&row.get(1)).map_or(JsValue::NULL, |ms| (ms as f64).into());
                rows.push(&object(&[("key", key), ("expiresAt", at)])?);
            }
        }
        let alarm = inner.storage.get_alarm().map_err(storage_error)?;
        let out = object(&[
            ("now", (now() as f64).into()),
            ("alarm", JsValue::NULL),
            ("rows", rows.into()),
            ("waiting", JsValue::from_f64(inner.waiting() as f64)),
        ])?;
        Ok(with_alarm(&alarm, &out, &inner.alarm_failed))
    }
}

/// The instance's `look` function (see [`Inner::look`]); it does nothing once the instance is
/// gone or the ticket has left the queue.
fn looker(this: Weak<Inner>) -> Function {
    Closure::<dyn Fn(JsValue, u32)>::new(move |k: JsValue, id: u32| {
        let Some(inner) = this.upgrade() else { return };
        let Some(k) = k.as_string().and_then(|k| Key::new(k).ok()) else {
            return;
        };
        if let Some(ticket) = inner.ticket(k.as_str(), id) {
            ticket.timer.borrow_mut().take();
            inner.look(&k, &ticket);
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
