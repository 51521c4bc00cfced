//! The object's storage: the lock rows, the shared holds and the fence counters in its SQLite,
//! the statements, and the reads and writes each handler makes in its synchronous turn.

use super::*;
use crate::share::{fit, Fit, Holding, LiveHolds, SharedGrant};

/// The exclusive holds, one row per key: the holder, its expiry, and the hold's fence and
/// metadata (`NULL`: none) for `inspect`.
pub(super) const CREATE: &str = "CREATE TABLE IF NOT EXISTS keel_locks (
    key TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    fence INTEGER,
    metadata TEXT
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
/// A grant: the new holder's row replaces an expired one whole, fence and metadata included.
pub(super) const UPSERT: &str = "INSERT INTO keel_locks (key, owner, expires_at, fence, metadata)
    VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,
    expires_at = excluded.expires_at, fence = excluded.fence, metadata = excluded.metadata";
/// The holder's extend: its fence and metadata stay.
pub(super) const EXTEND: &str = "UPDATE keel_locks SET expires_at = ? WHERE key = ?";
pub(super) const DELETE: &str = "DELETE FROM keel_locks WHERE key = ?";
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM keel_locks WHERE expires_at <= ?";
pub(super) const NEXT_EXPIRY: &str = "SELECT MIN(expires_at) FROM keel_locks";
pub(super) const LIST: &str = "SELECT key, expires_at FROM keel_locks ORDER BY key";

/// Shared holds (semaphore permits, read locks): one row per `(key, owner)`, beside the
/// exclusive rows rather than in them, so `keel_locks` and its statements stay as they were and
/// an object made before shared holds existed keeps its data (this table is created beside it).
/// `lim` is the limit every live hold of the key has (the grant rule keeps them equal).
pub(super) const CREATE_SHARED: &str = "CREATE TABLE IF NOT EXISTS keel_shared (
    key TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    weight INTEGER NOT NULL,
    lim INTEGER NOT NULL,
    fence INTEGER,
    metadata TEXT,
    PRIMARY KEY (key, owner)
) WITHOUT ROWID";
/// What the constructor needs to know of storage, in one read: whether any shared hold is
/// kept, and whether each table has its `metadata` column (an object made before hold
/// metadata has neither it nor `fence`).
pub(super) const OPENING: &str = "SELECT EXISTS (SELECT 1 FROM keel_shared),
    (SELECT COUNT(*) FROM pragma_table_info('keel_locks') WHERE name = 'metadata'),
    (SELECT COUNT(*) FROM pragma_table_info('keel_shared') WHERE name = 'metadata')";
/// Brings an older object's lock rows up to the current columns. A live row's fence is the
/// key's last one (no grant can come between a live exclusive hold and its fence), so it is
/// filled in from the counter; expired rows get it too, harmlessly.
pub(super) const UPGRADE: &str = "ALTER TABLE keel_locks ADD COLUMN fence INTEGER;
    ALTER TABLE keel_locks ADD COLUMN metadata TEXT;
    UPDATE keel_locks SET fence = (SELECT last FROM keel_fences WHERE keel_fences.key = keel_locks.key)";
/// The same for shared holds, whose fences were not kept: an older permit's fence stays
/// unknown (`NULL`) until it goes.
pub(super) const UPGRADE_SHARED: &str = "ALTER TABLE keel_shared ADD COLUMN fence INTEGER;
    ALTER TABLE keel_shared ADD COLUMN metadata TEXT";
/// The live shared holds of a key: their limit, total weight, first and last expiry.
pub(super) const SHARED_LIVE: &str = "SELECT lim, SUM(weight), MIN(expires_at), MAX(expires_at)
    FROM keel_shared WHERE key = ? AND expires_at > ? GROUP BY lim";
pub(super) const UPSERT_SHARED: &str =
    "INSERT INTO keel_shared (key, owner, expires_at, weight, lim, fence, metadata)
    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, owner) DO UPDATE SET
    expires_at = excluded.expires_at, weight = excluded.weight, lim = excluded.lim,
    fence = excluded.fence, metadata = excluded.metadata";
pub(super) const RELEASE_SHARED: &str =
    "DELETE FROM keel_shared WHERE key = ? AND owner = ? AND expires_at > ? RETURNING 1";
pub(super) const EXTEND_SHARED: &str =
    "UPDATE keel_shared SET expires_at = ? WHERE key = ? AND owner = ? AND expires_at > ? RETURNING 1";
pub(super) const FORCE_SHARED: &str = "DELETE FROM keel_shared WHERE key = ? RETURNING expires_at";
pub(super) const DELETE_EXPIRED_SHARED: &str = "DELETE FROM keel_shared WHERE expires_at <= ?";
pub(super) const NEXT_SHARED_EXPIRY: &str = "SELECT MIN(expires_at) FROM keel_shared";
/// A key's live holds for `inspect`, exclusive and shared alike, in fence order: fence,
/// metadata, ms left.
pub(super) const HOLDERS: &str = "SELECT fence, metadata, expires_at - ?2 FROM keel_locks
    WHERE key = ?1 AND expires_at > ?2
    UNION ALL SELECT fence, metadata, expires_at - ?2 FROM keel_shared
    WHERE key = ?1 AND expires_at > ?2 ORDER BY 1";
pub(super) const LIST_SHARED: &str =
    "SELECT key, expires_at, weight, lim FROM keel_shared ORDER BY key, expires_at";

/// What a key's live shared holds are, as one read found them.
#[derive(Clone, Copy, Default)]
pub(super) struct SharedLive {
    pub(super) limit: Option<u32>,
    pub(super) weight: u64,
    pub(super) first_expiry: Option<u64>,
    pub(super) last_expiry: Option<u64>,
}

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

    /// Reads the row, decides with `rule` (a release or an extend by the row's holder) at `now`,
    /// writes the decision. Synchronous: atomic.
    pub(super) fn decide(
        &self,
        key: &Key,
        now: u64,
        rule: &dyn Fn(Option<RowView<'_>>, u64) -> Decision,
    ) -> Result<Decision, JsValue> {
        let row = self.row(key)?;
        let decision = rule(view(&row), now);
        match decision.change {
            Change::Keep => {}
            Change::Put { expires_at } => {
                self.wrote_expiry(expires_at);
                let at = JsValue::from_f64(expires_at as f64);
                self.exec(EXTEND, &[at, key.as_str().into()])?;
            }
            Change::Delete => {
                self.exec(DELETE, &[key.as_str().into()])?;
            }
        }
        Ok(decision)
    }

    /// Notes an expiry written this turn, for the alarm to cover ([`Inner::cover_writes`]).
    pub(super) fn wrote_expiry(&self, expires_at: u64) {
        let earliest = self
            .uncovered
            .get()
            .map_or(expires_at, |e| e.min(expires_at));
        self.uncovered.set(Some(earliest));
    }

    /// Bumps and answers `key`'s fence counter. Runs in the same synchronous turn as the row
    /// write it belongs to, so no other call can take a fence in between.
    pub(super) fn next_fence(&self, key: &Key) -> Result<Fence, JsValue> {
        first_number(self.exec(NEXT_FENCE, &[key.as_str().into()])?)?
            .and_then(|n| Fence::new(n).ok())
            .ok_or_else(|| storage_error("the fence counter is missing or spent"))
    }

    /// Set-if-absent for `owner`, the row carrying its fence and `said` (the holder's metadata,
    /// or `null`), written in the same synchronous turn as the fence is drawn. Does not look at
    /// the queue.
    pub(super) fn take(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        said: &JsValue,
        now: u64,
    ) -> Result<Option<Grant>, JsValue> {
        // An object that never kept a shared hold skips this read: the exclusive path makes
        // the statements it always made.
        if self.shared_seen.get() && self.shared_live(key, now)?.limit.is_some() {
            return Ok(None);
        }
        let Change::Put { expires_at } = rows::acquire(view(&self.row(key)?), now, ttl).change
        else {
            return Ok(None);
        };
        let fence = self.next_fence(key)?;
        self.wrote_expiry(expires_at);
        self.exec(
            UPSERT,
            &[
                key.as_str().into(),
                owner.as_str().into(),
                JsValue::from_f64(expires_at as f64),
                JsValue::from_f64(fence.get() as f64),
                said.clone(),
            ],
        )?;
        Ok(Some(Grant::new(Some(fence))))
    }

    /// The earliest expiry of `key`'s live holds, if any: when room may next appear.
    pub(super) fn expiry(&self, key: &Key, now: u64) -> Result<Option<u64>, JsValue> {
        let exclusive = self.row(key)?.map(|(_, at)| at).filter(|at| *at > now);
        if !self.shared_seen.get() {
            return Ok(exclusive);
        }
        let shared = self.shared_live(key, now)?.first_expiry;
        Ok(match (exclusive, shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Milliseconds until the last live hold of `key` expires.
    pub(super) fn remaining(&self, key: &Key, now: u64) -> Result<Option<u64>, JsValue> {
        let exclusive = rows::remaining_time(view(&self.row(key)?), now);
        if !self.shared_seen.get() {
            return Ok(exclusive);
        }
        let shared = self.shared_live(key, now)?.last_expiry.map(|at| at - now);
        Ok(exclusive.max(shared))
    }

    /// `key`'s live shared holds at `now` (none on an object that never kept one).
    pub(super) fn shared_live(&self, key: &Key, now: u64) -> Result<SharedLive, JsValue> {
        if !self.shared_seen.get() {
            return Ok(SharedLive::default());
        }
        let cursor = self.exec(
            SHARED_LIVE,
            &[key.as_str().into(), JsValue::from_f64(now as f64)],
        )?;
        let Some(row) = next_row(&cursor.raw())? else {
            return Ok(SharedLive::default());
        };
        let number = |i: u32| as_ms(&row.get(i));
        match (number(0), number(1), number(2), number(3)) {
            (Some(limit), Some(weight), Some(first), Some(last)) => Ok(SharedLive {
                limit: u32::try_from(limit)
                    .ok()
                    .filter(|l| *l > 0)
                    .map(Some)
                    .ok_or_else(|| storage_error("a shared hold has a malformed limit"))?,
                weight,
                first_expiry: Some(first),
                last_expiry: Some(last),
            }),
            _ => Err(storage_error("a shared hold has an unexpected shape")),
        }
    }

    /// What is live on `key` at `now`, for the grant rule.
    pub(super) fn live_holds(&self, key: &Key, now: u64) -> Result<LiveHolds, JsValue> {
        let exclusive = self.row(key)?.is_some_and(|(_, at)| at > now);
        let shared = self.shared_live(key, now)?;
        Ok(LiveHolds {
            exclusive,
            limit: shared.limit,
            weight: shared.weight,
        })
    }

    /// Takes `key` for `owner` as `holding` says, if it fits beside the live holds, without
    /// looking at the queue: the row (with `said`, the holder's metadata or `null`) and the
    /// fence in this synchronous turn.
    pub(super) fn take_holding(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        said: &JsValue,
        now: u64,
    ) -> Result<SharedGrant, JsValue> {
        let share = match holding {
            Holding::Exclusive => return Ok(self.take(key, owner, ttl, said, now)?.into()),
            Holding::Shared(share) => share,
        };
        match fit(self.live_holds(key, now)?, holding) {
            Fit::Fits => {}
            Fit::Full => return Ok(SharedGrant::Busy),
            Fit::Mismatch { held } => return Ok(SharedGrant::LimitMismatch { held }),
        }
        let fence = self.next_fence(key)?;
        let expires_at = now.saturating_add(ttl.as_ms());
        self.wrote_expiry(expires_at);
        self.exec(
            UPSERT_SHARED,
            &[
                key.as_str().into(),
                owner.as_str().into(),
                JsValue::from_f64(expires_at as f64),
                JsValue::from_f64(share.weight().into()),
                JsValue::from_f64(share.limit().into()),
                JsValue::from_f64(fence.get() as f64),
                said.clone(),
            ],
        )?;
        self.shared_seen.set(true);
        Ok(SharedGrant::Granted(Grant::new(Some(fence))))
    }

    /// A request's answer now: the limit mismatch at once, refused while anyone is queued
    /// (FIFO: nobody passes a waiter), else the grant rule.
    pub(super) fn try_now(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        holding: Holding,
        said: &JsValue,
        now: u64,
    ) -> Result<SharedGrant, JsValue> {
        if let (Holding::Shared(_), true) = (holding, self.shared_seen.get()) {
            if let Fit::Mismatch { held } = fit(self.live_holds(key, now)?, holding) {
                return Ok(SharedGrant::LimitMismatch { held });
            }
        }
        if self.has_waiters(key) {
            return Ok(SharedGrant::Busy);
        }
        self.take_holding(key, owner, ttl, holding, said, now)
    }

    /// Frees `owner`'s live shared hold on `key`; answers whether it had one.
    pub(super) fn release_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        now: u64,
    ) -> Result<bool, JsValue> {
        if !self.shared_seen.get() {
            return Ok(false);
        }
        let cursor = self.exec(
            RELEASE_SHARED,
            &[
                key.as_str().into(),
                owner.as_str().into(),
                JsValue::from_f64(now as f64),
            ],
        )?;
        Ok(next_row(&cursor.raw())?.is_some())
    }

    /// Moves `owner`'s live shared hold on `key` to expire `ttl` from `now`.
    pub(super) fn extend_shared(
        &self,
        key: &Key,
        owner: &OwnerToken,
        ttl: Ttl,
        now: u64,
    ) -> Result<bool, JsValue> {
        if !self.shared_seen.get() {
            return Ok(false);
        }
        let expires_at = now.saturating_add(ttl.as_ms());
        let cursor = self.exec(
            EXTEND_SHARED,
            &[
                JsValue::from_f64(expires_at as f64),
                key.as_str().into(),
                owner.as_str().into(),
                JsValue::from_f64(now as f64),
            ],
        )?;
        let extended = next_row(&cursor.raw())?.is_some();
        if extended {
            self.wrote_expiry(expires_at);
        }
        Ok(extended)
    }

    /// Drops every shared hold on `key`; answers whether one was live.
    pub(super) fn force_release_shared(&self, key: &Key, now: u64) -> Result<bool, JsValue> {
        if !self.shared_seen.get() {
            return Ok(false);
        }
        let rows = self.exec(FORCE_SHARED, &[key.as_str().into()])?.raw();
        let mut live = false;
        while let Some(row) = next_row(&rows)? {
            live |= as_ms(&row.get(0)).is_some_and(|at| at > now);
        }
        Ok(live)
    }
}

/// `row` as the row rules read it.
fn view(row: &Option<(String, u64)>) -> Option<RowView<'_>> {
    row.as_ref().map(|(owner, expires_at)| RowView {
        owner,
        expires_at: *expires_at,
    })
}

/// A shared acquire's answer on the seam: `{ fence }`, `false` or `{ heldLimit }`.
pub(super) fn shared_to_js(answer: SharedGrant) -> Result<JsValue, JsValue> {
    match answer {
        SharedGrant::Granted(grant) => grant_to_js(Some(grant)),
        SharedGrant::Busy | SharedGrant::Unsupported => Ok(JsValue::FALSE),
        SharedGrant::LimitMismatch { held } => {
            object(&[("heldLimit", JsValue::from_f64(held.into()))])
        }
    }
}
