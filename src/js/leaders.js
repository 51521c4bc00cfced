// Leaders, composed from what every store has: `campaign` is a run that waits in the key's queue
// without a deadline and keeps its hold alive; `observe` follows who holds the key — pushed by a
// store's `watch` where it has one, else read from `inspect` at an interval.

import { ABORTED, ELAPSED, race } from "./calls.js";
import { boundStore } from "./binding.js";
import { isFence, isHolder } from "./inspect.js";
import { nothing } from "./options.js";
import { lock } from "./handles.js";

/** The longest wait one acquire takes: a campaign waits in turns of it, for as long as it must. */
const LONGEST_WAIT = 2147483647;

/**
 * Waits (first come, first served, where the store hands over) to lead `key`, runs
 * `fn({ fence, signal })` while holding it with autoExtend on, and answers what `fn` answers.
 * Leadership lost while `fn` runs: `signal` aborts, and the campaign rejects with the loss.
 */
export async function campaign(key, fn, options) {
  if (typeof fn !== "function") throw new TypeError(`campaign: fn must be a function, got ${typeof fn}`);
  if (options !== undefined && (options === null || typeof options !== "object")) {
    throw new TypeError("campaign: options must be an object");
  }
  const { ttlMs, metadata, signal } = options ?? {};
  const leader = lock(key, ttlMs);
  for (;;) {
    const [ran, value] = await leader.run(
      async (context) => {
        const signal = context.signal;
        // The loss rejects the campaign even while `fn` has not settled (it may not heed it).
        const lost = new Promise((_, reject) => {
          if (signal.aborted) reject(signal.reason);
          else signal.addEventListener("abort", () => reject(signal.reason), { once: true });
        });
        lost.catch(nothing);
        const out = await Promise.race([fn({ fence: context.fence, signal }), lost]);
        if (signal.aborted) throw signal.reason;
        return out;
      },
      { timeout: LONGEST_WAIT, autoExtend: true, signal, metadata },
    );
    if (ran) return value;
  }
}

/**
 * The leaders of `key` as they change: `{ metadata, fence }` of the holder, or `null` while
 * nobody leads; the first value is the state when iteration starts, and a leader is never
 * reported after a newer one. On a store with `watch` every change the store makes is pushed
 * here as it happens (a leader that comes and goes at once is still seen), and the holder's
 * expiry is looked for when its time runs out. Elsewhere `inspect` is read every `intervalMs`
 * (default 1000 ms, at least 10), and a leader that comes and goes between two looks is not
 * seen. Ends when `signal` aborts.
 */
export async function* observe(key, options) {
  if (options !== undefined && (options === null || typeof options !== "object")) {
    throw new TypeError("observe: options must be an object");
  }
  const { signal, intervalMs = 1000 } = options ?? {};
  if (typeof intervalMs !== "number" || !(intervalMs >= 10 && intervalMs <= LONGEST_WAIT)) {
    throw new RangeError(`observe: intervalMs must be a number of milliseconds from 10 to ${LONGEST_WAIT}, got ${intervalMs}`);
  }
  if (signal !== undefined && !(typeof signal?.addEventListener === "function" && typeof signal.aborted === "boolean")) {
    throw new TypeError(`observe: options.signal must be an AbortSignal, got ${signal === null ? "null" : typeof signal}`);
  }
  const store = boundStore();
  const handle = lock(key);
  const subscription = typeof store.object.watch === "function" ? await subscribe(store.object, key, signal) : null;
  try {
    // The leader last yielded (undefined: none yet), the largest fence yielded, and when the
    // leader's hold runs out by its own clock (a store that pushes reports no expiry).
    let last;
    let seen = 0;
    let endsAt = Infinity;
    const leader = (fence, metadata, remainingMs) => {
      endsAt = performance.now() + remainingMs;
      return { metadata, fence };
    };
    // The holder `inspect` shows now, if it is news.
    const look = async () => {
      const { holders } = await handle.inspect();
      const top = holders.at(-1);
      if (top === undefined) {
        endsAt = Infinity;
        return last === null ? undefined : null;
      }
      const now = leader(top.fence, top.metadata, top.remainingMs);
      if (last !== undefined && last !== null && top.fence === last.fence) return undefined;
      if (last !== undefined && top.fence !== null && top.fence <= seen) return undefined;
      return now;
    };
    let news = await look();
    for (;;) {
      if (news !== undefined) {
        last = news;
        if (news !== null && news.fence !== null) seen = Math.max(seen, news.fence);
        yield news;
      }
      if (signal?.aborted) return;
      if (subscription === null) {
        if ((await race(intervalMs, signal)) === ABORTED) return;
        news = await look();
        continue;
      }
      const change = await subscription.next(endsAt - performance.now());
      if (change === ABORTED) return;
      news = undefined;
      if (change === ELAPSED || change === null) {
        news = await look(); // the holder's time ran out, or the store may have missed reports
      } else if (change.held) {
        if (!(change.fence > seen)) continue; // older than what was yielded
        news = leader(change.fence, change.metadata, change.remainingMs);
      } else if (last !== null && last !== undefined && last.fence === change.fence && !subscription.handedOver(change.fence)) {
        endsAt = Infinity;
        news = null;
      }
    }
  } finally {
    // Stopping is the store's business; its failure is not the iteration's.
    if (subscription !== null) Promise.resolve().then(() => subscription.stop()).catch(nothing);
  }
}

/**
 * Subscribes to `object.watch(key, …)` (checking what it reports): `{ next(ms), handedOver,
 * stop() }`, `next` answering the next report, ELAPSED when `ms` pass first, ABORTED once
 * `signal` aborts. Reports made before `next` is called wait for it, in order.
 */
async function subscribe(object, key, signal) {
  const queue = [];
  let wake = nothing;
  const broken = () =>
    new TypeError("lock store's watch() must report { fence, held, metadata, remainingMs }, { fence, held: false } or null");
  let failure = null;
  const stop = await object.watch(key, (change) => {
    if (change !== null) {
      const metadata = change?.metadata ?? null;
      const good =
        typeof change === "object" &&
        isFence(change.fence) &&
        (change.held === false || (change.held === true && isHolder(metadata, change.remainingMs)));
      if (!good) failure ??= broken();
      else change = change.held ? { fence: change.fence, held: true, metadata, remainingMs: change.remainingMs } : { fence: change.fence, held: false };
    }
    queue.push(change);
    wake();
  });
  if (typeof stop !== "function") throw new TypeError("lock store's watch() must resolve to a function that stops it");
  return {
    async next(ms) {
      if (failure !== null) throw failure;
      if (queue.length === 0) {
        const waited = await race(ms < Infinity ? Math.max(0, Math.min(ms, LONGEST_WAIT)) : Infinity, signal, (answer) => {
          wake = answer;
        });
        wake = nothing;
        if (waited !== undefined) return waited;
      }
      if (failure !== null) throw failure;
      return queue.shift();
    },
    /** Whether a newer grant already waits behind the end of `fence`: a hand-over, not a gap. */
    handedOver(fence) {
      return queue.length > 0 && queue[0] !== null && queue[0].held && queue[0].fence > fence;
    },
    stop,
  };
}
