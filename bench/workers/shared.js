// Scenarios shared by the bench Workers (each bundle gets its own copy). Times are taken inside
// workerd with Date.now(), which there only advances across I/O (timers, RPC answers): enough for
// "fn started" / "fn ended", at millisecond resolution.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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
  const after = impl.counts();
  const byMethod = {};
  let requests = 0;
  for (const [m, n] of Object.entries(after)) {
    const d = n - (before[m] ?? 0);
    if (d > 0) byMethod[m] = d;
    requests += d;
  }
  return { totalMs: Date.now() - t0, spans, failed, requests, byMethod };
}

/** One uncontended run() on `key`, or on a fresh key (a new Durable Object) when none is given. */
export async function firstRun(impl, { key } = {}) {
  const ran = await impl.run(key ?? `startup:${crypto.randomUUID()}`, () => 1, 0);
  if (!ran) throw new Error("uncontended run() did not run");
  return { ran };
}
