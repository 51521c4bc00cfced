// keel-lock/otel: OpenTelemetry traces and metrics for keel-lock (needs `@opentelemetry/api`).
import type { MeterProvider, TracerProvider } from "@opentelemetry/api";

/** Options for `instrumentKeelLock`. */
export interface KeelLockInstrumentationOptions {
  /** Where spans go. Default: the global tracer provider. */
  tracerProvider?: TracerProvider;
  /** Where metrics go. Default: the global meter provider. */
  meterProvider?: MeterProvider;
  /**
   * The `keel_lock.key` attribute: `true` (default) the key itself, `false` none, or a function
   * mapping it (answer `undefined` to leave it off) — keys can be many, or sensitive.
   */
  key?: boolean | ((key: string) => string | undefined);
}

/**
 * Spans `keel-lock.run` (the user's `fn` runs inside it, so its own spans nest),
 * `keel-lock.acquire`, `keel-lock.release` and `keel-lock.extend`, with `keel_lock.key`,
 * `keel_lock.outcome` (`ran`, `acquired`, `refused`, `timed_out`, `aborted`, `lost`, `error`;
 * `released`, `extended` for those calls), `keel_lock.fence`, `keel_lock.waited_ms`,
 * `keel_lock.via` and `keel_lock.store`; histograms `keel_lock.wait.duration` and
 * `keel_lock.hold.duration` (ms) and counters `keel_lock.refusals`, `keel_lock.timeouts` and
 * `keel_lock.losses`. Answers the function that turns it off.
 */
export declare function instrumentKeelLock(options?: KeelLockInstrumentationOptions): () => void;
