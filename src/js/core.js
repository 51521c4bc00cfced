// The wasm's numeric face (src/js/handle/, operations.rs, watching.rs, memory.rs), the one place
// that holds the wasm module's exports: each export under a name that says what it does (the
// exports keep short names, which the glue and the .wasm carry), and what a step carries besides
// its code, read from wasm memory rather than asked for (the OUT_* numbers).

import { FAILED, MINTED_TOKEN_LEN, OUT_ARG, OUT_LEN, OUT_OWNER_AT, OUT_OWNER_LEN, OUT_POLL_MS, OUT_WAIT_MS } from "./protocol.js";

/** The core's exports, filled by `connect`. Each answers a number unless said otherwise. */
export const core = {};

// The wasm's memory, where the numbers a step carries start in it, and views of both (views of
// memory go stale, length 0, when it grows).
let wasmMemory = null;
let carriedAddress = 0;
let carried = new Float64Array(0);
let memoryBytes = new Uint8Array(0);

/** Reaches the wasm through the wasm-bindgen glue's exports `glue`, once per instance. */
export function connect(glue) {
  [wasmMemory, carriedAddress] = glue.__kOut();
  // Handles and their slots (handle/slots.rs, handle/mod.rs).
  core.checkLock = glue.__kCheck; // (key, ttlMs, wellFormed): the TTL, CHECK_KEY_AS_STRING or FAILED
  core.lockArgumentsError = glue.__kLockError; // (key, ttlMs): the error of lock()'s arguments, or undefined
  core.checkLimit = glue.__kLimit; // (limit): a semaphore's limit, checked
  core.currentBinding = glue.__kCurrent; // (): the store lock() binds to now, as the slots name it
  core.openSlot = glue.__kOpen; // (key, ttl, binding): a slot for a handle
  core.twinSlot = glue.__kTwin; // (id): a second slot of the same core lock
  core.closeSlot = glue.__kClose; // (id, force): KEPT, CLOSED or SPARED
  core.setPermits = glue.__kShare; // (id, permits, limit): the slot's next acquire takes `permits`
  core.ownerText = glue.__kOwner; // (id): the owner token of the call in flight, as text
  core.lastError = glue.__kError; // (): the error of the last call that answered FAILED
  // A run's acquisition (handle/acquire.rs, handle/queue.rs): each answers the next step.
  core.beginAcquire = glue.__kBegin; // (id, timeout, retryDelay, now)
  core.acquireAnswered = glue.__kAnswered; // (id, ANSWER_*, fence)
  core.acquireAnsweredValue = glue.__kAnsweredValue; // (id, answer): judged by the seam's rules
  core.acquireOrWaitAnswered = glue.__kAnsweredWaited; // (id, answer)
  core.acquireUnanswered = glue.__kUnanswered; // (id): its bound passed
  core.retryAcquire = glue.__kRetry; // (id): the pause is over
  core.abandonAcquire = glue.__kAbandon; // (id): the store failed
  core.stopWaiting = glue.__kWithdraw; // (id): the caller's signal aborted
  core.stepQueued = glue.__kPoll; // (id, now): a memory store waiter's next step
  // Ending and reading a hold (handle/release.rs).
  core.endRun = glue.__kEnd; // (id, now): a run's release
  core.releaseHold = glue.__kRelease; // (id, now): release()
  core.releaseAnswered = glue.__kReleased; // (id, answer): a JS store's boolean answer
  core.adoptHold = glue.__kAdopt; // (id): acquire() keeps the hold the run took
  core.forgetRunHold = glue.__kForget; // (id): the run's release failed
  core.fenceOf = glue.__kFence; // (id): the hold's fence, or NaN
  core.holdLost = glue.__kExpired; // (id): whether the handle held the key and lost it (a boolean)
  // The other operations (operations.rs).
  core.extendHold = glue.__kExtend; // (id, ttl, given)
  core.extendAnswered = glue.__kExtended; // (extendId, answer, unanswered)
  core.extendFailed = glue.__kExtendFailed; // (extendId)
  core.keyOperation = glue.__kInspect; // (key, binding, OP_*, ttl): isLocked, remainingTime, forceRelease
  core.keyOperationAnswered = glue.__kInspected; // (key, OP_*, answer, unanswered, bound)
  core.serialize = glue.__kSerialize; // (id): a text answer
  core.restore = glue.__kRestore; // (text, binding): a slot holding the hold
  core.keyOf = glue.__kKeyOf; // (id): a text answer
  core.ttlOf = glue.__kTtlOf; // (id)
  core.limitOf = glue.__kLimitOf; // (id)
  core.memoryCall = glue.__kMemoryCall; // (store, OP_*, key, owner, ttlMs, weight, limit): its answer
  // A hold's watcher (watching.rs).
  core.checkAutoExtend = glue.__kKeepAliveCheck; // (options): 0 or FAILED
  core.startWatcher = glue.__kWatch; // (id, autoExtend, options, now): the watcher
  core.watcherStep = glue.__kWatchNext; // (watcher, now): WATCH_*
  core.watcherExtend = glue.__kWatchExtend; // (watcher): as extendHold answers
  core.watcherExtended = glue.__kWatchExtended; // (watcher, ok, now)
  core.stopWatcher = glue.__kWatchStop; // (watcher)
  // Errors, made by the core's checks (each answers the error, or undefined where it says so).
  core.optionsError = glue.__kOptionsError; // (options, forRun), or undefined
  core.notAFunctionError = glue.__kNotAFunction; // (value)
  core.notANumberError = glue.__kNotANumber; // (what, value)
  core.notSerializedError = glue.__kNotSerialized; // ()
  core.notHeldError = glue.__kNotHeld; // (key, NOT_HELD_*)
  core.extendIdleError = glue.__kExtendIdle; // (key, ttl, given)
  core.noSharedError = glue.__kNoShared; // ()
  core.timeoutError = glue.__kTimeoutError; // (id, OP_*, afterMs)
  core.releaseAnswerError = glue.__kReleaseAnswerError; // (answer)
  core.lostError = glue.__kLostError; // (key, LOST_*)
  // The store the package binds to, and the memory store's class.
  core.setLockStore = glue.setLockStore;
  core.getLockStore = glue.getLockStore;
  core.MemoryLockStore = glue.MemoryLockStore;
}

/** A call's number; its error thrown when it answered FAILED. */
export function ok(code) {
  if (code === FAILED) throw core.lastError();
  return code;
}

function remakeViews() {
  carried = new Float64Array(wasmMemory.buffer, carriedAddress, OUT_LEN);
  memoryBytes = new Uint8Array(wasmMemory.buffer);
}

/** The number the last step carries: a bound, a pause, a fence. */
export function stepArg() {
  if (carried.length === 0) remakeViews();
  return carried[OUT_ARG];
}

/** The number the last step carries at `index` (an OUT_* name). */
export function carriedNumber(index) {
  if (carried.length === 0) remakeViews();
  return carried[index];
}

/** A wait's waitMs and pollMs, as a CALL_ACQUIRE_OR_WAIT step carries them. */
export function waitExtras() {
  if (carried.length === 0) remakeViews();
  return [carried[OUT_WAIT_MS], carried[OUT_POLL_MS]];
}

// A leading U+FEFF is part of a key, not a byte-order mark to drop.
const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

/** The text a call answered (src/js/handle/mod.rs, `text`), read from wasm memory; throws on FAILED. */
export function textOf(code) {
  ok(code);
  if (carried.length === 0) remakeViews();
  return utf8.decode(memoryBytes.subarray(carried[OUT_OWNER_AT], carried[OUT_OWNER_AT] + carried[OUT_OWNER_LEN]));
}

/** The owner token of the store call the last CALL step is about (read before calling in). */
export function ownerOf(id) {
  if (carried.length === 0) remakeViews();
  if (carried[OUT_OWNER_LEN] !== MINTED_TOKEN_LEN) return textOf(core.ownerText(id));
  const b = memoryBytes;
  const p = carried[OUT_OWNER_AT];
  // Minted tokens: MINTED_TOKEN_LEN (32) ASCII bytes.
  return String.fromCharCode(
    b[p], b[p + 1], b[p + 2], b[p + 3], b[p + 4], b[p + 5], b[p + 6], b[p + 7],
    b[p + 8], b[p + 9], b[p + 10], b[p + 11], b[p + 12], b[p + 13], b[p + 14], b[p + 15],
    b[p + 16], b[p + 17], b[p + 18], b[p + 19], b[p + 20], b[p + 21], b[p + 22], b[p + 23],
    b[p + 24], b[p + 25], b[p + 26], b[p + 27], b[p + 28], b[p + 29], b[p + 30], b[p + 31],
  );
}
