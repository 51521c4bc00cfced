//! keel-lock from a Worker written in Rust: "charge invoice 42" exactly once, however many
//! requests ask at the same time — the story `make demo` tells in JS, with workers-rs.
//!
//! ```text
//! POST /charge          {"mode": "immediate"}  try once; answers {"charged": true|false, …}
//! POST /charge          {"mode": "wait"}       wait for the lock, then charge
//! POST /shared          {"kind": "semaphore", "limit": 3}   a shared hold instead of the lock
//! POST /transfer        {"from": "account:1", "to": "account:2", "amount": 10}   hold both
//! GET  /ledger?run=ID   charges booked in that run, and the most ever inside at once
//! GET  /inspect?key=K   who holds the key (each hold's metadata and fence) and who waits
//! ```
//!
//! A charge may say who is charging (`"metadata": "…"`): the lock keeps it with the hold, and
//! `/inspect` shows it, whichever Worker (Rust or JS) took the hold.
//!
//! A transfer holds both accounts with one `MultiLock` (all or none, taken in sorted order, so
//! transfers in opposite directions never deadlock) and books into each account's own run,
//! `RUN/ACCOUNT`, where the account's balance is kept.
//!
//! The lock rows live in keel-lock's `LockDurableObject` (bound as `LOCKS`; `entry.js` exports
//! the class). The `Ledger` Durable Object stands in for the payment provider: it books every
//! charge and notices if two ever overlap.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use keel_lock::lock::RunError;
use keel_lock::worker::DurableObjectLockStore;
use keel_lock::{AcquireOptions, Holding, KeepAlive, LockInfo, Metadata, Share};
use serde::{Deserialize, Serialize};
use worker::{
    durable_object, event, Context, Date, Delay, DurableObject, Env, Method, Request, RequestInit,
    Response, Result, State, Stub, Url,
};

/// How long a charge may hold the lock before another request may take it over.
const LOCK_TTL_MS: u64 = 30_000;

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// Try once: if someone else is charging, say so.
    Immediate,
    /// Wait (up to a minute) for the lock, then charge.
    Wait,
}

/// The body of `POST /charge`. Every field is optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Order {
    /// Which ledger run to book into (the tests give every scenario its own).
    run: String,
    mode: Mode,
    /// The lock key.
    key: String,
    /// How long the "payment provider call" takes, in ms.
    pay_ms: u64,
    /// In `immediate` mode the charge stays inside until this many requests minus one have
    /// been turned away (at most 5 s), so the outcome never depends on scheduling luck.
    expected: u32,
    /// What the hold says about its holder (at most 1 KiB of UTF-8), shown by `/inspect`.
    metadata: Option<String>,
}

impl Default for Order {
    fn default() -> Self {
        Order {
            run: "curl".into(),
            mode: Mode::Immediate,
            key: "invoice:42".into(),
            pay_ms: 25,
            expected: 1,
            metadata: None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Outcome {
    charged: bool,
    fence: Option<u64>,
    waited_ms: Option<u64>,
    total_ms: u64,
    worker: &'static str,
}

fn now() -> u64 {
    Date::now().as_millis()
}

async fn charge(env: &Env, order: Order) -> Result<Outcome> {
    let ledger = Ledger::open(env, &order.run)?;
    let metadata = order.metadata.as_deref().map(Metadata::new).transpose()?;
    let lock = DurableObjectLockStore::from_env(env, "LOCKS")?
        .lock(order.key, LOCK_TTL_MS)?
        .with_metadata(metadata);
    let options = match order.mode {
        Mode::Immediate => AcquireOptions::immediately(),
        Mode::Wait => AcquireOptions {
            timeout_ms: 60_000,
            retry_delay_ms: 5,
        },
    };
    let started = now();
    let entered = Cell::new(None);
    // try_run: acquire, run the task, always release; `None` if someone else held the key.
    // The task answers worker::Result, and `?` turns a lock error or the task's error into a
    // worker::Error.
    let (ledger, entered) = (&ledger, &entered);
    let charged = lock
        .try_run(options, |held| async move {
            entered.set(Some(now()));
            // The fencing token of this hold: the ledger refuses a charge carrying a fence
            // lower than one it has already seen (a holder that paused past its TTL).
            let fence = held.fence.map(|f| f.get());
            ledger.enter(fence).await?;
            if order.mode == Mode::Wait {
                Delay::from(Duration::from_millis(order.pay_ms)).await;
            } else {
                let until = now() + 5_000;
                loop {
                    Delay::from(Duration::from_millis(order.pay_ms.min(20))).await;
                    let refused = ledger.book("stats").await?.refused;
                    if refused + 1 >= order.expected || now() >= until {
                        break;
                    }
                }
            }
            ledger.book("exit").await?;
            Ok::<_, worker::Error>(fence)
        })
        .await?;
    if charged.is_none() {
        ledger.book("refuse").await?;
    }
    Ok(Outcome {
        charged: charged.is_some(),
        fence: charged.flatten(),
        waited_ms: entered.get().map(|at| at - started),
        total_ms: now() - started,
        worker: "rust",
    })
}

/// How `POST /shared` holds its key.
#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// `permits` of a semaphore of `limit`.
    Semaphore,
    /// A read lock: shared with other readers.
    Read,
    /// A write lock: the key alone (a plain lock).
    Write,
}

/// The body of `POST /shared`: one shared or exclusive hold, booked in the ledger with its
/// weight (`permits`; a read lock 1; a write lock `writer_weight`) while it is held, so the
/// ledger's `maxInside` is the most weight ever held at once.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SharedOrder {
    run: String,
    key: String,
    kind: Kind,
    #[serde(default = "one")]
    limit: u32,
    #[serde(default = "one")]
    permits: u32,
    /// Wait up to this long for the hold (0: try once).
    #[serde(default)]
    timeout_ms: u64,
    /// How long to stay inside once in.
    #[serde(default)]
    hold_ms: u64,
    /// The weight a writer books: more than the readers' together, so an overlap shows.
    #[serde(default = "writer_weight")]
    writer_weight: u32,
}

fn one() -> u32 {
    1
}

fn writer_weight() -> u32 {
    1_000
}

/// `{ ran, fence }`, or `{ heldLimit, limit }` for a limit mismatch.
#[derive(Serialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
enum SharedOutcome {
    /// Held (or not, when the key was busy and there was no wait left).
    Ran { ran: bool, fence: Option<u64> },
    /// The key's live holds are a semaphore of another limit.
    LimitMismatch { held_limit: u32, limit: u32 },
}

async fn shared(env: &Env, order: SharedOrder) -> Result<SharedOutcome> {
    let ledger = Ledger::open(env, &order.run)?;
    let (holding, weight) = match order.kind {
        Kind::Semaphore => (
            Holding::Shared(Share::new(order.permits, order.limit)?),
            order.permits,
        ),
        Kind::Read => (Holding::Shared(Share::READ), 1),
        Kind::Write => (Holding::Exclusive, order.writer_weight),
    };
    let lock = DurableObjectLockStore::from_env(env, "LOCKS")?
        .lock(order.key, LOCK_TTL_MS)?
        .holding(holding);
    let options = match order.timeout_ms {
        0 => AcquireOptions::immediately(),
        timeout_ms => AcquireOptions {
            timeout_ms,
            retry_delay_ms: 5,
        },
    };
    let ledger = &ledger;
    let held = lock
        .try_run(options, |held| async move {
            // Holders of one semaphore enter in any order, so no fence goes to the ledger.
            ledger.enter_weighted(weight).await?;
            Delay::from(Duration::from_millis(order.hold_ms)).await;
            ledger.exit_weighted(weight).await?;
            Ok::<_, worker::Error>(held.fence.map(|f| f.get()))
        })
        .await;
    match held {
        Ok(fence) => Ok(SharedOutcome::Ran {
            ran: fence.is_some(),
            fence: fence.flatten(),
        }),
        Err(RunError::Lock(keel_lock::Error::LimitMismatch { held, asked, .. })) => {
            Ok(SharedOutcome::LimitMismatch {
                held_limit: held,
                limit: asked,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The body of `POST /transfer`. Every field is optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Transfer {
    run: String,
    mode: Mode,
    from: String,
    to: String,
    amount: i64,
    /// How long the transfer takes between reading the balances and writing them, in ms.
    hold_ms: u64,
}

impl Default for Transfer {
    fn default() -> Self {
        Transfer {
            run: "curl".into(),
            mode: Mode::Wait,
            from: "account:1".into(),
            to: "account:2".into(),
            amount: 10,
            hold_ms: 25,
        }
    }
}

#[derive(Serialize)]
struct Transferred {
    moved: bool,
    /// Each account's fence for this transfer (empty when it did not move).
    fences: BTreeMap<String, u64>,
    /// Each account's balance after it (empty when it did not move).
    balances: BTreeMap<String, i64>,
    worker: &'static str,
}

async fn transfer(env: &Env, order: Transfer) -> Result<Transferred> {
    // Both keys or neither; a key given twice (from = to) is a bad key set.
    let both = DurableObjectLockStore::from_env(env, "LOCKS")?
        .multi_lock([&order.from, &order.to], LOCK_TTL_MS)?;
    let options = match order.mode {
        Mode::Immediate => AcquireOptions::immediately(),
        Mode::Wait => AcquireOptions {
            timeout_ms: 60_000,
            retry_delay_ms: 5,
        },
    };
    let (order, both) = (&order, &both);
    let moved = both
        .try_run_with(options, std::future::pending(), None, |_held| async move {
            // One fence per key: each account's ledger refuses a fence lower than it has seen.
            let fences = both.fences().ok_or("the lock store keeps no fences")?;
            let mut accounts = Vec::new();
            for (key, fence) in &fences {
                let account = Ledger::open(env, &format!("{}/{}", order.run, key.as_str()))?;
                let balance = account.enter(Some(fence.get())).await?.balance;
                accounts.push((key.as_str(), account, balance));
            }
            Delay::from(Duration::from_millis(order.hold_ms)).await;
            let mut balances = BTreeMap::new();
            for (key, account, mut balance) in accounts {
                if key == order.from {
                    balance -= order.amount;
                } else {
                    balance += order.amount;
                }
                account.exit_with_balance(balance).await?;
                balances.insert(key.to_owned(), balance);
            }
            let fences = fences
                .iter()
                .map(|(key, fence)| (key.as_str().to_owned(), fence.get()))
                .collect();
            Ok::<_, worker::Error>((fences, balances))
        })
        .await?;
    let done = moved.is_some();
    let (fences, balances) = moved.unwrap_or_default();
    Ok(Transferred {
        moved: done,
        fences,
        balances,
        worker: "rust",
    })
}

/// A hold that waits to be told it is lost: by its TTL passing (no keep-alive), or by an
/// operator's force-release noticed at the next keep-alive extend.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LossOrder {
    key: String,
    ttl_ms: u64,
    /// Extend every this many ms while holding (none: no keep-alive).
    keep_alive_ms: Option<u64>,
    /// Force-release the key (as an operator would) this many ms into the hold.
    force_after_ms: Option<u64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Loss {
    reason: String,
    after_ms: u64,
}

async fn hold_until_lost(env: &Env, order: LossOrder) -> Result<Option<Loss>> {
    let store = DurableObjectLockStore::from_env(env, "LOCKS")?;
    let lock = store.lock(order.key.clone(), order.ttl_ms)?;
    let operator = store.lock(order.key, 1_000)?;
    let keep = order.keep_alive_ms.map(|every| KeepAlive {
        every_ms: Some(every),
        max_hold_ms: None,
    });
    let started = now();
    let operator = &operator;
    let lost = lock
        .try_run_with(
            AcquireOptions::immediately(),
            std::future::pending(),
            keep,
            |held| async move {
                if let Some(after) = order.force_after_ms {
                    Delay::from(Duration::from_millis(after)).await;
                    operator.force_release().await?;
                }
                // The task learns of the loss from its context; it decides what to do.
                let reason = held.when_lost().await;
                Ok::<_, worker::Error>(Loss {
                    reason: format!("{reason:?}"),
                    after_ms: now() - started,
                })
            },
        )
        .await?;
    Ok(lost)
}

/// One live hold of a key, as `/inspect` answers it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Holder {
    metadata: Option<String>,
    fence: Option<u64>,
    remaining_ms: u64,
}

/// `/inspect`'s answer: the key's live holds in fence order, and how many callers wait.
#[derive(Serialize)]
struct Holders {
    holders: Vec<Holder>,
    waiting: Option<u32>,
}

/// Who holds `key` and who waits, read in one turn of its lock object. Never an owner token.
async fn inspect(env: &Env, key: String) -> Result<Holders> {
    let lock = DurableObjectLockStore::from_env(env, "LOCKS")?.lock(key, LOCK_TTL_MS)?;
    let info: LockInfo = lock.inspect().await?;
    let holders = info
        .holders
        .into_iter()
        .map(|h| Holder {
            metadata: h.metadata.map(|m| m.as_str().to_owned()),
            fence: h.fence.map(|f| f.get()),
            remaining_ms: h.remaining_ms,
        })
        .collect();
    Ok(Holders {
        holders,
        waiting: info.waiting,
    })
}

fn query(url: &Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, _ctx: Context) -> Result<Response> {
    match (req.method(), req.path().as_str()) {
        (Method::Post, "/charge") => {
            let body = req.text().await?;
            let order = if body.trim().is_empty() {
                Order::default()
            } else {
                serde_json::from_str(&body)?
            };
            match charge(&env, order).await {
                Ok(outcome) => Response::from_json(&outcome),
                // keel-lock's errors are worker::Errors (bad input, a failing store).
                Err(e) => Response::error(e.to_string(), 500),
            }
        }
        (Method::Post, "/hold-until-lost") => {
            let order: LossOrder = serde_json::from_str(&req.text().await?)?;
            match hold_until_lost(&env, order).await {
                Ok(loss) => Response::from_json(&loss),
                Err(e) => Response::error(e.to_string(), 500),
            }
        }
        (Method::Post, "/transfer") => {
            let body = req.text().await?;
            let order = if body.trim().is_empty() {
                Transfer::default()
            } else {
                serde_json::from_str(&body)?
            };
            match transfer(&env, order).await {
                Ok(outcome) => Response::from_json(&outcome),
                Err(e) => Response::error(e.to_string(), 500),
            }
        }
        (Method::Post, "/shared") => {
            let order: SharedOrder = serde_json::from_str(&req.text().await?)?;
            match shared(&env, order).await {
                Ok(outcome) => Response::from_json(&outcome),
                Err(e) => Response::error(e.to_string(), 500),
            }
        }
        (Method::Get, "/inspect") => {
            let key = query(&req.url()?, "key").unwrap_or_else(|| "invoice:42".into());
            match inspect(&env, key).await {
                Ok(holders) => Response::from_json(&holders),
                Err(e) => Response::error(e.to_string(), 500),
            }
        }
        (Method::Get, "/ledger") => {
            let run = query(&req.url()?, "run").unwrap_or_else(|| "curl".into());
            Response::from_json(&Ledger::open(&env, &run)?.book("stats").await?)
        }
        _ => Response::ok(
            "keel-lock workers-rs demo. Try:\n  curl -X POST localhost:8787/charge\n  curl -X POST localhost:8787/charge -d '{\"mode\":\"wait\"}'\n  curl localhost:8787/ledger\n",
        ),
    }
}

/// One run's bookings.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    charges: u32,
    refused: u32,
    inside: u32,
    max_inside: u32,
    /// The fences of the charges, in the order they were booked.
    fences: Vec<u64>,
    /// Charges refused for carrying a fence lower than one already booked.
    stale: u32,
    /// An account's balance (a transfer's run per account), set by an exit that names one.
    balance: i64,
}

/// Books charges per run and watches for overlap. In memory: a demo ledger, not a bank.
#[durable_object(fetch)]
pub struct Ledger {
    runs: RefCell<HashMap<String, Run>>,
}

impl DurableObject for Ledger {
    fn new(_state: State, _env: Env) -> Self {
        Ledger {
            runs: RefCell::default(),
        }
    }

    /// `POST https://ledger/{enter|exit|refuse|stats}?run=ID[&fence=N][&weight=N][&balance=N]`,
    /// answering the run's bookings. `weight` (default 1) is how much an enter or exit counts
    /// inside; `balance` is what an exit leaves as the run's balance.
    async fn fetch(&self, req: Request) -> Result<Response> {
        let url = req.url()?;
        let run = query(&url, "run").unwrap_or_default();
        let mut runs = self.runs.borrow_mut();
        let r = runs.entry(run).or_default();
        let weight = query(&url, "weight")
            .and_then(|w| w.parse::<u32>().ok())
            .unwrap_or(1);
        match url.path() {
            "/enter" => {
                let fence = query(&url, "fence").and_then(|f| f.parse::<u64>().ok());
                if let (Some(fence), Some(&last)) = (fence, r.fences.last()) {
                    if fence < last {
                        r.stale += 1;
                        return Response::error("stale fence", 409);
                    }
                }
                r.charges += 1;
                r.inside += weight;
                r.max_inside = r.max_inside.max(r.inside);
                r.fences.extend(fence);
            }
            "/exit" => {
                r.inside = r.inside.saturating_sub(weight);
                if let Some(balance) = query(&url, "balance").and_then(|b| b.parse().ok()) {
                    r.balance = balance;
                }
            }
            "/refuse" => r.refused += 1,
            "/stats" => {}
            _ => return Response::error("no such ledger operation", 404),
        }
        Response::from_json(&*r)
    }
}

/// A client of one run's ledger (a single `Ledger` object named "ledger").
struct LedgerRun {
    stub: Stub,
    run: String,
}

impl Ledger {
    fn open(env: &Env, run: &str) -> Result<LedgerRun> {
        let stub = env
            .durable_object("LEDGER")?
            .id_from_name("ledger")?
            .get_stub()?;
        Ok(LedgerRun {
            stub,
            run: run.to_owned(),
        })
    }
}

impl LedgerRun {
    async fn enter(&self, fence: Option<u64>) -> Result<Run> {
        self.call("enter", fence, 1, None).await
    }

    async fn enter_weighted(&self, weight: u32) -> Result<Run> {
        self.call("enter", None, weight, None).await
    }

    async fn exit_weighted(&self, weight: u32) -> Result<Run> {
        self.call("exit", None, weight, None).await
    }

    async fn exit_with_balance(&self, balance: i64) -> Result<Run> {
        self.call("exit", None, 1, Some(balance)).await
    }

    async fn book(&self, what: &str) -> Result<Run> {
        self.call(what, None, 1, None).await
    }

    async fn call(
        &self,
        what: &str,
        fence: Option<u64>,
        weight: u32,
        balance: Option<i64>,
    ) -> Result<Run> {
        let mut url = Url::parse("https://ledger/")?.join(what)?;
        url.query_pairs_mut().append_pair("run", &self.run);
        if let Some(fence) = fence {
            url.query_pairs_mut()
                .append_pair("fence", &fence.to_string());
        }
        if weight != 1 {
            url.query_pairs_mut()
                .append_pair("weight", &weight.to_string());
        }
        if let Some(balance) = balance {
            url.query_pairs_mut()
                .append_pair("balance", &balance.to_string());
        }
        let req =
            Request::new_with_init(url.as_str(), RequestInit::new().with_method(Method::Post))?;
        let mut res = self.stub.fetch_with_request(req).await?;
        if res.status_code() != 200 {
            return Err(format!("ledger {what}: HTTP {}", res.status_code()).into());
        }
        res.json().await
    }
}
