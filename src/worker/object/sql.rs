//! The object's storage: the lock rows and the fence counters in its SQLite, the statements,
//! and the row reads and writes each handler makes in its synchronous turn.

use super::*;

pub(super) const CREATE: &str = "CREATE TABLE IF NOT EXISTS keel_locks (
    key TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID";
/// The last fence handed out per key. Never deleted with the lock row, so fences keep rising
/// across release, expiry, alarms and restarts.
pub(super) const CREATE_FENCES: &str = "CREATE TABLE IF NOT EXISTS keel_fences (
    key TEXT PRIMARY KEY NOT NULL,
    last INTEGER NOT NULL
) WITHOUT ROWID";
pub(super) const NEXT_FENCE: &str = "INSERT INTO keel_fences (key, last) VALUES (?, 1)
    ON CONFLICT (key) DO UPDATE SET last = last + 1 RETURNING last";
pub(super) const SELECT: &str = "SELECT owner, expires_at FROM keel_locks WHERE key = ?";
pub(super) const UPSERT: &str = "INSERT INTO keel_locks (key, owner, expires_at) VALUES (?, ?, ?)
    ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at";
pub(super) const DELETE: &str = "DELETE FROM keel_locks WHERE key = ?";
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM keel_locks WHERE expires_at <= ?";
pub(super) const NEXT_EXPIRY: &str = "SELECT MIN(expires_at) FROM keel_locks";
pub(super) const LIST: &str = "SELECT key, expires_at FROM keel_locks ORDER BY key";

#[wasm_bindgen]
extern "C" {
    /// `ctx.storage` of a SQLite-backed Durable Object: its alarm (its `sql` is read once, by
    /// the constructor).
    pub(super) type DurableObjectStorage;
    #[wasm_bindgen(method, catch, js_name = getAlarm)]
    pub(super) fn get_alarm(this: &DurableObjectStorage) -> Result<Promise, JsValue>;
    /// `at` in epoch ms (workerd takes a number or a `Date`).
    #[wasm_bindgen(method, catch, js_name = setAlarm)]
    pub(super) fn set_alarm(this: &DurableObjectStorage, at: f64) -> Result<Promise, JsValue>;

    /// `ctx.storage.sql`: synchronous SQLite.
    pub(super) type SqlStorage;
    /// `exec(query, ...bindings)`: the bindings cross as one slice, not one call per binding.
    #[wasm_bindgen(method, catch, variadic)]
    pub(super) fn exec(
        this: &SqlStorage,
        query: &str,
        bindings: &[JsValue],
    ) -> Result<SqlStorageCursor, JsValue>;

    /// What `exec` answers; `raw()` iterates its rows as arrays of column values.
    pub(super) type SqlStorageCursor;
    #[wasm_bindgen(method)]
    pub(super) fn raw(this: &SqlStorageCursor) -> js_sys::Iterator;
}

/// The next row of a cursor's `raw()` iterator, as an array of column values.
pub(super) fn next_row(rows: &js_sys::Iterator) -> Result<Option<Array>, JsValue> {
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
pub(super) fn first_number(cursor: SqlStorageCursor) -> Result<Option<u64>, JsValue> {
    Ok(next_row(&cursor.raw())?.and_then(|row| as_ms(&row.get(0))))
}

impl Inner {
    pub(super) fn exec(&self, query: &str, args: &[JsValue]) -> Result<SqlStorageCursor, JsValue> {
        self.sql.exec(query, args).map_err(storage_error)
    }

    pub(super) fn row(&self, key: &Key) -> Result<Option<(String, u64)>, JsValue> {
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
    pub(super) fn decide(
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
    pub(super) fn next_fence(&self, key: &Key) -> Result<Fence, JsValue> {
        first_number(self.exec(NEXT_FENCE, &[key.as_str().into()])?)?
            .and_then(|n| Fence::new(n).ok())
            .ok_or_else(|| storage_error("the fence counter is missing or spent"))
    }

    /// Set-if-absent for `owner`, with the fence in the same synchronous turn as the row write.
    /// Does not look at the queue.
    pub(super) fn take(
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
    pub(super) fn expiry(&self, key: &Key, now: u64) -> Result<Option<u64>, JsValue> {
        Ok(self.row(key)?.map(|(_, at)| at).filter(|at| *at > now))
    }
}
