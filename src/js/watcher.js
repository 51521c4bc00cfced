// A hold's watcher (the core's `holding::Watch`, src/js/watching.rs) driven from JS timers.

import { LOST_NOTHING, WATCH_EXTEND, WATCH_LOST, WATCH_SLEEP } from "./protocol.js";
import { core, stepArg } from "./core.js";
import { race } from "./calls.js";
import { LockContext } from "./holding.js";

/**
 * Drives the core's watcher `watcher` of a hold of `key` for `context`; `extend(code)` is the
 * promise `extend()` answers for an extend step's code. Answers `{ context, stop() }`: `stop()`
 * ends it and resolves once no extend is in flight.
 */
export function driveWatcher(watcher, context, key, extend) {
  let stopped = false;
  let wake = null;
  const loop = (async () => {
    while (!stopped) {
      const code = core.watcherStep(watcher, performance.now());
      if (code === WATCH_SLEEP) {
        await race(stepArg(), undefined, (answer) => {
          wake = answer;
        });
        wake = null;
      } else if (code === WATCH_EXTEND) {
        let ok = true;
        try {
          await extend(core.watcherExtend(watcher));
        } catch {
          ok = false;
        }
        core.watcherExtended(watcher, ok, performance.now());
        // Stopped mid-extend, and that extend lost the hold: the context still hears of it.
        if (stopped && core.watcherStep(watcher, performance.now()) === WATCH_LOST) return lost(context, key);
      } else {
        // Lost: the core has let the watcher go.
        return lost(context, key);
      }
    }
    core.stopWatcher(watcher);
  })();
  return {
    context,
    stop() {
      if (!stopped) {
        stopped = true;
        if (wake !== null) wake();
      }
      return loop;
    },
  };
}

/** The watcher found the hold lost (why: the step's number): `context` is told, unless for nothing. */
function lost(context, key) {
  const reason = stepArg();
  if (reason !== LOST_NOTHING) LockContext.lose(context, core.lostError(key, reason));
}
