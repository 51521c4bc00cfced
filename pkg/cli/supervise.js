// COMMAND as a child of keel-lock, in a process group of its own so that stopping it stops
// everything it started (`sh -c 'a & b'` included), with the signals keel-lock gets passed on.
//
// When the hold is lost the group is stopped, SIGTERM then SIGKILL after the grace. Two ways
// to learn of a loss, because the library's alone comes too late for one of them:
//   - the run's signal (keel-lock's loss signal): an extend the store refused — the key is
//     already free, so COMMAND is stopped at once;
//   - the stop deadlines below: keel-lock declares a hold lost when its conservative local
//     deadline (when the last successful extend was sent, plus the TTL) has passed — the very
//     moment another holder could be granted the key. COMMAND must be dead before that, so the
//     SIGKILL is due `margin` before that deadline and the SIGTERM `grace` before the SIGKILL,
//     both moved on by every grant or extend that succeeds (deadline.js notes when each was sent).
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { constants } from "node:os";

/** Signals sent to keel-lock that COMMAND gets too. */
export const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];

/**
 * What is kept back from the end of a hold: time for SIGKILL to land and the process table to
 * empty, a tenth of the TTL up to a second.
 */
export function marginMs(ttlMs) {
  return Math.min(1_000, Math.floor(ttlMs / 10));
}

/**
 * From the local deadline of the hold (ms, performance.now() clock), when to send SIGTERM and
 * SIGKILL. Extends go every third of the TTL and the grace is at most a third, so SIGTERM comes
 * at least ttl − ttl/10 − ttl/3 ≈ 0.57 ttl after the last extend that succeeded: the next one,
 * due at ttl/3, has about a fifth of the TTL to be answered before COMMAND is stopped.
 */
export function stopDeadlines(deadline, ttlMs, graceMs) {
  const kill = deadline - marginMs(ttlMs);
  return { term: kill - graceMs, kill };
}

/**
 * Spawns `argv` with `env` in its own process group and stdio shared with keel-lock, and passes
 * keel-lock's FORWARDED signals on to the group until `stopForwarding()`. Answers a handle:
 * `exited` (resolves `{ code, signal }`), `stop(killAt)`, `groupGone(untilMs)`, `done()`.
 */
export function startCommand(argv, env, { graceMs, onSpawnError }) {
  // Passing signals on starts before COMMAND does: Node takes a signal's default action (keel-lock
  // dies, its key held until the TTL) whenever no listener is registered, even for a moment.
  let group;
  const forward = (signal) => sendGroup(group, signal);
  for (const signal of FORWARDED) process.on(signal, forward);
  const child = spawn(argv[0], argv.slice(1), { detached: true, stdio: "inherit", env });
  group = child.pid;
  let settle;
  const exited = new Promise((resolve) => (settle = resolve));
  child.once("error", (error) => {
    onSpawnError?.(error);
    settle({ code: error.code === "ENOENT" ? 127 : 126, signal: null, spawnError: error });
  });
  child.once("exit", (code, signal) => settle({ code, signal }));
  const reaper = group === undefined ? null : startReaper(group, graceMs);
  /** Stops passing signals on: the caller has its own listeners in place first. */
  const stopForwarding = () => {
    for (const signal of FORWARDED) process.off(signal, forward);
  };

  let stopping = null;
  let killTimer = null;
  /** SIGTERM now (unless already sent), SIGKILL `graceMs` later, or at `killAt` if sooner. */
  const stop = (killAt = Infinity) => {
    if (group === undefined) return;
    if (!stopping) {
      stopping = true;
      sendGroup(group, "SIGTERM");
    }
    const due = Math.min(performance.now() + graceMs, killAt);
    if (killTimer && killTimer.due <= due) return;
    clearTimeout(killTimer?.timer);
    killTimer = { due, timer: setTimeout(() => sendGroup(group, "SIGKILL"), Math.max(0, due - performance.now())) };
  };
  /** Resolves once no process of the group is left (or `untilMs` has passed). */
  const groupGone = async (untilMs) => {
    while (group !== undefined && performance.now() < untilMs && groupAlive(group)) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  /** COMMAND's end is handled: no SIGKILL still due, no reaper left to act. */
  const done = () => {
    clearTimeout(killTimer?.timer);
    reaper?.kill("SIGKILL");
  };
  return { exited, stop, group, groupGone, done, stopForwarding, pid: child.pid };
}

/**
 * A shell beside COMMAND that stops its group if keel-lock dies first (SIGKILL, the OOM killer):
 * it blocks reading a pipe that only keel-lock holds open, and the kernel closes that pipe when
 * keel-lock dies, however it dies. Then the hold is no longer kept alive, and COMMAND would run
 * on unlocked until it ends; the reaper gives it SIGTERM at once and SIGKILL after the grace.
 * keel-lock kills the reaper itself once COMMAND's end is handled. In its own process group, so a
 * terminal's Ctrl-C does not reach it.
 */
function startReaper(group, graceMs) {
  const script = `read _; kill -s TERM -- -${group} 2>/dev/null; sleep ${graceMs / 1000}; kill -s KILL -- -${group} 2>/dev/null`;
  try {
    const reaper = spawn("/bin/sh", ["-c", script], { detached: true, stdio: ["pipe", "ignore", "ignore"] });
    reaper.on("error", () => {}); // without /bin/sh there is no reaper: COMMAND is supervised all the same
    reaper.stdin.on("error", () => {});
    reaper.unref();
    reaper.stdin.unref?.();
    return reaper;
  } catch {
    return null;
  }
}

/**
 * Whether a process of the group is still running. A killed grandchild stays a zombie until
 * whoever inherited it reaps it — a container's init may take its time, and kill(-group, 0)
 * still counts the zombie — so on Linux /proc is read, and zombies are not counted.
 */
function groupAlive(group) {
  if (!sendGroup(group, 0)) return false;
  let entries;
  try {
    entries = readdirSync("/proc");
  } catch {
    return true;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so read after the last ')'.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(pgrp) === group && state !== "Z" && state !== "X") return true;
  }
  return false;
}

/** kill(-group, signal); whether the group still had a process to signal. */
function sendGroup(group, signal) {
  if (group === undefined) return false;
  try {
    process.kill(-group, signal);
    return true;
  } catch {
    return false;
  }
}

/** COMMAND's exit as keel-lock's own: its code, or 128 + the number of the signal that killed it. */
export function exitStatus({ code, signal }) {
  if (code !== null && code !== undefined) return code;
  return 128 + (constants.signals[signal] ?? 0);
}
