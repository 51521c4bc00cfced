//! What clients record: events with the interval of time each certainly happened in.

/// Microseconds on the clock the clients share (e.g. the Unix epoch).
pub type Micros = i64;

/// When an event happened: certainly within `[earliest, latest]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The event happened no earlier than this.
    pub earliest: Micros,
    /// The event happened no later than this.
    pub latest: Micros,
}

impl Stamp {
    /// `[earliest, latest]`; the bounds are swapped if given the wrong way round.
    pub fn new(earliest: Micros, latest: Micros) -> Self {
        Stamp {
            earliest: earliest.min(latest),
            latest: earliest.max(latest),
        }
    }

    /// An instant known to within `±tolerance`.
    pub fn around(at: Micros, tolerance: Micros) -> Self {
        Stamp::new(at.saturating_sub(tolerance), at.saturating_add(tolerance))
    }
}

/// A store operation.
///
/// Non-exhaustive: a new kind of operation may be added in a minor version, so a `match` outside
/// this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Take the key.
    Acquire,
    /// Free the key (the owner's own hold only).
    Release,
    /// Push the expiry back (the owner's own hold only).
    Extend,
    /// Campaign for leadership: an exclusive acquire that waits its turn without a deadline;
    /// its grant makes the owner the key's leader until the hold ends. Judged as an acquire,
    /// and by the leader rules besides.
    Campaign,
}

impl Op {
    /// The operation's name in a history: `acquire`, `release`, `extend`, `campaign`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Release => "release",
            Op::Extend => "extend",
            Op::Campaign => "campaign",
        }
    }

    /// Whether the operation takes the key (an acquire or a campaign).
    pub fn acquires(self) -> bool {
        matches!(self, Op::Acquire | Op::Campaign)
    }
}

/// How an acquisition shares its key with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Holding {
    /// A lock (or a write lock): nobody else may hold the key meanwhile.
    #[default]
    Exclusive,
    /// A semaphore's permits (`weight` of them) or a read lock: shared holds may overlap while
    /// their weights add up to at most `limit` (`u64::MAX` for read locks), and all of them name
    /// the same limit; no exclusive hold may overlap any of them.
    Shared {
        /// How many of the key's permits this hold takes.
        weight: u64,
        /// How many permits the key has.
        limit: u64,
    },
}

impl Holding {
    /// A read lock: one permit of a limit nobody reaches.
    pub const READ: Holding = Holding::Shared {
        weight: 1,
        limit: u64::MAX,
    };

    /// The smallest limit that means a read lock: the stores' largest, 2^32 − 1, which is what
    /// the API gives its read locks (so a history may name either).
    pub const READ_LIMIT: u64 = u32::MAX as u64;

    /// Whether this is a read lock's share (a limit of [`Holding::READ_LIMIT`] or more).
    pub fn is_read(self) -> bool {
        matches!(self, Holding::Shared { limit, .. } if limit >= Holding::READ_LIMIT)
    }

    /// One spelling per kind of hold: every read-lock limit becomes `u64::MAX`, so read locks
    /// recorded with the API's limit and with none share the key as the store shares it.
    pub fn normalized(self) -> Holding {
        match self {
            Holding::Shared { weight, limit } if limit >= Holding::READ_LIMIT => Holding::Shared {
                weight,
                limit: u64::MAX,
            },
            other => other,
        }
    }
}

/// What happened.
///
/// Non-exhaustive: a new kind of event may be added in a minor version, so a `match` outside this
/// crate needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// The client sent `op`. `ttl_ms` is the TTL requested (acquire, extend); `immediate` marks
    /// an acquire that is one store call, not a wait (only those are judged by the
    /// refused-while-free check); `holding` says how an acquire shares the key.
    Invoke {
        /// The operation.
        op: Op,
        /// TTL requested, in ms (0 for release).
        ttl_ms: u64,
        /// A single-call acquire (no waiting, no retries).
        immediate: bool,
        /// How the acquisition shares its key (exclusive for release and extend).
        holding: Holding,
    },
    /// The store answered yes: granted (with its fence, if it keeps them), released, extended.
    Ok {
        /// The operation.
        op: Op,
        /// An acquire's fence.
        fence: Option<u64>,
    },
    /// The store answered no.
    Fail {
        /// The operation.
        op: Op,
    },
    /// The outcome is unknown (an error, a timeout).
    Info {
        /// The operation.
        op: Op,
    },
    /// The owner entered its critical section.
    Enter,
    /// The owner left its critical section.
    Exit,
    /// The owner learned its lease was gone (a refused extend, the local deadline).
    ExpiryObserved,
    /// The owner wrote to a fenced resource guarded by `key`; the stamp spans the write call.
    FencedWrite {
        /// The fence the write carried.
        fence: u64,
        /// Whether the resource accepted it.
        accepted: bool,
    },
    /// The store was stopped and started again, somewhere within the stamp. `persistent`: the
    /// store claims to keep its state across the restart.
    StoreRestart {
        /// The store claims durability.
        persistent: bool,
    },
    /// The owner's acquires of `keys` are one all-or-nothing call (`lock([...keys])`, a store's
    /// `acquireMany`): each key's invoke and outcome are recorded on that key as usual, under
    /// this owner label, and this event ties them together (its own `key` is unused). A set may
    /// hold some keys while its call runs (a composed set takes them one at a time), but once it
    /// answers it holds every key or none.
    AcquireSet {
        /// The keys of the set.
        keys: Vec<String>,
    },
    /// An observer (`owner`, a label of its own) was told who leads `key`: the leader's fence,
    /// or `None` while nobody leads. One observer's reports are sequential.
    LeaderObserved {
        /// The leader's fence.
        fence: Option<u64>,
    },
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The client (process, task) that recorded it; operations of one client on one owner are
    /// sequential.
    pub client: u64,
    /// The lock's key (empty for a store restart, which concerns every key, and unused by a
    /// set, which names its keys).
    pub key: String,
    /// The hold this concerns: a label unique per acquisition (not necessarily the store's
    /// owner token). A deliberate stranger's release or extend uses a label of its own.
    pub owner: String,
    /// When.
    pub at: Stamp,
    /// What.
    pub kind: EventKind,
}
