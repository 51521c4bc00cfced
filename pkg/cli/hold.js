// `run` and `elect`: COMMAND inside the library's `run` (or `campaign`), supervised. keel-lock's
// own calls do the locking — waiting, keep-alive, loss signal, release; this file only starts
// COMMAND when the key is held, stops it when the hold is lost, and turns outcomes into exit codes.
import { constants, hostname } from "node:os";
import { EXIT, UsageError } from "./options.js";
import { FORWARDED, exitStatus, startCommand, stopDeadlines } from "./supervise.js";
import { StatusLine, describeHolder, say } from "./output.js";

/** The hold's metadata when none is given: where it runs and what, cut to the 1 KiB a hold keeps. */
function defaultMetadata(argv) {
  const text = `${hostname()} pid ${process.pid}: ${argv.join(" ")}`;
  const bytes = Buffer.from(text);
  return bytes.length <= 1024 ? text : bytes.subarray(0, 1021).toString().replace(/\uFFFD$/, "") + "...";
}

/**
 * Runs COMMAND for a hold: `hold({ fence, signal })` is the body given to the library's run or
 * campaign. Answers `{ body, outcome }`: `outcome` resolves once COMMAND (and, after a loss,
 * its whole group) is gone, to `{ status, lost }`.
 */
function supervisor(o, tracker, reporter, signals) {
  let resolveOutcome;
  const outcome = new Promise((resolve) => (resolveOutcome = resolve));
  const body = async ({ fence, signal }) => {
    reporter.granted(fence);
    const env = { ...process.env, KEEL_LOCK_KEY: o.key, KEEL_LOCK_FENCE: fence === null ? "" : String(fence) };
    const child = startCommand(o.argv, env, {
      graceMs: o.graceMs,
      onSpawnError: (error) => say(`cannot run ${o.argv[0]}: ${error.code === "ENOENT" ? "command not found" : error.message}`),
    });
    // COMMAND's supervisor passes signals on from here (its listeners are in place).
    signals.off();
    let lost = null;
    let termTimer = null;
    const loss = (reason, killAt) => {
      if (!lost) {
        lost = reason;
        reporter.lost(reason);
      }
      child.stop(killAt);
    };
    const schedule = (deadline) => {
      if (lost || deadline === null) return;
      const { term, kill } = stopDeadlines(deadline, o.ttlMs, o.graceMs);
      clearTimeout(termTimer);
      termTimer = setTimeout(() => loss("no renewal of the hold was confirmed in time", kill), Math.max(0, term - performance.now()));
    };
    schedule(tracker.deadline(o.key));
    tracker.onChange(o.key, schedule);
    const onAbort = () => {
      const reason = signal.reason?.message ?? String(signal.reason);
      const { kill } = stopDeadlines(tracker.deadline(o.key) ?? Infinity, o.ttlMs, o.graceMs);
      loss(reason, kill);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });

    const exit = await child.exited;
    // From here a signal is keel-lock's again: it must not cut the release short.
    signals.on();
    child.stopForwarding();
    clearTimeout(termTimer);
    tracker.onChange(o.key, null);
    signal.removeEventListener("abort", onAbort);
    if (lost) {
      // Grandchildren outlive a killed leader: wait for the group, up to its SIGKILL and a bit.
      await child.groupGone(performance.now() + o.graceMs + 5_000);
    }
    child.done();
    reporter.exited(exit, lost);
    const result = { status: lost ? EXIT.lost : exitStatus(exit), lost };
    resolveOutcome(result);
    return result;
  };
  return { body, outcome };
}

/** Signals that arrive before COMMAND runs (or after): stop waiting, exit as killed by them. */
function interruptions(controller) {
  let received = null;
  const handler = (signal) => {
    if (received) return;
    received = signal;
    controller.abort(new Error(`interrupted by ${signal}`));
  };
  const on = () => FORWARDED.forEach((signal) => process.on(signal, handler));
  const off = () => FORWARDED.forEach((signal) => process.off(signal, handler));
  on();
  return {
    off,
    on,
    get received() {
      return received;
    },
  };
}

function classify(error, o, interrupted) {
  if (interrupted) return 128 + (constants.signals[interrupted] ?? 0);
  if (error?.name === "LimitMismatchError") {
    say(`${o.key} is held under --limit ${error.heldLimit}, not ${error.limit}: use the same limit`);
    return EXIT.usage;
  }
  if (error instanceof RangeError && /metadata/i.test(error.message)) {
    say(`--metadata: ${error.message}`);
    return EXIT.usage;
  }
  say(`store failed: ${error?.message ?? error}`);
  return EXIT.unavailable;
}

export async function run(api, tracker, o) {
  let handle;
  try {
    handle = o.limit ? api.semaphore(o.key, o.limit, o.ttlMs) : o.shared ? api.readLock(o.key, o.ttlMs) : api.lock(o.key, o.ttlMs);
  } catch (error) {
    throw new UsageError(`bad KEY ${JSON.stringify(o.key)}: ${error.message}`);
  }
  const reporter = reporterFor(o);
  const controller = new AbortController();
  const signals = interruptions(controller);
  const status = o.timeoutMs > 0 && !o.quiet && !o.json ? StatusLine.start(api, o.key) : null;
  const { body, outcome } = supervisor(o, tracker, reporter, signals);
  let result;
  try {
    const options = {
      timeout: o.timeoutMs,
      autoExtend: { every: Math.max(1, Math.floor(o.ttlMs / 3)) },
      signal: controller.signal,
      metadata: o.metadata ?? defaultMetadata(o.argv),
    };
    if (o.permits) options.permits = o.permits;
    if (o.timeoutMs > 0) reporter.waiting();
    // After a loss, COMMAND's end is the answer: the release of a lost hold may wait out the TTL
    // on a store that stopped answering, and frees nothing.
    const lostOutcome = outcome.then((r) => (r.lost ? [true] : new Promise(() => {})));
    const [ran] = await Promise.race([handle.run((context) => (status?.stop(), body(context)), options), lostOutcome]);
    if (!ran) {
      status?.stop();
      reporter.busy();
      return EXIT.busy;
    }
    result = await outcome;
  } catch (error) {
    status?.stop();
    // A loss can make the release fail too: the outcome (76) stands.
    const settled = await Promise.race([outcome, Promise.resolve(null)]);
    if (settled) return settled.status;
    return classify(error, o, signals.received);
  }
  return result.status;
}

export async function elect(api, tracker, o) {
  try {
    api.lock(o.key, o.ttlMs);
  } catch (error) {
    throw new UsageError(`bad KEY ${JSON.stringify(o.key)}: ${error.message}`);
  }
  const reporter = reporterFor(o);
  const controller = new AbortController();
  const signals = interruptions(controller);
  const { body, outcome } = supervisor(o, tracker, reporter, signals);
  const metadata = o.metadata ?? defaultMetadata(o.argv);
  const status = !o.quiet && !o.json ? StatusLine.start(api, o.key) : null;
  try {
    const lostOutcome = outcome.then((r) => (r.lost ? r : new Promise(() => {})));
    await Promise.race([
      api.campaign(o.key, (context) => (status?.stop(), body(context)), { ttlMs: o.ttlMs, metadata, signal: controller.signal }),
      lostOutcome,
    ]);
    return (await outcome).status;
  } catch (error) {
    status?.stop();
    // The campaign rejects at the loss, before COMMAND is stopped: wait until it is.
    if (error?.name === "LockNotHeldError") return (await outcome).status;
    const settled = await Promise.race([outcome, Promise.resolve(null)]);
    if (settled) return settled.status;
    return classify(error, o, signals.received);
  }
}

/** What a run tells about itself: JSON lines on stderr with --json, else messages that matter. */
function reporterFor(o) {
  const json = (fields) => process.stderr.write(JSON.stringify({ at: Date.now(), key: o.key, ...fields }) + "\n");
  return {
    waiting() {
      if (o.json) json({ event: "waiting", timeoutMs: o.timeoutMs });
    },
    granted(fence) {
      if (o.json) json({ event: "acquired", fence });
    },
    busy() {
      if (o.json) json({ event: "busy", timeoutMs: o.timeoutMs });
      else if (!o.quiet) say(`${o.key} is held by someone else${o.timeoutMs ? ` (waited ${o.timeoutMs} ms)` : ""}`);
    },
    lost(reason) {
      if (o.json) json({ event: "lost", reason });
      say(`lost the lock on ${o.key} (${reason}): stopping COMMAND`);
    },
    exited(exit, lost) {
      if (o.json) json({ event: "exited", code: exit.code, signal: exit.signal, lost: Boolean(lost) });
    },
  };
}

export { describeHolder };
