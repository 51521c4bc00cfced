// Scenarios shared by the bench Workers (each bundle gets its own copy). Times are taken inside
// workerd with Date.now() / performance.now(): in local workerd both advance during CPU work too,
// but only in whole milliseconds.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * RPC accounting for one Worker: calls per method, and the time during which at least one RPC was
 * pending (from the call to its promise's settlement). `wrap(stub)` answers an object that forwards
 * `methods` to the stub and accounts for them. For sequential callers, Worker time minus this is
 * the time spent outside RPCs: the Worker's own CPU plus its scheduling.
 */
export function rpcMeter(methods) {
  const counts = Object.fromEntries(methods.map((m) => [m, 0]));
  let pending = 0;
  let since = 0;
  let awaitingMs = 0;
  const settled = () => {
    if (--pending === 0) awaitingMs += performance.now() - since;
  };
  return {
    counts: () => ({ ...counts }),
    awaitingMs: () => awaitingMs,
    wrap(stub) {
      const wrapped = {};
      for (const m of methods) {
        wrapped[m] = (...args) => {
          counts[m] += 1;
          if (pending++ === 0) since = performance.now();
          let answer;
          try {
            answer = stub[m](...args);
          } catch (e) {
            settled();
            throw e;
          }
          return Promise.resolve(answer).then(
            (v) => {
              settled();
              return v;
            },
            (e) => {
              settled();
              throw e;
            },
          );
        };
      }
      return wrapped;
    },
  };
}

/** RPCs made between two `impl.counts()` snapshots: total and per method. */
function rpcDelta(before, after) {
  const byMethod = {};
  let requests = 0;
  for (const [m, n] of Object.entries(after)) {
    const d = n - (before[m] ?? 0);
    if (d > 0) byMethod[m] = d;
    requests += d;
  }
  return { requests, byMethod };
}

/**
 * `waiters` run()s on one key, waiter i started `gapMs` after waiter i − 1 (a known arrival
 * order), each waiting up to `timeout` ms, critical section = `csMs` of sleep. Answers every
 * holder's span (with its arrival index `i`) and the RPCs the store made meanwhile.
 */
export async function contend(impl, { key, waiters, csMs, timeout, gapMs = 0 }) {
  const before = impl.counts();
  const spans = [];
  let failed = 0;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: waiters }, async (_, i) => {
      if (i > 0 && gapMs > 0) await sleep(i * gapMs);
      let span;
      const ran = await impl.run(
        key,
        async () => {
          span = { i, start: Date.now() };
          await sleep(csMs);
          span.end = Date.now();
        },
        timeout,
      );
      if (ran) spans.push(span);
      else failed += 1;
    }),
  );
  return { totalMs: Date.now() - t0, spans, failed, ...rpcDelta(before, impl.counts()) };
}

/**
 * `runs` sequential uncontended run()s on one key, fn = () => 1. Answers the time they took in
 * the Worker, the part of it during which an RPC was pending, and the RPCs made. The clocks tick
 * in whole ms: `totalMs` over the whole loop is exact to 1 ms; `awaitingMs` is a sum of per-RPC
 * whole-ms differences, unbiased when the RPCs start at random phases of the clock's tick.
 */
export async function uncontended(impl, { key, runs }) {
  const fn = () => 1;
  const before = impl.counts();
  const awaiting0 = impl.awaitingMs();
  const t0 = performance.now();
  for (let i = 0; i < runs; i++) {
    if (!(await impl.run(key, fn, 0))) throw new Error("uncontended run() did not run");
  }
  const totalMs = performance.now() - t0;
  return { runs, totalMs, awaitingMs: impl.awaitingMs() - awaiting0, ...rpcDelta(before, impl.counts()) };
}

/** One uncontended run() on `key`, or on a fresh key (a new Durable Object) when none is given. */
export async function firstRun(impl, { key } = {}) {
  const ran = await impl.run(key ?? `startup:${crypto.randomUUID()}`, () => 1, 0);
  if (!ran) throw new Error("uncontended run() did not run");
  return { ran };
}
