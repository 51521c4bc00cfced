//! keel-lock's component under faults: component instances racing on threads (each its own
//! `wasmtime::Store` and instance) lock a few keys of one host-side map, while the host fails,
//! half-applies and delays a seeded share of its `wasi:keyvalue` calls. Every client records
//! what it saw — invoke / ok / fail / info of each acquire, release and extend, entering and
//! leaving its critical section, writes to a fenced resource — on the one clock they share, and
//! the history checker (`keel_lock::history`) judges the merged history: a correct host must give
//! 0 violations, and a broken one (a compare-and-swap that is not atomic, reads one write behind,
//! a clock that stands still so nothing expires) must be caught.
//!
//! `KEEL_COMPONENT_FAULT_SECONDS` sets how long each correct-host run lasts (default 4);
//! `KEEL_COMPONENT_FAULT_BROKEN_SEEDS=N` runs each broken host with seeds 1 to N (default 3),
//! every one of which must be caught. With `KEEL_FAULT_RESULTS` set to a folder, each run adds
//! a line to its `component.jsonl`, in the fault suite's row shape, for the soak's one table.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_lock::history::{
    check, CheckOptions, Event, EventKind, Holding, Micros, Op, Report, Stamp, ViolationKind,
};
use keel_lock_component_host::{
    default_component_path, Broken, FaultCounts, Faults, Host, Instance, LockError, LockHandle,
};

/// Instances racing, one per thread.
const CLIENTS: u64 = 6;
/// Keys they share. Waiting acquires happen on the first only, so on the others every refusal
/// is a single store call (what the refused-while-free check judges).
const KEYS: usize = 3;
const TTL_MS: u64 = 100;
/// The longest time a holder stays inside its section (beyond a pause).
const HOLD_MS: u64 = 12;
/// Every client reads the system clock, which is also the component's wall clock (in whole ms);
/// each stamp is widened by this much.
const CLOCK_ERROR_US: Micros = 1_000;
/// A bound on a run's rounds per client, whatever the clock says.
const MAX_ROUNDS: u64 = 100_000;

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

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    grants: u64,
    refused: u64,
    unknown: u64,
    pauses: u64,
    stale_writes_refused: u64,
    replays: u64,
    abandoned: u64,
    reads: u64,
    read_errors: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.grants += o.grants;
        self.refused += o.refused;
        self.unknown += o.unknown;
        self.pauses += o.pauses;
        self.stale_writes_refused += o.stale_writes_refused;
        self.replays += o.replays;
        self.abandoned += o.abandoned;
        self.reads += o.reads;
        self.read_errors += o.read_errors;
    }
}

/// One racing client: an instance of the component on its own thread, recording its history.
struct Client<'a> {
    id: u64,
    inst: Instance,
    rng: Rng,
    keys: &'a [String],
    resource: &'a FencedResource,
    waiting: bool,
    events: Vec<Event>,
    stats: Stats,
    /// Serialized holds that have since been released or abandoned: (key, label, string).
    stale: Vec<(String, String, String)>,
    labels: u64,
}

fn stamp(at: Micros) -> Stamp {
    Stamp::around(at, CLOCK_ERROR_US)
}

impl Client<'_> {
    fn record(&mut self, key: &str, owner: &str, at: Stamp, kind: EventKind) {
        self.events.push(Event {
            client: self.id,
            key: key.to_owned(),
            owner: owner.to_owned(),
            at,
            kind,
        });
    }

    /// Runs one store operation through the component and records its invocation and outcome:
    /// `not-held` is the store's no, `store-error` an unknown outcome; any other error, or a
    /// trap, fails the test.
    fn recorded(
        &mut self,
        op: Op,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        immediate: bool,
        call: impl FnOnce(&mut Instance) -> wasmtime::Result<Result<Said, LockError>>,
    ) -> Option<bool> {
        let invoke = EventKind::Invoke {
            op,
            ttl_ms,
            immediate,
            holding: Holding::Exclusive,
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
                self.stats.unknown += 1;
                self.record(key, owner, at, EventKind::Info { op });
                None
            }
            Err(e) => panic!("{} of {key} answered {e:?}", op.name()),
        }
    }

    fn release(&mut self, key: &str, label: &str, l: LockHandle) -> Option<bool> {
        self.recorded(Op::Release, key, label, 0, false, |inst| {
            Ok(inst
                .release(l)?
                .map(|done| if done { Said::Yes(None) } else { Said::No }))
        })
    }

    fn extend(&mut self, key: &str, label: &str, l: LockHandle) -> Option<bool> {
        self.recorded(Op::Extend, key, label, TTL_MS, false, |inst| {
            Ok(inst.extend(l, None)?.map(|()| Said::Yes(None)))
        })
    }

    fn run(&mut self, until: Instant) {
        for _ in 0..MAX_ROUNDS {
            if Instant::now() >= until {
                break;
            }
            self.round();
        }
    }

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
            // A read (`get` on the host), so failing reads are exercised too.
            self.stats.reads += 1;
            let l = self.inst.new_lock(key, TTL_MS).unwrap().unwrap();
            if self
                .inst
                .is_locked(l)
                .expect("the component trapped")
                .is_err()
            {
                self.stats.read_errors += 1;
            }
            self.inst.drop_lock(l).unwrap();
            return;
        }
        let immediate = k != 0 || !self.waiting || self.rng.unit() < 0.6;
        let label = format!("c{}:{}", self.id, self.labels);
        self.labels += 1;
        let l = self.inst.new_lock(key, TTL_MS).unwrap().unwrap();
        let timeout = if immediate { 0 } else { TTL_MS };
        let got = self.recorded(Op::Acquire, key, &label, TTL_MS, immediate, |inst| {
            let won = inst.acquire(l, timeout, Some(5))?;
            Ok(match won {
                Ok(true) => Ok(Said::Yes(inst.fence(l)?)),
                Ok(false) => Ok(Said::No),
                Err(e) => Err(e),
            })
        });
        if got != Some(true) {
            if got == Some(false) {
                self.stats.refused += 1;
            }
            self.inst.drop_lock(l).unwrap();
            thread::sleep(Duration::from_micros(self.rng.below(3_000)));
            return;
        }
        self.stats.grants += 1;
        self.record(key, &label, stamp(now_us()), EventKind::Enter);
        let fence = self
            .inst
            .fence(l)
            .unwrap()
            .expect("a held lock has a fence");
        let serialized = (self.rng.unit() < 0.1)
            .then(|| self.inst.serialize(l).expect("the component trapped").ok())
            .flatten();
        let paused = self.rng.unit() < 0.03;
        if paused {
            // A holder paused past its TTL: it waits until another holder has written with a
            // higher fence (bounded), so its own write must then be refused.
            self.stats.pauses += 1;
            let give_up = Instant::now() + Duration::from_millis(TTL_MS * 4);
            while self.resource.highest(key) <= fence && Instant::now() < give_up {
                thread::sleep(Duration::from_millis(2));
            }
        }
        let t0 = now_us();
        let accepted = self.resource.write(key, fence);
        let at = Stamp::new(t0 - CLOCK_ERROR_US, now_us() + CLOCK_ERROR_US);
        self.record(key, &label, at, EventKind::FencedWrite { fence, accepted });
        if paused && !accepted {
            self.stats.stale_writes_refused += 1;
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
            self.stats.abandoned += 1;
        } else if self.release(key, &label, l).is_none() {
            // An unknown outcome (perhaps released): try once more, as a caller would.
            self.release(key, &label, l);
        }
        self.inst.drop_lock(l).unwrap();
        if let Some(text) = serialized {
            self.stale.push((key.to_owned(), label, text));
        }
    }

    /// A handle restored from a serialized hold that was since released or abandoned tries to
    /// release or extend it: the store must refuse unless that very hold is still live.
    fn replay(&mut self) {
        let at = self.rng.below(self.stale.len() as u64) as usize;
        let (key, label, text) = self.stale.swap_remove(at);
        self.stats.replays += 1;
        let l = self.inst.restore(&text).unwrap().unwrap();
        if self.rng.unit() < 0.5 {
            self.release(&key, &label, l);
        } else {
            self.extend(&key, &label, l);
        }
        self.inst.drop_lock(l).unwrap();
    }
}

struct RunResult {
    report: Report,
    events: Vec<Event>,
    stats: Stats,
    injected: FaultCounts,
    swaps: (u64, u64),
}

/// Runs `CLIENTS` racing instances for `seconds` on a host with `faults`, then checks the
/// merged history.
fn run(name: &str, faults: Faults, seconds: f64) -> RunResult {
    let waiting = faults.broken != Some(Broken::FrozenClock);
    let seed = faults.seed;
    let host = base_host().with_faults(faults);
    let keys: Vec<String> = (0..KEYS).map(|k| format!("{name}:{seed}:{k}")).collect();
    let resource = FencedResource::default();
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let clients: Vec<(Vec<Event>, Stats)> = thread::scope(|s| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (host, keys, resource) = (&host, &keys, &resource);
                s.spawn(move || {
                    let mut client = Client {
                        id,
                        inst: host.instance().expect("instantiate"),
                        rng: Rng(seed.wrapping_mul(1_000_003).wrapping_add(id)),
                        keys,
                        resource,
                        waiting,
                        events: Vec::new(),
                        stats: Stats::default(),
                        stale: Vec::new(),
                        labels: 0,
                    };
                    client.run(until);
                    (client.events, client.stats)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut events = Vec::new();
    let mut stats = Stats::default();
    for (e, st) in clients {
        events.extend(e);
        stats.add(&st);
    }
    let report = check(&events, &CheckOptions::default());
    record_row(name, seed, seconds, &report, &host.fault_counts(), &stats);
    let result = RunResult {
        report,
        events,
        stats,
        injected: host.fault_counts(),
        swaps: host.kv().swap_counts(),
    };
    eprintln!(
        "[{name} seed {seed}] {} operations, {} violations ({}); {:?}; injected {:?}; \
         {} swaps, {} lost CAS races",
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

/// One run as the fault suite's summary row (`tests/faults/summary.js` prints them all in one
/// table), appended to `$KEEL_FAULT_RESULTS/component.jsonl` when that is set.
fn record_row(
    name: &str,
    seed: u64,
    seconds: f64,
    report: &Report,
    injected: &FaultCounts,
    stats: &Stats,
) {
    let Ok(dir) = std::env::var("KEEL_FAULT_RESULTS") else {
        return;
    };
    // "RacyCompareAndSwap" → "racy-compare-and-swap", as the other stores name their variants.
    let mut variant = String::new();
    for (i, c) in name.chars().enumerate() {
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
        "{{\"store\":\"component (wasi:keyvalue host)\",\"primitive\":\"lock\",\"scenario\":\"host faults\",\
         \"variant\":\"{variant}\",\"seed\":{seed},\"seconds\":{seconds},\"operations\":{},\"grants\":{},\
         \"faults\":{faults},\"violations\":{},\"kinds\":[{}],\"losses\":{}}}\n",
        report.operations,
        stats.grants,
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

fn seconds() -> f64 {
    std::env::var("KEEL_COMPONENT_FAULT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(4.0)
}

fn broken_seeds() -> Vec<u64> {
    let n = std::env::var("KEEL_COMPONENT_FAULT_BROKEN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &u64| n > 0)
        .unwrap_or(3);
    (1..=n).collect()
}

/// A correct host that fails, half-applies and delays its calls: the history has no violation,
/// and every kind of fault really happened.
fn correct_host_under_faults(seed: u64) {
    let r = run("correct", faults(seed, None), seconds());
    assert_eq!(r.report.violation_count, 0, "{}", explain(&r));
    assert!(r.report.violations.is_empty() && r.report.loss_count == 0);
    let (i, s) = (r.injected, r.stats);
    assert!(
        i.failed_before > 0 && i.failed_after > 0 && i.delayed > 0,
        "faults not injected: {i:?}"
    );
    assert!(s.grants > 0 && s.refused > 0 && s.unknown > 0, "{s:?}");
    assert!(
        r.swaps.1 > 0,
        "no instance ever lost a compare-and-swap race"
    );
    assert!(
        s.pauses == 0 || s.stale_writes_refused > 0,
        "no paused holder's write was refused: {s:?}"
    );
}

#[test]
fn correct_host_under_faults_seed_1() {
    correct_host_under_faults(1);
}

#[test]
fn correct_host_under_faults_seed_2() {
    correct_host_under_faults(2);
}

/// A broken host, run with each seed for 1.5 s: every run must report a violation of `kind`.
fn caught(broken: Broken, kind: ViolationKind) {
    let seeds = broken_seeds();
    let missed: Vec<String> = seeds
        .iter()
        .filter_map(|&seed| {
            let r = run(&format!("{broken:?}"), faults(seed, Some(broken)), 1.5);
            let found = r.report.violations.iter().any(|v| v.kind == kind);
            (!found).then(|| {
                format!(
                    "seed {seed}: {} violations ({})",
                    r.report.violation_count,
                    kinds(&r.report)
                )
            })
        })
        .collect();
    eprintln!(
        "{broken:?}: caught as {} in {} of {} runs",
        kind.name(),
        seeds.len() - missed.len(),
        seeds.len()
    );
    assert!(missed.is_empty(), "{broken:?} not caught: {missed:?}");
}

/// Two instances can both win one key: the same fence is granted twice (and holds overlap).
#[test]
fn racy_compare_and_swap_is_caught() {
    caught(Broken::RacyCompareAndSwap, ViolationKind::FenceOrder);
}

/// Reads one write behind under a version-checked swap: a holder's key looks free (or its
/// fence older), and the same fence is granted twice.
#[test]
fn stale_reads_are_caught() {
    caught(Broken::StaleReads, ViolationKind::FenceOrder);
}

/// Nothing expires: an abandoned hold (or an acquire that landed but answered an error) keeps
/// its key, and immediate acquires are refused while the key is certainly free.
#[test]
fn frozen_clock_is_caught() {
    caught(Broken::FrozenClock, ViolationKind::RefusedWhileFree);
}
