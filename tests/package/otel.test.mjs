// keel-lock/otel with the real OpenTelemetry SDK: an in-memory span exporter, a metric reader
// collected on demand, and AsyncLocalStorage for the active context. A contended run, a refusal,
// a timeout, an abort and a loss each leave the documented span and metrics; the user's own span
// inside fn is a child of keel-lock.run; the key attribute can be dropped or mapped.
import { describe, it, before, after, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { context, trace, SpanStatusCode } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { lock, setLockStore, MemoryLockStore, LockNotHeldError } from "keel-lock";
import { instrumentKeelLock } from "keel-lock/otel";
import { mapLockStore } from "./stores.mjs";

/** A reader whose metrics the test collects when it asks. */
class OnDemandReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
let reader;
let meterProvider;
let uninstrument;

before(() => context.setGlobalContextManager(contextManager.enable()));
after(() => {
  context.disable();
});

/** Every data point of the metric `name` collected now, as [attributes, value]. */
async function points(name) {
  const { resourceMetrics } = await reader.collect();
  const found = [];
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== name) continue;
      for (const point of metric.dataPoints) found.push([point.attributes, point.value]);
    }
  }
  return found;
}

const spans = (name) => exporter.getFinishedSpans().filter((s) => s.name === name);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function instrument(options = {}) {
  reader = new OnDemandReader();
  meterProvider = new MeterProvider({ readers: [reader] });
  uninstrument = instrumentKeelLock({ tracerProvider, meterProvider, ...options });
}

for (const [name, make] of [["memory", () => new MemoryLockStore()], ["js, polled", () => mapLockStore()]]) {
  describe(`keel-lock/otel on the ${name} store`, () => {
    beforeEach(() => {
      setLockStore(make());
      exporter.reset();
      instrument();
    });
    afterEach(() => uninstrument());

    it("a contended run: its span waited, ran, and fn's own span is its child", async () => {
      const holder = lock("orders", 5_000);
      await holder.acquire();
      const tracer = tracerProvider.getTracer("app");
      const waiting = lock("orders", 5_000).run(
        () => tracer.startActiveSpan("charge", async (span) => {
          await sleep(5);
          span.end();
          return "charged";
        }),
        { timeout: 5_000, retryDelay: 10 },
      );
      await sleep(60);
      await holder.release();
      assert.deepEqual(await waiting, [true, "charged"]);

      const [run] = spans("keel-lock.run");
      assert.equal(run.attributes["keel_lock.key"], "orders");
      assert.equal(run.attributes["keel_lock.outcome"], "ran");
      assert.equal(run.attributes["keel_lock.store"], name === "memory" ? "MemoryLockStore" : "LockStore");
      assert.equal(run.attributes["keel_lock.via"], name === "memory" ? "hand-over" : "poll");
      assert.ok(run.attributes["keel_lock.waited_ms"] >= 40, `waited ${run.attributes["keel_lock.waited_ms"]}`);
      if (name === "memory") assert.equal(typeof run.attributes["keel_lock.fence"], "number");
      else assert.equal(run.attributes["keel_lock.fence"], undefined);
      const [charge] = spans("charge");
      assert.equal(charge.spanContext().traceId, run.spanContext().traceId);
      assert.equal(charge.parentSpanContext?.spanId, run.spanContext().spanId);

      const [acquire] = spans("keel-lock.acquire");
      assert.equal(acquire.attributes["keel_lock.outcome"], "acquired");
      const [release] = spans("keel-lock.release");
      assert.equal(release.attributes["keel_lock.outcome"], "released");

      const waits = await points("keel_lock.wait.duration");
      const granted = waits.filter(([a]) => a["keel_lock.outcome"] === "granted");
      assert.equal(granted.reduce((n, [, v]) => n + v.count, 0), 2);
      assert.ok(Math.max(...granted.map(([, v]) => v.max)) >= 40);
      const holds = await points("keel_lock.hold.duration");
      assert.equal(holds.reduce((n, [, v]) => n + v.count, 0), 1); // the run's; an acquire's hold is its own
    });

    it("a refusal and a timeout: their spans' outcomes, and a count each", async () => {
      const holder = lock("k", 5_000);
      await holder.acquire();
      await lock("k").runImmediately(() => 1);
      await lock("k").run(() => 1, { timeout: 50, retryDelay: 10 });
      await holder.release();
      const outcomes = spans("keel-lock.run").map((s) => s.attributes["keel_lock.outcome"]);
      assert.deepEqual(outcomes, ["refused", "timed_out"]);
      assert.deepEqual((await points("keel_lock.refusals")).map(([a, v]) => [a["keel_lock.key"], v]), [["k", 1]]);
      assert.deepEqual((await points("keel_lock.timeouts")).map(([a, v]) => [a["keel_lock.key"], v]), [["k", 1]]);
      const timedOut = (await points("keel_lock.wait.duration")).filter(([a]) => a["keel_lock.outcome"] === "timed_out");
      assert.equal(timedOut.length, 1);
      assert.ok(timedOut[0][1].max >= 40);
    });

    it("an abort: the span ends aborted, not as an error (the caller chose it)", async () => {
      const holder = lock("k", 5_000);
      await holder.acquire();
      const controller = new AbortController();
      const waiting = lock("k").run(() => 1, { timeout: 5_000, retryDelay: 10, signal: controller.signal });
      setTimeout(() => controller.abort(new Error("deploy")), 20);
      await assert.rejects(waiting, /deploy/);
      await holder.release();
      const [run] = spans("keel-lock.run");
      assert.equal(run.attributes["keel_lock.outcome"], "aborted");
      assert.equal(run.status.code, SpanStatusCode.UNSET);
      assert.equal(spans("keel-lock.run").length, 1);
      const aborted = (await points("keel_lock.wait.duration")).filter(([a]) => a["keel_lock.outcome"] === "aborted");
      assert.equal(aborted.length, 1);
      assert.equal(aborted[0][1].count, 1);
      assert.ok(aborted[0][1].max >= 10);
    });

    it("a loss while fn runs: the run's span says lost, with a keel-lock.lost event, and a loss is counted", async () => {
      await lock("k", 60).run(async ({ signal }) => {
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      });
      const l = lock("k", 40);
      await l.acquire();
      await sleep(80);
      await assert.rejects(l.extend(), LockNotHeldError);
      const [run] = spans("keel-lock.run");
      assert.equal(run.attributes["keel_lock.outcome"], "lost");
      assert.deepEqual(run.events.map((e) => e.name), ["keel-lock.lost"]);
      const [extend] = spans("keel-lock.extend");
      assert.equal(extend.attributes["keel_lock.outcome"], "lost");
      assert.deepEqual((await points("keel_lock.losses")).map(([, v]) => v), [2]);
    });

    it("fn's error: the run's span is an error, with the exception recorded", async () => {
      await assert.rejects(lock("k").run(() => {
        throw new Error("payment declined");
      }), /payment declined/);
      const [run] = spans("keel-lock.run");
      assert.equal(run.status.code, SpanStatusCode.ERROR);
      assert.equal(run.events[0].name, "exception");
    });
  });
}

describe("keel-lock/otel options", () => {
  beforeEach(() => {
    setLockStore(new MemoryLockStore());
    exporter.reset();
  });
  afterEach(() => uninstrument?.());

  it("key: false leaves the key off spans and metrics; a function maps it", async () => {
    instrument({ key: false });
    await lock("user:42").runImmediately(() => 1);
    uninstrument();
    assert.equal(spans("keel-lock.run")[0].attributes["keel_lock.key"], undefined);
    for (const [attributes] of await points("keel_lock.wait.duration")) assert.equal(attributes["keel_lock.key"], undefined);

    exporter.reset();
    instrument({ key: (key) => key.split(":")[0] });
    await lock("user:42").runImmediately(() => 1);
    assert.equal(spans("keel-lock.run")[0].attributes["keel_lock.key"], "user");
    assert.deepEqual((await points("keel_lock.wait.duration")).map(([a]) => a["keel_lock.key"]), ["user"]);
  });

  it("turned off, it records nothing more", async () => {
    instrument();
    uninstrument();
    await lock("k").run(() => 1);
    assert.equal(exporter.getFinishedSpans().length, 0);
  });

  it("with no providers passed, it uses the global ones", async () => {
    assert.ok(trace.setGlobalTracerProvider(tracerProvider));
    try {
      uninstrument = instrumentKeelLock();
      await lock("k").run(() => 1);
      assert.equal(spans("keel-lock.run").length, 1);
    } finally {
      trace.disable();
    }
  });

  it("bad options are a TypeError", () => {
    assert.throws(() => instrumentKeelLock(null), TypeError);
    assert.throws(() => instrumentKeelLock({ key: "yes" }), TypeError);
    uninstrument = undefined;
  });
});
