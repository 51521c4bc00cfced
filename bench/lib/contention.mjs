// Contention with a known arrival order: waiter i starts `gapMs` after waiter i − 1, all on one
// key, each holding it for a critical section. From the holders' spans: the hand-off gaps
// (one holder's fn end → the next holder's fn start), overlaps (a span starting before the
// previous one ended: exclusion broken) and overtakes (pairs of waiters that acquired in the
// opposite order of their arrival; 0 = strictly first come, first served).
import { performance } from "node:perf_hooks";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Starts `waiters` calls of `run(fn, timeout)` (answering whether fn ran), waiter i at i·gapMs;
 * fn records its span and awaits `criticalSection()`. Answers { totalMs, spans, failed }, spans
 * carrying the arrival index `i`.
 */
export async function staggered(run, { waiters, gapMs, timeout, criticalSection }) {
  const spans = [];
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: waiters }, async (_, i) => {
      if (i > 0) await sleep(i * gapMs);
      let span;
      const ok = await run(async () => {
        span = { i, start: performance.now() };
        await criticalSection();
        span.end = performance.now();
      }, timeout);
      if (ok) spans.push(span);
      else failed++;
    }),
  );
  return { totalMs: performance.now() - t0, spans, failed };
}

/** Hand-off gaps, overlaps and overtakes of `spans` ({ i, start, end }), in acquisition order. */
export function orderStats(spans) {
  const byStart = [...spans].sort((a, b) => a.start - b.start || a.end - b.end);
  const gaps = [];
  let overlaps = 0;
  for (let k = 1; k < byStart.length; k++) {
    const g = byStart[k].start - byStart[k - 1].end;
    if (g < 0) overlaps++;
    gaps.push(g);
  }
  let overtakes = 0;
  for (let a = 0; a < byStart.length; a++) {
    for (let b = a + 1; b < byStart.length; b++) if (byStart[a].i > byStart[b].i) overtakes++;
  }
  return { gaps, overlaps, overtakes };
}
