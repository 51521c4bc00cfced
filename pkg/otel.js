// keel-lock/otel: OpenTelemetry traces and metrics for keel-lock, built on its lock events
// (`onLockEvent`). `@opentelemetry/api` is an optional peer dependency: only this entry loads
// it, so an application without OpenTelemetry never does. The providers default to the global
// ones the application registered (or ones passed in); with none registered, the API's no-op
// providers make every call here free.
import { context, metrics, SpanStatusCode, trace } from "@opentelemetry/api";
import { onLockEvent } from "keel-lock";

const SCOPE = "keel-lock";

/** What an attempt's span says when it ends, by the event that ends it. */
const OUTCOMES = { refused: "refused", "timed-out": "timed_out", aborted: "aborted", error: "error" };

/**
 * Turns keel-lock's lock events into spans and metrics: spans `keel-lock.run`,
 * `keel-lock.acquire`, `keel-lock.release` and `keel-lock.extend`, the user's `fn` running
 * inside its run's span; histograms `keel_lock.wait.duration` and `keel_lock.hold.duration`
 * (ms); counters `keel_lock.refusals`, `keel_lock.timeouts` and `keel_lock.losses`. Answers
 * the function that turns it off.
 *
 * Options: `tracerProvider`, `meterProvider` (default: the global ones); `key`: `true` (the
 * default) puts the key on spans and metrics as `keel_lock.key`, `false` leaves it off, and a
 * function maps it (`(key) => string | undefined`; keys can be many, or say too much).
 */
export function instrumentKeelLock(options = {}) {
  if (options === null || typeof options !== "object") {
    throw new TypeError("instrumentKeelLock: options must be an object");
  }
  const { tracerProvider, meterProvider, key: keyOption = true } = options;
  if (!(typeof keyOption === "boolean" || typeof keyOption === "function")) {
    throw new TypeError("instrumentKeelLock: options.key must be true, false or a function of the key");
  }
  const tracer = (tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE);
  const meter = (meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE);
  const waits = meter.createHistogram("keel_lock.wait.duration", {
    unit: "ms",
    description: "How long a run or acquire waited before it held the key, or gave up",
  });
  const holds = meter.createHistogram("keel_lock.hold.duration", {
    unit: "ms",
    description: "How long a run held the key, from its grant to its release",
  });
  const refusals = meter.createCounter("keel_lock.refusals", { description: "Attempts refused without waiting" });
  const timeouts = meter.createCounter("keel_lock.timeouts", { description: "Attempts whose timeout ran out" });
  const losses = meter.createCounter("keel_lock.losses", { description: "Holds lost while held" });

  const keyOf = (key) => {
    const text = Array.isArray(key) ? key.join(",") : key;
    if (keyOption === true) return text;
    if (keyOption === false) return undefined;
    const mapped = keyOption(text);
    return typeof mapped === "string" ? mapped : undefined;
  };
  const attributesOf = (event) => {
    const attributes = { "keel_lock.store": event.store };
    const key = keyOf(event.key);
    if (key !== undefined) attributes["keel_lock.key"] = key;
    return attributes;
  };

  // The spans of the attempts in flight: attempt number → { span, attributes, lost }.
  const open = new Map();

  function finish(attempt, outcome, error) {
    const entry = open.get(attempt);
    if (entry === undefined) return;
    open.delete(attempt);
    entry.span.setAttribute("keel_lock.outcome", outcome);
    if (error !== undefined) {
      if (error instanceof Error) entry.span.recordException(error);
      entry.span.setStatus({ code: SpanStatusCode.ERROR, message: String(error?.message ?? error) });
    }
    entry.span.end();
  }

  function attemptEvent(event) {
    const entry = open.get(event.attempt);
    switch (event.type) {
      case "run":
      case "acquire": {
        const attributes = attributesOf(event);
        const span = tracer.startSpan(`keel-lock.${event.type}`, { attributes }, context.active());
        open.set(event.attempt, { span, attributes, lost: false, run: event.type === "run" });
        if (event.type === "run") {
          const inner = event.runInside;
          const active = trace.setSpan(context.active(), span);
          event.runInside = (call) => context.with(active, typeof inner === "function" ? () => inner(call) : call);
        }
        return;
      }
      case "granted":
        if (entry === undefined) return;
        entry.span.setAttributes({ "keel_lock.waited_ms": event.waitedMs, "keel_lock.via": event.via });
        if (event.fence !== null) entry.span.setAttribute("keel_lock.fence", event.fence);
        waits.record(event.waitedMs, { ...entry.attributes, "keel_lock.outcome": "granted" });
        if (!entry.run) finish(event.attempt, "acquired");
        return;
      case "lost":
        losses.add(1, entry?.attributes ?? attributesOf(event));
        if (entry === undefined) return;
        entry.lost = true;
        entry.span.addEvent("keel-lock.lost", { "keel_lock.reason": String(event.reason?.message ?? event.reason) });
        return;
      case "released":
        if (entry === undefined) return;
        holds.record(event.heldMs, entry.attributes);
        finish(event.attempt, entry.lost ? "lost" : "ran", event.error);
        return;
      default: {
        const outcome = OUTCOMES[event.type];
        if (outcome === undefined || entry === undefined) return;
        if (event.type === "refused") refusals.add(1, entry.attributes);
        if (event.type === "timed-out") timeouts.add(1, entry.attributes);
        // A wait that ended without the key is a wait too: timed out, or aborted by its caller.
        if (event.type === "timed-out" || event.type === "aborted") {
          waits.record(event.waitedMs, { ...entry.attributes, "keel_lock.outcome": outcome });
        }
        entry.span.setAttribute("keel_lock.waited_ms", event.waitedMs);
        finish(event.attempt, outcome, event.type === "error" ? event.error : undefined);
      }
    }
  }

  // A release or an extend of a held lock, told once it settled: a span over its duration.
  function stepEvent(event) {
    const operation = event.operation ?? (event.type === "extended" ? "extend" : "release");
    const attributes = attributesOf(event);
    if (event.fence !== null) attributes["keel_lock.fence"] = event.fence;
    const outcome = { released: "released", "release-refused": "refused", extended: "extended", lost: "lost", error: "error" }[event.type];
    const span = tracer.startSpan(
      `keel-lock.${operation}`,
      { attributes: { ...attributes, "keel_lock.outcome": outcome }, startTime: Date.now() - event.durationMs },
      context.active(),
    );
    if (event.type === "lost") losses.add(1, attributesOf(event));
    if (event.type === "error") {
      if (event.error instanceof Error) span.recordException(event.error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: String(event.error?.message ?? event.error) });
    }
    span.end();
  }

  return onLockEvent((event) => (event.attempt === undefined ? stepEvent(event) : attemptEvent(event)));
}
