//! The rules for N-holder keys (semaphores), reader/writer keys, sets of keys taken all or
//! nothing, and leaders: for each, a history a correct store may produce and one it may not,
//! with the edges where validity is uncertain and nothing must be flagged.

use super::*;

/// A store's answer as a helper records it.
#[derive(Clone, Copy)]
enum Out {
    Ok(Option<u64>),
    Fail,
    Info,
}

impl H {
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        c: u64,
        key: &str,
        owner: &str,
        op: Op,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        immediate: bool,
        holding: Holding,
        out: Out,
    ) -> &mut Self {
        self.ev(
            c,
            key,
            owner,
            sent,
            EventKind::Invoke {
                op,
                ttl_ms: ttl,
                immediate,
                holding,
            },
        );
        let kind = match out {
            Out::Ok(fence) => EventKind::Ok { op, fence },
            Out::Fail => EventKind::Fail { op },
            Out::Info => EventKind::Info { op },
        };
        self.ev(c, key, owner, answered, kind)
    }
    /// A granted immediate acquire of `holding` on "k" with a TTL of `ttl` ms.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        holding: Holding,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Acquire,
            sent,
            answered,
            ttl,
            true,
            holding,
            out,
        )
    }
    /// A waiting acquire of `holding` on "k", sent at `sent` and granted at `answered`.
    fn waited(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        holding: Holding,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Acquire,
            sent,
            answered,
            1000,
            false,
            holding,
            out,
        )
    }
    #[allow(clippy::too_many_arguments)]
    fn on(
        &mut self,
        c: u64,
        key: &str,
        owner: &str,
        op: Op,
        sent: Micros,
        answered: Micros,
        out: Out,
    ) -> &mut Self {
        let ttl = if op == Op::Release { 0 } else { 1000 };
        self.call(
            c,
            key,
            owner,
            op,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    /// An immediate exclusive acquire of `key`, sent at `sent`, answered `out` at `answered`.
    #[allow(clippy::too_many_arguments)]
    fn at_once(
        &mut self,
        c: u64,
        key: &str,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        out: Out,
    ) -> &mut Self {
        self.call(
            c,
            key,
            owner,
            Op::Acquire,
            sent,
            answered,
            ttl,
            true,
            Holding::Exclusive,
            out,
        )
    }
    /// One call acquiring `keys` all or nothing (TTL 1000 ms), answered per key by `outs`.
    fn set(
        &mut self,
        c: u64,
        owner: &str,
        keys: &[&str],
        sent: Micros,
        answered: Micros,
        outs: &[Out],
    ) -> &mut Self {
        self.0.push(Event {
            client: c,
            key: String::new(),
            owner: owner.into(),
            at: Stamp::around(sent * MS, 0),
            kind: EventKind::AcquireSet {
                keys: keys.iter().map(|&k| k.to_owned()).collect(),
            },
        });
        for (key, &out) in keys.iter().zip(outs) {
            self.call(
                c,
                key,
                owner,
                Op::Acquire,
                sent,
                answered,
                1000,
                true,
                Holding::Exclusive,
                out,
            );
        }
        self
    }
    /// A campaign for "k" (TTL `ttl` ms), sent at `sent`, leading from `answered` on.
    fn campaign(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        fence: u64,
    ) -> &mut Self {
        let out = Out::Ok(Some(fence));
        self.call(
            c,
            "k",
            owner,
            Op::Campaign,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    /// A campaign's keep-alive: an extend by `ttl` ms.
    fn keep_alive(
        &mut self,
        c: u64,
        owner: &str,
        sent: Micros,
        answered: Micros,
        ttl: u64,
        out: Out,
    ) -> &mut Self {
        self.call(
            c,
            "k",
            owner,
            Op::Extend,
            sent,
            answered,
            ttl,
            false,
            Holding::Exclusive,
            out,
        )
    }
    fn observed(&mut self, c: u64, observer: &str, at: Micros, fence: Option<u64>) -> &mut Self {
        self.ev(c, "k", observer, at, EventKind::LeaderObserved { fence })
    }
}

fn permits(weight: u64, limit: u64) -> Holding {
    Holding::Shared { weight, limit }
}

fn message_of(r: &Report, kind: ViolationKind) -> String {
    r.violations
        .iter()
        .find(|v| v.kind == kind)
        .map_or_else(|| format!("no {} in {r:?}", kind.name()), |v| v.to_string())
}

mod holds;
mod leaders;
mod sets;
