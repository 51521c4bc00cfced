//! `LockDurableObject`: the Durable Object that owns lock rows. Each handler is
//! decode → [`crate::rows`] → encode; the SQL read, the decision and the write happen in one
//! synchronous turn (SQLite-backed Durable Object storage is synchronous), so no other event
//! can run between them and every operation is atomic.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use worker::{ScheduledTime, SqlStorageValue, State};

use super::{describe, type_error};
use crate::grant::{Fence, Grant};
use crate::input::Key;
use crate::js::convert::{grant_to_js, key, owner, required_ttl as ttl};
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

/// A Durable Object holding lock rows in its SQLite storage; the object's own clock decides
/// expiry. Exported to JS as `LockDurableObjectCore`: workerd instantiates the JS
/// `LockDurableObject extends DurableObject` class, which builds one of these and forwards
/// `acquire`, `release`, `extend`, `isLocked`, `remainingTime`, `inspect` and `alarm` to it.
#[wasm_bindgen(js_name = LockDurableObjectCore)]
pub struct LockDurableObject {
    inner: Rc<Inner>,
}

struct Inner {
    state: State,
    /// The alarm this instance last scheduled: `None` = unknown (fresh instance),
    /// `Some(None)` = no alarm, `Some(Some(t))` = alarm at `t`.
    alarm_at: Cell<Option<Option<u64>>>,
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
    js_sys::Error::new(&format!("LockDurableObject storage failed: {text}")).into()
}

fn as_ms(value: &SqlStorageValue) -> Option<u64> {
    match *value {
        SqlStorageValue::Integer(i) if i >= 0 => Some(i as u64),
        SqlStorageValue::Float(f) if f.is_finite() && f >= 0.0 => Some(f as u64),
        _ => None,
    }
}

fn now() -> u64 {
    js_sys::Date::now() as u64
}

impl Inner {
    fn exec(&self, query: &str, args: Vec<JsValue>) -> Result<worker::SqlCursor, JsValue> {
        self.state
            .storage()
            .sql()
            .exec_raw(query, args)
            .map_err(storage_error)
    }

    fn row(&self, key: &Key) -> Result<Option<(String, u64)>, JsValue> {
        let cursor = self.exec(SELECT, vec![key.as_str().into()])?;
        let Some(row) = cursor.raw().next() else {
            return Ok(None);
        };
        match row.map_err(storage_error)?.as_slice() {
            [SqlStorageValue::String(owner), expires_at] => match as_ms(expires_at) {
                Some(ms) => Ok(Some((owner.clone(), ms))),
                None => Err(storage_error("a lock row has a malformed expires_at")),
            },
            _ => Err(storage_error("a lock row has an unexpected shape")),
        }
    }

    /// Reads the row, decides with `rule`, writes the decision. Synchronous: atomic.
    fn decide(
        &self,
        key: &Key,
        owner: &OwnerToken,
        rule: impl FnOnce(Option<RowView<'_>>, u64) -> Decision,
    ) -> Result<Decision, JsValue> {
        let row = self.row(key)?;
        let view = row.as_ref().map(|(owner, expires_at)| RowView {
            owner,
            expires_at: *expires_at,
        });
        let decision = rule(view, now());
        match decision.change {
            Change::Keep => {}
            Change::Put { expires_at } => {
                self.exec(
                    UPSERT,
                    vec![
                        key.as_str().into(),
                        owner.as_str().into(),
                        JsValue::from_f64(expires_at as f64),
                    ],
                )?;
            }
            Change::Delete => {
                self.exec(DELETE, vec![key.as_str().into()])?;
            }
        }
        Ok(decision)
    }

    /// Bumps and answers `key`'s fence counter. Runs in the same synchronous turn as the row
    /// write it belongs to, so no other call can take a fence in between.
    fn next_fence(&self, key: &Key) -> Result<Fence, JsValue> {
        let cursor = self.exec(NEXT_FENCE, vec![key.as_str().into()])?;
        let first = cursor.raw().next().transpose().map_err(storage_error)?;
        first
            .and_then(|row| row.first().and_then(as_ms))
            .and_then(|n| Fence::new(n).ok())
            .ok_or_else(|| storage_error("the fence counter is missing or spent"))
    }

    fn next_expiry(&self) -> Result<Option<u64>, JsValue> {
        let cursor = self.exec(NEXT_EXPIRY, vec![])?;
        let first = cursor.raw().next().transpose().map_err(storage_error)?;
        Ok(first.and_then(|row| row.first().and_then(as_ms)))
    }

    /// Points the alarm at the next expiry (or removes it). The storage call is issued in the
    /// same synchronous turn as the write that made it necessary, so alarm updates land in the
    /// order of the writes.
    async fn reschedule(self: Rc<Self>) -> Result<(), JsValue> {
        let next = self.next_expiry()?;
        if self.alarm_at.get() == Some(next) {
            return Ok(());
        }
        self.alarm_at.set(Some(next));
        let storage = self.state.storage();
        match next {
            Some(at) => {
                let date = js_sys::Date::new(&JsValue::from_f64(at as f64));
                storage.set_alarm(ScheduledTime::new(date)).await
            }
            None => storage.delete_alarm().await,
        }
        .map_err(storage_error)
    }

    /// Answers `decision.granted`, after moving the alarm if the decision wrote.
    fn answer(self: &Rc<Self>, decision: Decision) -> Promise {
        self.answer_with(decision, JsValue::from_bool(decision.granted))
    }

    /// Answers `granted`, after moving the alarm if `decision` wrote.
    fn answer_with(self: &Rc<Self>, decision: Decision, granted: JsValue) -> Promise {
        if decision.change == Change::Keep {
            return Promise::resolve(&granted);
        }
        let this = self.clone();
        future_to_promise(async move {
            this.reschedule().await?;
            Ok(granted)
        })
    }
}

#[wasm_bindgen(js_class = LockDurableObjectCore)]
impl LockDurableObject {
    /// Built by the JS `LockDurableObject` class's constructor with workerd's `(ctx, env)`.
    /// Creates the lock table if needed; fails with a clear error when the class was not
    /// declared SQLite-backed (`new_sqlite_classes`).
    #[wasm_bindgen(constructor)]
    pub fn new(ctx: JsValue, _env: JsValue) -> Result<LockDurableObject, JsValue> {
        let storage = Reflect::get(&ctx, &JsValue::from_str("storage"))
            .ok()
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                type_error("LockDurableObject must be constructed with a Durable Object state")
            })?;
        let sql = Reflect::get(&storage, &JsValue::from_str("sql"));
        if !sql.is_ok_and(|s| s.is_object()) {
            return Err(js_sys::Error::new(
                "LockDurableObject needs SQLite-backed storage: list it under `new_sqlite_classes` in a migration of your wrangler.toml",
            )
            .into());
        }
        let state = State::from(ctx.unchecked_into::<worker::worker_sys::DurableObjectState>());
        let inner = Rc::new(Inner {
            state,
            alarm_at: Cell::new(None),
        });
        inner.exec(CREATE, vec![])?;
        inner.exec(CREATE_FENCES, vec![])?;
        Ok(LockDurableObject { inner })
    }

    /// Set-if-absent (an expired row counts as absent). Resolves `{ fence }` when acquired,
    /// `false` otherwise.
    pub fn acquire(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(&k)?, owner(&o)?, ttl(&t)?);
        let d = self
            .inner
            .decide(&k, &o, |row, now| rows::acquire(row, now, t))?;
        let grant = match d.granted {
            true => Some(Grant::new(Some(self.inner.next_fence(&k)?))),
            false => None,
        };
        Ok(self.inner.answer_with(d, grant_to_js(grant)?))
    }

    /// Compare-owner-and-delete. Resolves `true` when this owner held the key and freed it.
    pub fn release(&self, k: JsValue, o: JsValue) -> Result<Promise, JsValue> {
        let (k, o) = (key(&k)?, owner(&o)?);
        let d = self
            .inner
            .decide(&k, &o, |row, now| rows::release(row, now, &o))?;
        Ok(self.inner.answer(d))
    }

    /// Compare-owner-and-reset-expiry to `ttlMs` from now; moves the alarm.
    pub fn extend(&self, k: JsValue, o: JsValue, t: JsValue) -> Result<Promise, JsValue> {
        let (k, o, t) = (key(&k)?, owner(&o)?, ttl(&t)?);
        let d = self
            .inner
            .decide(&k, &o, |row, now| rows::extend(row, now, &o, t))?;
        Ok(self.inner.answer(d))
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

    /// The alarm handler: deletes expired rows, then points the alarm at the next expiry.
    pub fn alarm(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            inner.exec(DELETE_EXPIRED, vec![JsValue::from_f64(now() as f64)])?;
            // The alarm that just fired is spent.
            inner.alarm_at.set(Some(None));
            inner.reschedule().await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Diagnostics: `{ now, alarm, rows: [{ key, expiresAt }] }` — what storage holds right
    /// now, expired rows not yet deleted included. Owner tokens are never exposed.
    pub fn inspect(&self) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let rows = Array::new();
            for row in inner.exec(LIST, vec![])?.raw() {
                let row = row.map_err(storage_error)?;
                if let [SqlStorageValue::String(k), expires_at] = row.as_slice() {
                    let entry = js_sys::Object::new();
                    Reflect::set(&entry, &"key".into(), &k.as_str().into())?;
                    let at = as_ms(expires_at).map_or(JsValue::NULL, |ms| (ms as f64).into());
                    Reflect::set(&entry, &"expiresAt".into(), &at)?;
                    rows.push(&entry);
                }
            }
            let alarm = inner
                .state
                .storage()
                .get_alarm()
                .await
                .map_err(storage_error)?;
            let out = js_sys::Object::new();
            Reflect::set(&out, &"now".into(), &(now() as f64).into())?;
            let alarm = alarm.map_or(JsValue::NULL, |ms| (ms as f64).into());
            Reflect::set(&out, &"alarm".into(), &alarm)?;
            Reflect::set(&out, &"rows".into(), &rows)?;
            Ok(out.into())
        })
    }
}
