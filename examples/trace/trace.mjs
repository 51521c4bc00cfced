// `make trace`: twenty requests charge invoice 42 at once; each waits its turn for the lock, then
// charges (a span of its own, nested in keel-lock's). The spans are recorded by the
// OpenTelemetry SDK in memory, and drawn from there as a waterfall: ░ waiting, █ holding the
// lock. Once on the memory store, which hands the key to the next waiter as it is released, and
// once on a store written in JS that only answers acquire (so waiters poll, every retryDelay).
import { context } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { lock, setLockStore, MemoryLockStore } from "keel-lock";
import { instrumentKeelLock } from "keel-lock/otel";

const CHARGES = 20;
const CHARGE_MS = 15;
const WIDTH = 56;

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const tracer = tracerProvider.getTracer("checkout");
instrumentKeelLock({ tracerProvider });

/** A store in JS over a Map, with no queue of its own: a waiter asks again every retryDelay. */
function pollingStore() {
  const rows = new Map();
  const live = (key) => {
    const row = rows.get(key);
    return row !== undefined && row.expiresAt > Date.now() ? row : undefined;
  };
  return {
    async acquire(key, owner, ttlMs) {
      if (live(key)) return false;
      rows.set(key, { owner, expiresAt: Date.now() + ttlMs });
      return true;
    },
    async release(key, owner) {
      if (live(key)?.owner !== owner) return false;
      rows.delete(key);
      return true;
    },
    async extend(key, owner, ttlMs) {
      const row = live(key);
      if (row?.owner !== owner) return false;
      row.expiresAt = Date.now() + ttlMs;
      return true;
    },
    async isLocked(key) {
      return live(key) !== undefined;
    },
    async remainingTime(key) {
      const row = live(key);
      return row === undefined ? null : row.expiresAt - Date.now();
    },
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function chargeAll() {
  exporter.reset();
  await Promise.all(
    Array.from({ length: CHARGES }, (_, i) =>
      tracer.startActiveSpan(`POST /invoices/42/charge #${i + 1}`, async (request) => {
        await lock("invoice:42").run(
          () => tracer.startActiveSpan("charge card", async (span) => {
            await sleep(CHARGE_MS);
            span.end();
          }),
          { timeout: 10_000, retryDelay: 25 },
        );
        request.end();
      }),
    ),
  );
  return exporter.getFinishedSpans();
}

const ms = (time) => time[0] * 1e3 + time[1] / 1e6;

/** The waterfall of the keel-lock.run spans: one row per charge, in the order they were granted. */
function draw(title, spans) {
  const runs = spans.filter((s) => s.name === "keel-lock.run");
  const start = Math.min(...runs.map((s) => ms(s.startTime)));
  const end = Math.max(...runs.map((s) => ms(s.endTime)));
  const scale = WIDTH / (end - start);
  const rows = runs
    .map((s) => {
      const from = ms(s.startTime) - start;
      const granted = from + s.attributes["keel_lock.waited_ms"];
      const to = ms(s.endTime) - start;
      return { from, granted, to, fence: s.attributes["keel_lock.fence"], via: s.attributes["keel_lock.via"], waited: s.attributes["keel_lock.waited_ms"] };
    })
    .sort((a, b) => a.granted - b.granted);
  const waits = rows.map((r) => r.waited).sort((a, b) => a - b);
  // The time some charge held the key (a release and the next grant can overlap by a tick).
  const held = rows.reduce((sum, r, i) => sum + Math.min(r.to, rows[i + 1]?.granted ?? r.to) - r.granted, 0);
  console.log(`\n${title}`);
  console.log(`${" ".repeat(12)}0 ms${" ".repeat(WIDTH - 10)}${Math.round(end - start)} ms`);
  for (const [i, r] of rows.entries()) {
    const a = Math.round(r.from * scale);
    const b = Math.max(a, Math.round(r.granted * scale));
    const c = Math.max(b + 1, Math.round(r.to * scale));
    const bar = " ".repeat(a) + "░".repeat(b - a) + "█".repeat(c - b);
    const fence = r.fence === undefined ? "" : `fence ${r.fence}, `;
    console.log(`charge ${String(i + 1).padStart(2)}  ${bar.padEnd(WIDTH + 1)} ${fence}waited ${r.waited.toFixed(1)} ms (${r.via})`);
  }
  const p = (q) => waits[Math.min(waits.length - 1, Math.floor(q * waits.length))].toFixed(1);
  console.log(`wait p50 ${p(0.5)} ms, p95 ${p(0.95)} ms; the lock was held ${Math.round((100 * held) / (end - start))}% of the time`);
  const nested = spans.filter((s) => s.name === "charge card");
  const parents = new Set(runs.map((s) => s.spanContext().spanId));
  const children = nested.filter((s) => parents.has(s.parentSpanContext?.spanId)).length;
  console.log(`${children} of ${nested.length} "charge card" spans are children of their keel-lock.run`);
  // The picture is only worth drawing if it is whole: every charge ran, inside its lock's span.
  if (runs.length !== CHARGES || children !== CHARGES || runs.some((s) => s.attributes["keel_lock.outcome"] !== "ran")) {
    throw new Error(`expected ${CHARGES} runs that ran, each with its charge nested; got ${runs.length} runs, ${children} nested`);
  }
}

setLockStore(new MemoryLockStore());
draw("MemoryLockStore: the key is handed to the next waiter as it is released", await chargeAll());
setLockStore(pollingStore());
draw("A store in JS with acquire only: each waiter asks again every 25 ms (retryDelay)", await chargeAll());
