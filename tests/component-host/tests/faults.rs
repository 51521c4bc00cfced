//! keel-lock's component under faults: component instances racing on threads (each its own
//! `wasmtime::Store` and instance) take a few keys of one host-side map, while the host fails,
//! half-applies and delays a seeded share of its `wasi:keyvalue` calls. Every client records
//! what it saw — invoke / ok / fail / info of each acquire, release and extend, entering and
//! leaving its critical section, writes to a fenced resource — on the one clock they share, and
//! the history checker (`keel_lock::history`) judges the merged history: a correct host must give
//! 0 violations, and a broken one (a compare-and-swap that is not atomic, reads one write behind,
//! a clock that stands still so nothing expires) must be caught.
//!
//! Each primitive runs under the same faults, recorded as the fault suite's clients record it
//! (`tests/faults/lib/client.js`):
//! - **lock**: `lock.new`, exclusive holds on three keys;
//! - **semaphore**: `shared.semaphore(bucket, key, 3, ttl)`, each hold 1 or 2 permits
//!   (`set-permits`), its acquire recorded with that limit and weight;
//! - **rw**: `shared.read-lock` (recorded as shared, a read lock's limit) and
//!   `shared.write-lock` (exclusive), half of each on the first two keys, a tenth readers on the
//!   last ([`READ_SHARE`]);
//! - **multi**: `multi-lock` over two of the three keys, so sets overlap on one key: each key's
//!   acquire, extend and release is recorded on that key under the set's one owner label, tied
//!   by an `AcquireSet` event; a grant's fences come from `fences()`;
//! - **leader**: campaigns for the first key — a waiting acquire recorded as `Op::Campaign`,
//!   kept with recorded extends every TTL/3, resigned by a release — and an observer instance
//!   polling `inspect` on that key, each leader it sees recorded once as a `LeaderObserved`
//!   event with the holder's fence (`None` while nobody holds it). `inspect` is one read of the
//!   key's value, so one observer's looks are reads of one register in turn and the holder's
//!   fence they show never goes down on a correct host: the `observe` of the JavaScript API
//!   polls it the same way on a store without change notifications. Like that `observe`, a
//!   leader seen again after a look that found the key free is not reported again (an extend
//!   decided before the hold ran out may land after a look found it expired); a lower fence than
//!   one reported is recorded as it is seen.
//!
//! Lock, semaphore and read-write holders also serialize some holds, and handles restored from
//! them later try to release or extend them; exclusive holders (locks, write locks, each key of
//! a set, leaders) write through a fenced resource, and 3% of lock and write-lock holders pause
//! until another holder has written with a higher fence, so their own write must be refused.
//!
//! Each broken host must be caught by every primitive but in two pairs, where the history
//! cannot show it. A clock that stands still shows only as acquires refused while their key was
//! certainly free. The checker judges a set's refusal only while every key of it was certainly
//! free, and here other instances' sets, each holding a key while it asks for the next, leave
//! one of its keys possibly held (0 of 5 seeds caught); a campaign waits, and a waiter's refusal
//! proves nothing (it may follow a grant it gave back).
//! Nothing else tells a frozen clock from a correct host: the component refuses an extend past
//! the hold's local deadline without asking the host, and a release after expiry is judged only
//! once another owner was granted the key, which a clock that stands still never lets happen.
//! So `multi` and `leader` run against the non-atomic compare-and-swap and the stale reads only.
//!
//! What a run must show does not hang on how fast the machine is: a run lasts at least its
//! least duration and then goes on until it has shown it — on a correct host, every kind of
//! fault injected and every outcome the asserts ask for; on a broken one, a violation of the
//! kind that catches it — looking every [`LOOK_EVERY`], for at most [`CAP`] more. A paused
//! holder waits for the state it needs (another holder's write with a higher fence), not for a
//! time.
//!
//! `KEEL_COMPONENT_FAULT_SECONDS` sets the least duration of each correct-host run (default 4
//! for the lock's two seeds, 2 for each other primitive's one);
//! `KEEL_COMPONENT_FAULT_BROKEN_SEEDS=N` runs each broken host with seeds 1 to N for every
//! primitive (default 3 for the lock, 1 for the others), every one of which must be caught. With
//! `KEEL_FAULT_RESULTS` set to a folder, each run adds a line to its `component.jsonl`, in the
//! fault suite's row shape with its `primitive`, for the soak's one table.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_lock::history::{
    check, CheckOptions, Event, EventKind, Holding, Micros, Op, Report, Stamp, ViolationKind,
};
use keel_lock_component_host::{
    default_component_path, Broken, FaultCounts, Faults, Host, Instance, KeyFence, LockError,
    LockHandle,
};

/// Instances racing, one per thread (the leader run adds an observer).
const CLIENTS: u64 = 6;
/// Keys they share. A single key is waited for on the first only, so on the others every
/// refusal is a single store call (what the refused-while-free check judges). Sets (some of
/// which wait) are any two of them; campaigns are for the first.
const KEYS: usize = 3;
const TTL_MS: u64 = 100;
/// The longest time a holder stays inside its section (beyond a pause).
const HOLD_MS: u64 = 12;
/// The bucket every handle opens (`lock.new`'s).
const BUCKET: &str = "default";
/// A semaphore's permits; each hold takes 1 or 2.
const SEMAPHORE_LIMIT: u32 = 3;
/// The share of read locks among the holds of each key in the read-write run: half on the
/// first two keys, a tenth on the last, a key mostly written. Readers that keep being granted
/// keep a key possibly held, and a writer's refusal is judged only while its key is certainly
/// free: the last key leaves such moments, so that a read lock the host never lets expire shows
/// as writers refused there.
const READ_SHARE: [f64; KEYS] = [0.5, 0.5, 0.1];
/// How long a campaign waits to lead before it answers no.
const CAMPAIGN_WAIT_MS: u64 = 10 * TTL_MS;
/// How often the leader run's observer looks at the key.
const OBSERVE_EVERY_MS: u64 = 5;
/// Every client reads the system clock, which is also the component's wall clock (in whole ms);
/// each stamp is widened by this much.
const CLOCK_ERROR_US: Micros = 1_000;
/// A bound on a run's rounds per client, whatever the clock says.
const MAX_ROUNDS: u64 = 100_000;
/// How often a run past its least duration looks at whether it has shown what it must.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// How long a run goes on past its least duration while it has not shown what it must: a
/// bound for a run that never will (a correct host whose faults never bite, a broken host that
/// is not caught), far beyond what a slow machine needs.
const CAP: Duration = Duration::from_secs(60);
/// The longest a paused holder waits for another holder's write with a higher fence: the key
/// is taken over within a TTL or two on a correct host; on a host that never lets the paused
/// hold expire nobody writes, and the holder goes on.
const PAUSE_CAP: Duration = Duration::from_secs(10);

/// What a run's clients take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Primitive {
    Lock,
    Semaphore,
    Rw,
    Multi,
    Leader,
}

impl Primitive {
    /// The name rows carry, as the fault suite names its primitives.
    fn name(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Semaphore => "semaphore",
            Primitive::Rw => "rw",
            Primitive::Multi => "multi",
            Primitive::Leader => "leader",
        }
    }
}

fn base_host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let path = default_component_path();
        Host::new(&path).unwrap_or_else(|e| {
            panic!(
                "cannot load the component at {} (build it with `cargo build --target \
                 wasm32-wasip2 --release --features component,testing`): {e:?}",
                path.display()
            )
        })
    })
}

fn now_us() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as Micros)
}

/// The faults of every run: 4% of calls fail before acting, 4% of writes fail after landing,
/// 6% of calls are delayed up to 10 ms and 0.6% stall for 1.5 TTLs.
fn faults(seed: u64, broken: Option<Broken>) -> Faults {
    Faults {
        fail_before: 0.04,
        fail_after: 0.04,
        delay: 0.06,
        max_delay_ms: 10,
        stall: 0.006,
        stall_ms: TTL_MS * 3 / 2,
        broken,
        ..Faults::none(seed)
    }
}

/// splitmix64, for the clients' own choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A resource guarded by the lock that refuses a write whose fence is lower than the highest
/// it has accepted for the key.
#[derive(Default)]
struct FencedResource {
    highest: Mutex<HashMap<String, u64>>,
}

impl FencedResource {
    fn write(&self, key: &str, fence: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        let top = highest.entry(key.to_owned()).or_insert(0);
        if fence < *top {
            return false;
        }
        *top = fence;
        true
    }

    fn highest(&self, key: &str) -> u64 {
        self.highest.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

/// What a store call answered, as the history records it.
enum Said {
    Yes(Option<u64>),
    No,
}

/// What a set's call answered, as the history records it on each of its keys.
enum SetSaid {
    /// Yes, with each key's fence (an acquire) or none.
    Yes(Vec<KeyFence>),
    /// No: every key refused.
    No,
    /// An answer that is no outcome for every key: a release answering `false` may have freed
    /// some of them.
    Unsure,
}

/// What a run's threads counted (`pauses`: holders that paused; the rest as named), shared, so
/// the run can look at the counts while it goes on.
#[derive(Default, Debug)]
struct Stats {
    grants: AtomicU64,
    refused: AtomicU64,
    unknown: AtomicU64,
    pauses: AtomicU64,
    stale_writes_refused: AtomicU64,
    replays: AtomicU64,
    abandoned: AtomicU64,
    reads: AtomicU64,
    read_errors: AtomicU64,
    extends: AtomicU64,
    leaders_observed: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn count(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The run's history, every thread's events in the order they were recorded (each thread's in
/// its own order): a copy taken at any moment is the history of the run cut there.
#[derive(Default)]
struct Log(Mutex<Vec<Event>>);

impl Log {
    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // A panicking client must not hide the others' events.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One racing client: an instance of the component on its own thread, recording its history.
struct Client<'a> {
    id: u64,
    primitive: Primitive,
    inst: Instance,
    rng: Rng,
    keys: &'a [String],
    resource: &'a FencedResource,
    waiting: bool,
    log: &'a Log,
    stats: &'a Stats,
    /// Set when the run is over: the client ends after its round.
    stop: &'a AtomicBool,
    /// Serialized holds that have since been released or abandoned: (key, label, string).
    stale: Vec<(String, String, String)>,
    labels: u64,
}

fn stamp(at: Micros) -> Stamp {
    Stamp::around(at, CLOCK_ERROR_US)
}

impl Client<'_> {
    fn record(&mut self, key: &str, owner: &str, at: Stamp, kind: EventKind) {
        self.log.events().push(Event {
            client: self.id,
            key: key.to_owned(),
            owner: owner.to_owned(),
            at,
            kind,
        });
    }

    fn label(&mut self) -> String {
        let label = format!("c{}:{}", self.id, self.labels);
        self.labels += 1;
        label
    }

    /// Runs one store operation through the component and records its invocation and outcome:
    /// `not-held` is the store's no, `store-error` an unknown outcome; any other error, or a
    /// trap, fails the test.
    #[allow(clippy::too_many_arguments)]
    fn recorded(
        &mut self,
        op: Op,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        immediate: bool,
        holding: Holding,
        call: impl FnOnce(&mut Instance) -> wasmtime::Result<Result<Said, LockError>>,
    ) -> Option<bool> {
        let invoke = EventKind::Invoke {
            op,
            ttl_ms,
            immediate,
            holding,
        };
        self.record(key, owner, stamp(now_us()), invoke);
        let answer = call(&mut self.inst).expect("the component trapped");
        let at = stamp(now_us());
        match answer {
            Ok(Said::Yes(fence)) => {
                self.record(key, owner, at, EventKind::Ok { op, fence });
                Some(true)
            }
            Ok(Said::No) | Err(LockError::NotHeld(_)) => {
                self.record(key, owner, at, EventKind::Fail { op });
                Some(false)
            }
            Err(LockError::StoreError(_)) => {
                bump(&self.stats.unknown);
                self.record(key, owner, at, EventKind::Info { op });
                None
            }
            Err(e) => panic!("{} of {key} answered {e:?}", op.name()),
        }
    }

    /// Acquires `l` (at once, or waiting `wait` ms, polling every 5 ms), recorded as `op`:
    /// whether it is held. Refused or unknown, the handle is dropped and the client pauses.
    fn take(
        &mut self,
        l: LockHandle,
        op: Op,
        key: &str,
        label: &str,
        wait: Option<u64>,
        holding: Holding,
    ) -> bool {
        let got = self.recorded(op, key, label, TTL_MS, wait.is_none(), holding, |inst| {
            Ok(match inst.acquire(l, wait.unwrap_or(0), Some(5))? {
                Ok(true) => Ok(Said::Yes(inst.fence(l)?)),
                Ok(false) => Ok(Said::No),
                Err(e) => Err(e),
            })
        });
        if got != Some(true) {
            if got == Some(false) {
                bump(&self.stats.refused);
            }
            self.inst.drop_lock(l).unwrap();
            thread::sleep(Duration::from_micros(self.rng.below(3_000)));
        }
        got == Some(true)
    }

    /// [`Client::recorded`] for a set's call: its invocation and outcome are recorded on each
    /// key under the set's label, with the same stamps.
    fn recorded_set(
        &mut self,
        op: Op,
        keys: &[&str],
        owner: &str,
        ttl_ms: u64,
        immediate: bool,
        call: impl FnOnce(&mut Instance) -> wasmtime::Result<Result<SetSaid, LockError>>,
    ) -> Option<bool> {
        let invoke = EventKind::Invoke {
            op,
            ttl_ms,
            immediate,
            holding: Holding::Exclusive,
        };
        let at = stamp(now_us());
        for key in keys {
            self.record(key, owner, at, invoke.clone());
        }
        let answer = call(&mut self.inst).expect("the component trapped");
        let at = stamp(now_us());
        let got = match &answer {
            Ok(SetSaid::Yes(_)) => Some(true),
            Ok(SetSaid::No) | Err(LockError::NotHeld(_)) => Some(false),
            Ok(SetSaid::Unsure) => None,
            Err(LockError::StoreError(_)) => {
                bump(&self.stats.unknown);
                None
            }
            Err(e) => panic!("{} of {keys:?} answered {e:?}", op.name()),
        };
        for key in keys {
            let kind = match (&answer, got) {
                (Ok(SetSaid::Yes(fences)), _) => EventKind::Ok {
                    op,
                    fence: fences.iter().find(|f| f.key == *key).map(|f| f.fence),
                },
                (_, Some(false)) => EventKind::Fail { op },
                _ => EventKind::Info { op },
            };
            self.record(key, owner, at, kind);
        }
        got
    }

    fn release(&mut self, key: &str, label: &str, l: LockHandle) -> Option<bool> {
        self.recorded(
            Op::Release,
            key,
            label,
            0,
            false,
            Holding::Exclusive,
            |inst| {
                Ok(inst
                    .release(l)?
                    .map(|done| if done { Said::Yes(None) } else { Said::No }))
            },
        )
    }

    fn extend(&mut self, key: &str, label: &str, l: LockHandle) -> Option<bool> {
        bump(&self.stats.extends);
        self.recorded(
            Op::Extend,
            key,
            label,
            TTL_MS,
            false,
            Holding::Exclusive,
            |inst| Ok(inst.extend(l, None)?.map(|()| Said::Yes(None))),
        )
    }

    fn run(&mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            match self.primitive {
                Primitive::Lock | Primitive::Semaphore | Primitive::Rw => self.round(),
                Primitive::Multi => self.set_round(),
                Primitive::Leader => self.campaign_round(),
            }
        }
    }

    /// A read (`get` on the host) through a plain handle, so failing reads are exercised too.
    fn read(&mut self, key: &str) {
        bump(&self.stats.reads);
        let l = self.inst.new_lock(key, TTL_MS).unwrap().unwrap();
        if self
            .inst
            .is_locked(l)
            .expect("the component trapped")
            .is_err()
        {
            bump(&self.stats.read_errors);
        }
        self.inst.drop_lock(l).unwrap();
    }

    /// The handle a holder takes the `k`th key with and how its acquire is recorded: a lock; 1
    /// or 2 permits of a semaphore; a read lock or a write lock.
    fn handle_for(&mut self, k: usize) -> (LockHandle, Holding) {
        let key = self.keys[k].as_str();
        let inst = &mut self.inst;
        match self.primitive {
            Primitive::Semaphore => {
                let permits = if self.rng.unit() < 0.5 { 2 } else { 1 };
                let l = inst
                    .semaphore(BUCKET, key, SEMAPHORE_LIMIT, TTL_MS)
                    .unwrap()
                    .unwrap();
                inst.set_permits(l, permits).unwrap().unwrap();
                let holding = Holding::Shared {
                    weight: u64::from(permits),
                    limit: u64::from(SEMAPHORE_LIMIT),
                };
                (l, holding)
            }
            Primitive::Rw if self.rng.unit() < READ_SHARE[k] => {
                let l = inst.read_lock(BUCKET, key, TTL_MS).unwrap().unwrap();
                (l, Holding::READ)
            }
            Primitive::Rw => {
                let l = inst.write_lock(BUCKET, key, TTL_MS).unwrap().unwrap();
                (l, Holding::Exclusive)
            }
            _ => (
                inst.new_lock(key, TTL_MS).unwrap().unwrap(),
                Holding::Exclusive,
            ),
        }
    }

    /// One hold of a lock, a semaphore's permits or a read or write lock.
    fn round(&mut self) {
        let keys = self.keys;
        let k = self.rng.below(KEYS as u64) as usize;
        let key = keys[k].as_str();
        let roll = self.rng.unit();
        if roll < 0.03 && !self.stale.is_empty() {
            self.replay();
            return;
        }
        if roll < 0.06 {
            self.read(key);
            return;
        }
        let immediate = k != 0 || !self.waiting || self.rng.unit() < 0.6;
        let label = self.label();
        let (l, holding) = self.handle_for(k);
        let wait = (!immediate).then_some(TTL_MS);
        if !self.take(l, Op::Acquire, key, &label, wait, holding) {
            return;
        }
        bump(&self.stats.grants);
        self.record(key, &label, stamp(now_us()), EventKind::Enter);
        let fence = self
            .inst
            .fence(l)
            .unwrap()
            .expect("a held lock has a fence");
        let serialized = (self.rng.unit() < 0.1)
            .then(|| self.inst.serialize(l).expect("the component trapped").ok())
            .flatten();
        // Only exclusive holds write to the fenced resource: permits and readers overlap by
        // design, so a lower fence after a higher one is no stale write there.
        if holding == Holding::Exclusive {
            let paused = self.rng.unit() < 0.03;
            if paused {
                // A holder paused past its TTL: it waits until another holder has written with
                // a higher fence, so its own write must then be refused — or until the run is
                // over, or PAUSE_CAP when nobody takes the key over.
                bump(&self.stats.pauses);
                let give_up = Instant::now() + PAUSE_CAP;
                while self.resource.highest(key) <= fence
                    && !self.stop.load(Ordering::Relaxed)
                    && Instant::now() < give_up
                {
                    thread::sleep(Duration::from_millis(2));
                }
            }
            if !self.fenced_write(key, &label, fence) && paused {
                bump(&self.stats.stale_writes_refused);
            }
        }
        thread::sleep(Duration::from_millis(self.rng.below(HOLD_MS + 1)));
        let fate = self.rng.unit();
        if fate < 0.15 {
            self.extend(key, &label, l);
        }
        if self.inst.is_expired(l).unwrap() {
            self.record(key, &label, stamp(now_us()), EventKind::ExpiryObserved);
        }
        self.record(key, &label, stamp(now_us()), EventKind::Exit);
        if fate > 0.97 {
            // Abandoned: the hold must end by its TTL.
            bump(&self.stats.abandoned);
        } else if self.release(key, &label, l).is_none() {
            // An unknown outcome (perhaps released): try once more, as a caller would.
            self.release(key, &label, l);
        }
        self.inst.drop_lock(l).unwrap();
        if let Some(text) = serialized {
            self.stale.push((key.to_owned(), label, text));
        }
    }

    /// Writes `fence` to the resource guarding `key` and records it; answers whether the
    /// resource accepted it.
    fn fenced_write(&mut self, key: &str, label: &str, fence: u64) -> bool {
        let t0 = now_us();
        let accepted = self.resource.write(key, fence);
        let at = Stamp::new(t0 - CLOCK_ERROR_US, now_us() + CLOCK_ERROR_US);
        self.record(key, label, at, EventKind::FencedWrite { fence, accepted });
        accepted
    }

    /// A handle restored from a serialized hold that was since released or abandoned tries to
    /// release or extend it: the store must refuse unless that very hold is still live.
    fn replay(&mut self) {
        let at = self.rng.below(self.stale.len() as u64) as usize;
        let (key, label, text) = self.stale.swap_remove(at);
        bump(&self.stats.replays);
        let l = self.inst.restore(&text).unwrap().unwrap();
        if self.rng.unit() < 0.5 {
            self.release(&key, &label, l);
        } else {
            self.extend(&key, &label, l);
        }
        self.inst.drop_lock(l).unwrap();
    }

    /// One set of two of the three keys taken, held and released, each key's calls recorded
    /// under one label and tied by an `AcquireSet` event.
    fn set_round(&mut self) {
        let all = self.keys;
        let skip = self.rng.below(KEYS as u64) as usize;
        if self.rng.unit() < 0.05 {
            self.read(&all[skip]);
            return;
        }
        let keys: Vec<&str> = (0..KEYS)
            .filter(|&k| k != skip)
            .map(|k| all[k].as_str())
            .collect();
        let immediate = !self.waiting || self.rng.unit() < 0.7;
        let timeout = if immediate { 0 } else { TTL_MS };
        let label = self.label();
        let m = self.inst.new_multi(&keys, TTL_MS).unwrap().unwrap();
        let set = EventKind::AcquireSet {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        };
        self.record("", &label, stamp(now_us()), set);
        let got = self.recorded_set(Op::Acquire, &keys, &label, TTL_MS, immediate, |inst| {
            Ok(match inst.multi_acquire(m, timeout, Some(5))? {
                Ok(true) => Ok(SetSaid::Yes(
                    inst.multi_fences(m)?.expect("a held set has fences"),
                )),
                Ok(false) => Ok(SetSaid::No),
                Err(e) => Err(e),
            })
        });
        if got != Some(true) {
            if got == Some(false) {
                bump(&self.stats.refused);
            }
            self.inst.drop_multi(m).unwrap();
            thread::sleep(Duration::from_micros(self.rng.below(3_000)));
            return;
        }
        bump(&self.stats.grants);
        let fences = self.inst.multi_fences(m).unwrap().expect("a held set");
        for key in &keys {
            self.record(key, &label, stamp(now_us()), EventKind::Enter);
        }
        // Each key guards its own resource, with its own fence.
        for f in &fences {
            self.fenced_write(&f.key, &label, f.fence);
        }
        thread::sleep(Duration::from_millis(self.rng.below(HOLD_MS + 1)));
        let fate = self.rng.unit();
        if fate < 0.15 {
            bump(&self.stats.extends);
            self.recorded_set(Op::Extend, &keys, &label, TTL_MS, false, |inst| {
                Ok(inst
                    .multi_extend(m, None)?
                    .map(|()| SetSaid::Yes(Vec::new())))
            });
        }
        let expired = self.inst.multi_is_expired(m).unwrap();
        for key in &keys {
            if expired {
                self.record(key, &label, stamp(now_us()), EventKind::ExpiryObserved);
            }
            self.record(key, &label, stamp(now_us()), EventKind::Exit);
        }
        if fate > 0.97 {
            // Abandoned: every key's hold must end by its TTL.
            bump(&self.stats.abandoned);
        } else {
            // A release answering false is no refusal of every key: some may have been freed.
            let release = |inst: &mut Instance| {
                Ok(inst.multi_release(m)?.map(|all| {
                    if all {
                        SetSaid::Yes(Vec::new())
                    } else {
                        SetSaid::Unsure
                    }
                }))
            };
            if self
                .recorded_set(Op::Release, &keys, &label, 0, false, release)
                .is_none()
            {
                // Perhaps some keys are still held: try once more, as a caller would.
                self.recorded_set(Op::Release, &keys, &label, 0, false, release);
            }
        }
        self.inst.drop_multi(m).unwrap();
    }

    /// One campaign for the first key: wait to lead, keep it with recorded extends every TTL/3,
    /// write with the leader's fence, resign.
    fn campaign_round(&mut self) {
        let key = self.keys[0].as_str();
        let label = self.label();
        let l = self.inst.new_lock(key, TTL_MS).unwrap().unwrap();
        let wait = Some(CAMPAIGN_WAIT_MS);
        if !self.take(l, Op::Campaign, key, &label, wait, Holding::Exclusive) {
            return;
        }
        bump(&self.stats.grants);
        self.record(key, &label, stamp(now_us()), EventKind::Enter);
        let fence = self.inst.fence(l).unwrap().expect("a leader has a fence");
        // Most terms are short; a fifth last one to two and a half keep-alive periods, so that
        // leaders are kept by extends and campaigners wait behind them.
        let every = TTL_MS as f64 / 3.0;
        let term_ms = if self.rng.unit() < 0.2 {
            every * (1.0 + self.rng.unit() * 1.5)
        } else {
            self.rng.unit() * 3.0 * HOLD_MS as f64
        };
        let until = Instant::now() + Duration::from_secs_f64(term_ms / 1000.0);
        let mut kept = true;
        while kept && Instant::now() < until {
            let left = until.saturating_duration_since(Instant::now());
            thread::sleep(left.min(Duration::from_secs_f64(every / 1000.0)));
            if Instant::now() < until {
                kept = self.extend(key, &label, l) == Some(true);
            }
        }
        if kept {
            self.fenced_write(key, &label, fence);
        }
        self.record(key, &label, stamp(now_us()), EventKind::Exit);
        if self.release(key, &label, l).is_none() {
            self.release(key, &label, l);
        }
        self.inst.drop_lock(l).unwrap();
    }
}

/// The leader run's observer: looks at `key` with `inspect` every [`OBSERVE_EVERY_MS`] until
/// `stop`, and records each leader it sees once, as `LeaderObserved` with the holder's fence,
/// or `None` when it finds nobody holding the key after it told a leader (or at its first look).
fn observe(mut inst: Instance, id: u64, key: &str, log: &Log, stats: &Stats, stop: &AtomicBool) {
    let owner = format!("observer{id}");
    // What was told last (`None`: nothing yet), and the highest fence told.
    let mut last: Option<Option<u64>> = None;
    let mut highest: Option<u64> = None;
    while !stop.load(Ordering::Relaxed) {
        let t0 = now_us();
        bump(&stats.reads);
        let answer = inst
            .inspect_key(BUCKET, key)
            .expect("the component trapped");
        let at = Stamp::new(t0 - CLOCK_ERROR_US, now_us() + CLOCK_ERROR_US);
        match answer {
            Ok(info) => {
                let leader = info
                    .holders
                    .last()
                    .map(|h| h.fence.expect("every hold here has a fence"));
                // The leader told last, or told before a look that found the key free: no news.
                let news = last != Some(leader) && (leader.is_none() || leader != highest);
                if news {
                    last = Some(leader);
                    highest = highest.max(leader);
                    if leader.is_some() {
                        bump(&stats.leaders_observed);
                    }
                    log.events().push(Event {
                        client: id,
                        key: key.to_owned(),
                        owner: owner.clone(),
                        at,
                        kind: EventKind::LeaderObserved { fence: leader },
                    });
                }
            }
            Err(LockError::StoreError(_)) => bump(&stats.read_errors),
            Err(e) => panic!("inspect of {key} answered {e:?}"),
        }
        thread::sleep(Duration::from_millis(OBSERVE_EVERY_MS));
    }
}

struct RunResult {
    report: Report,
    events: Vec<Event>,
    stats: Stats,
    injected: FaultCounts,
    swaps: (u64, u64),
    /// How long the run went on.
    seconds: f64,
}

/// What a run goes on until, once past its least duration.
#[derive(Clone, Copy)]
enum Until<'a> {
    /// A correct host's run: until [`unexercised`] finds nothing missing.
    Exercised,
    /// A broken host's run: until the history shows a violation of one of these kinds.
    Caught(&'a [ViolationKind]),
}

/// What a correct host's run under faults has not shown yet of what it must: every kind of
/// fault injected, grants and unknown outcomes, refusals (leaders: a leader observed, and kept by
/// an extend), a lost compare-and-swap race, and, once a holder paused, a paused holder's write
/// refused.
fn unexercised(
    primitive: Primitive,
    s: &Stats,
    i: &FaultCounts,
    swaps: (u64, u64),
) -> Vec<&'static str> {
    let mut missing = Vec::new();
    if i.failed_before == 0 || i.failed_after == 0 || i.delayed == 0 {
        missing.push("a failed call before it acted, one after, a delayed one");
    }
    if count(&s.grants) == 0 {
        missing.push("a grant");
    }
    if count(&s.unknown) == 0 {
        missing.push("an unknown outcome");
    }
    match primitive {
        // Campaigns wait long enough that few, if any, are refused; the observer must have
        // seen leaders, and leaders must have been kept by extends.
        Primitive::Leader if count(&s.leaders_observed) == 0 || count(&s.extends) == 0 => {
            missing.push("a leader observed and an extend");
        }
        Primitive::Leader => {}
        _ if count(&s.refused) == 0 => missing.push("a refusal"),
        _ => {}
    }
    if swaps.1 == 0 {
        missing.push("a lost compare-and-swap race");
    }
    if count(&s.pauses) > 0 && count(&s.stale_writes_refused) == 0 {
        missing.push("a paused holder's write refused");
    }
    missing
}

/// Whether the run has shown what `until` asks, by its counts and the history recorded so far.
fn shown(until: Until<'_>, primitive: Primitive, host: &Host, log: &Log, stats: &Stats) -> bool {
    match until {
        Until::Exercised => {
            let swaps = host.kv().swap_counts();
            unexercised(primitive, stats, &host.fault_counts(), swaps).is_empty()
        }
        Until::Caught(kinds) => {
            let so_far = log.events().clone();
            check(&so_far, &CheckOptions::default())
                .violations
                .iter()
                .any(|v| kinds.contains(&v.kind))
        }
    }
}

/// Runs `CLIENTS` racing instances taking `primitive` on a host with `faults` (and, for leaders,
/// an observer) for at least `seconds`, and on until the run has shown what `until` asks (or
/// [`CAP`] more has passed), then checks the merged history.
fn run(
    primitive: Primitive,
    name: &str,
    faults: Faults,
    seconds: f64,
    until: Until<'_>,
) -> RunResult {
    let waiting = faults.broken != Some(Broken::FrozenClock);
    let seed = faults.seed;
    let host = base_host().with_faults(faults);
    let keys: Vec<String> = (0..KEYS)
        .map(|k| format!("{}:{name}:{seed}:{k}", primitive.name()))
        .collect();
    let resource = FencedResource::default();
    let log = Log::default();
    let stats = Stats::default();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let least = started + Duration::from_secs_f64(seconds);
    thread::scope(|s| {
        let mut threads: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (host, keys, resource, log, stats, stop) =
                    (&host, &keys, &resource, &log, &stats, &stop);
                s.spawn(move || {
                    let mut client = Client {
                        id,
                        primitive,
                        inst: host.instance().expect("instantiate"),
                        rng: Rng(seed.wrapping_mul(1_000_003).wrapping_add(id)),
                        keys,
                        resource,
                        waiting,
                        log,
                        stats,
                        stop,
                        stale: Vec::new(),
                        labels: 0,
                    };
                    client.run();
                })
            })
            .collect();
        if primitive == Primitive::Leader {
            let (host, key, log, stats, stop) = (&host, &keys[0], &log, &stats, &stop);
            threads.push(s.spawn(move || {
                observe(
                    host.instance().expect("instantiate"),
                    CLIENTS,
                    key,
                    log,
                    stats,
                    stop,
                );
            }));
        }
        // On past the least duration until the run has shown what it must (or every thread
        // ended: one that panicked fails the test below).
        loop {
            thread::sleep(LOOK_EVERY);
            if threads.iter().all(|t| t.is_finished()) {
                break;
            }
            let now = Instant::now();
            if now >= least && (now >= least + CAP || shown(until, primitive, &host, &log, &stats))
            {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let events = std::mem::take(&mut *log.events());
    let report = check(&events, &CheckOptions::default());
    let row = Row {
        primitive,
        name,
        seed,
        seconds: (seconds * 10.0).round() / 10.0,
    };
    record_row(&row, &report, &host.fault_counts(), &stats);
    let result = RunResult {
        report,
        events,
        stats,
        injected: host.fault_counts(),
        swaps: host.kv().swap_counts(),
        seconds,
    };
    eprintln!(
        "[{} {name} seed {seed}] {:.1} s, {} operations, {} violations ({}); {:?}; injected {:?}; \
         {} swaps, {} lost CAS races",
        primitive.name(),
        result.seconds,
        result.report.operations,
        result.report.violation_count,
        kinds(&result.report),
        result.stats,
        result.injected,
        result.swaps.0,
        result.swaps.1,
    );
    result
}

/// Which run a row is.
struct Row<'a> {
    primitive: Primitive,
    name: &'a str,
    seed: u64,
    seconds: f64,
}

/// One run as the fault suite's summary row (`tests/faults/summary.js` prints them all in one
/// table, a line per primitive), appended to `$KEEL_FAULT_RESULTS/component.jsonl` when that
/// is set.
fn record_row(row: &Row<'_>, report: &Report, injected: &FaultCounts, stats: &Stats) {
    let Ok(dir) = std::env::var("KEEL_FAULT_RESULTS") else {
        return;
    };
    // "RacyCompareAndSwap" → "racy-compare-and-swap", as the other stores name their variants.
    let mut variant = String::new();
    for (i, c) in row.name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            variant.push('-');
        }
        variant.push(c.to_ascii_lowercase());
    }
    let faults =
        injected.failed_before + injected.failed_after + injected.delayed + injected.stalled;
    let kinds: Vec<String> = kinds(report)
        .split(", ")
        .filter(|k| !k.is_empty())
        .map(|k| format!("\"{k}\""))
        .collect();
    let line = format!(
        "{{\"store\":\"component (wasi:keyvalue host)\",\"primitive\":\"{}\",\"scenario\":\"host faults\",\
         \"variant\":\"{variant}\",\"seed\":{},\"seconds\":{},\"operations\":{},\"grants\":{},\
         \"faults\":{faults},\"violations\":{},\"kinds\":[{}],\"losses\":{}}}\n",
        row.primitive.name(),
        row.seed,
        row.seconds,
        report.operations,
        count(&stats.grants),
        report.violation_count,
        kinds.join(","),
        report.loss_count,
    );
    std::fs::create_dir_all(&dir).expect("create the results folder");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join("component.jsonl"))
        .expect("open component.jsonl");
    std::io::Write::write_all(&mut file, line.as_bytes()).expect("write component.jsonl");
}

fn kinds(report: &Report) -> String {
    let mut names: Vec<&str> = report.violations.iter().map(|v| v.kind.name()).collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

fn explain(r: &RunResult) -> String {
    r.report
        .violations
        .iter()
        .take(5)
        .map(|v| {
            let events: Vec<String> = v
                .events
                .iter()
                .map(|&i| format!("  {:?}", r.events[i]))
                .collect();
            format!("{v}\n{}", events.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The least duration of a correct-host run of `primitive`: `KEEL_COMPONENT_FAULT_SECONDS`, else
/// 4 s for the lock (two seeds) and 2 s for each other primitive (one seed).
fn seconds(primitive: Primitive) -> f64 {
    std::env::var("KEEL_COMPONENT_FAULT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(if primitive == Primitive::Lock {
            4.0
        } else {
            2.0
        })
}

/// The seeds each broken host runs with for `primitive`: 1 to `KEEL_COMPONENT_FAULT_BROKEN_SEEDS`,
/// else 1 to 3 for the lock and seed 1 for each other primitive.
fn broken_seeds(primitive: Primitive) -> Vec<u64> {
    let n = std::env::var("KEEL_COMPONENT_FAULT_BROKEN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &u64| n > 0)
        .unwrap_or(if primitive == Primitive::Lock { 3 } else { 1 });
    (1..=n).collect()
}

/// A correct host that fails, half-applies and delays its calls: the history has no violation,
/// and every kind of fault really happened ([`unexercised`]).
fn correct_host_under_faults(primitive: Primitive, seed: u64) {
    let r = run(
        primitive,
        "correct",
        faults(seed, None),
        seconds(primitive),
        Until::Exercised,
    );
    assert_eq!(r.report.violation_count, 0, "{}", explain(&r));
    assert!(r.report.violations.is_empty() && r.report.loss_count == 0);
    let missing = unexercised(primitive, &r.stats, &r.injected, r.swaps);
    assert!(
        missing.is_empty(),
        "not shown in {:.1} s: {missing:?}; {:?}; injected {:?}; swaps {:?}",
        r.seconds,
        r.stats,
        r.injected,
        r.swaps
    );
}

#[test]
fn correct_host_under_faults_seed_1() {
    correct_host_under_faults(Primitive::Lock, 1);
}

#[test]
fn correct_host_under_faults_seed_2() {
    correct_host_under_faults(Primitive::Lock, 2);
}

/// A broken host, run with each seed for at least 1.5 s and on until its history shows a
/// violation of one of `expected` (within [`CAP`]): every run must report one.
fn caught(primitive: Primitive, broken: Broken, expected: &[ViolationKind]) {
    let seeds = broken_seeds(primitive);
    let missed: Vec<String> = seeds
        .iter()
        .filter_map(|&seed| {
            let r = run(
                primitive,
                &format!("{broken:?}"),
                faults(seed, Some(broken)),
                1.5,
                Until::Caught(expected),
            );
            let found = r
                .report
                .violations
                .iter()
                .any(|v| expected.contains(&v.kind));
            (!found).then(|| {
                format!(
                    "seed {seed}: {} violations ({}) in {:.1} s",
                    r.report.violation_count,
                    kinds(&r.report),
                    r.seconds
                )
            })
        })
        .collect();
    let names: Vec<&str> = expected.iter().map(|k| k.name()).collect();
    eprintln!(
        "{} on {broken:?}: caught as {} in {} of {} runs",
        primitive.name(),
        names.join(" or "),
        seeds.len() - missed.len(),
        seeds.len()
    );
    assert!(
        missed.is_empty(),
        "{} on {broken:?} not caught: {missed:?}",
        primitive.name()
    );
}

/// Two instances can both win one key: the same fence is granted twice (and holds overlap).
#[test]
fn racy_compare_and_swap_is_caught() {
    caught(
        Primitive::Lock,
        Broken::RacyCompareAndSwap,
        &[ViolationKind::FenceOrder],
    );
}

/// Reads one write behind under a version-checked swap: a holder's key looks free (or its
/// fence older), and the same fence is granted twice.
#[test]
fn stale_reads_are_caught() {
    caught(
        Primitive::Lock,
        Broken::StaleReads,
        &[ViolationKind::FenceOrder],
    );
}

/// Nothing expires: an abandoned hold (or an acquire that landed but answered an error) keeps
/// its key, and immediate acquires are refused while the key is certainly free.
#[test]
fn frozen_clock_is_caught() {
    caught(
        Primitive::Lock,
        Broken::FrozenClock,
        &[ViolationKind::RefusedWhileFree],
    );
}

#[test]
fn semaphore_correct_host_under_faults() {
    correct_host_under_faults(Primitive::Semaphore, 1);
}

/// Every grant of a permit takes the key's next fence: two grants written over one read take
/// the same one (and may hold more permits than the limit).
#[test]
fn semaphore_racy_compare_and_swap_is_caught() {
    caught(
        Primitive::Semaphore,
        Broken::RacyCompareAndSwap,
        &[ViolationKind::FenceOrder],
    );
}

/// A grant decided on the value before the latest write takes that write's fence again.
#[test]
fn semaphore_stale_reads_are_caught() {
    caught(
        Primitive::Semaphore,
        Broken::StaleReads,
        &[ViolationKind::FenceOrder],
    );
}

/// Abandoned permits are never given back, so the semaphore fills and single-call acquires are
/// refused while no permit is certainly held.
#[test]
fn semaphore_frozen_clock_is_caught() {
    caught(
        Primitive::Semaphore,
        Broken::FrozenClock,
        &[ViolationKind::RefusedWhileFree],
    );
}

#[test]
fn rw_correct_host_under_faults() {
    correct_host_under_faults(Primitive::Rw, 1);
}

/// Readers and writers alike take the key's next fence: two grants over one read share one.
#[test]
fn rw_racy_compare_and_swap_is_caught() {
    caught(
        Primitive::Rw,
        Broken::RacyCompareAndSwap,
        &[ViolationKind::FenceOrder],
    );
}

#[test]
fn rw_stale_reads_are_caught() {
    caught(
        Primitive::Rw,
        Broken::StaleReads,
        &[ViolationKind::FenceOrder],
    );
}

/// An abandoned reader keeps every writer out for ever (an abandoned writer, everyone).
#[test]
fn rw_frozen_clock_is_caught() {
    caught(
        Primitive::Rw,
        Broken::FrozenClock,
        &[ViolationKind::RefusedWhileFree],
    );
}

#[test]
fn multi_correct_host_under_faults() {
    correct_host_under_faults(Primitive::Multi, 1);
}

/// Each key of a set is one compare-and-swap like a lock's: a key granted to two sets at once
/// has one fence twice.
#[test]
fn multi_racy_compare_and_swap_is_caught() {
    caught(
        Primitive::Multi,
        Broken::RacyCompareAndSwap,
        &[ViolationKind::FenceOrder],
    );
}

#[test]
fn multi_stale_reads_are_caught() {
    caught(
        Primitive::Multi,
        Broken::StaleReads,
        &[ViolationKind::FenceOrder],
    );
}

#[test]
fn leader_correct_host_under_faults() {
    correct_host_under_faults(Primitive::Leader, 1);
}

/// Two campaigns waiting on one free key can both win it: one fence for two leaders (who may
/// also lead at once, or out of order).
#[test]
fn leader_racy_compare_and_swap_is_caught() {
    caught(
        Primitive::Leader,
        Broken::RacyCompareAndSwap,
        &[
            ViolationKind::FenceOrder,
            ViolationKind::TwoLeaders,
            ViolationKind::LeaderOrder,
        ],
    );
}

/// A waiting campaign that reads the value before the leader's grant finds the key free and
/// takes the leader's fence again.
#[test]
fn leader_stale_reads_are_caught() {
    caught(
        Primitive::Leader,
        Broken::StaleReads,
        &[
            ViolationKind::FenceOrder,
            ViolationKind::TwoLeaders,
            ViolationKind::LeaderOrder,
        ],
    );
}
