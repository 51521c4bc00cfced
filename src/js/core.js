// The wasm's numeric face, the one holder of the wasm module's exports: each under a name that
// says what it does (the exports' own names are short: the glue and the .wasm carry them), and
// what a step carries besides its code, read from wasm memory (the OUT_* numbers).

import { FAILED, MINTED_TOKEN_LEN, OUT_ARG, OUT_LEN, OUT_OWNER_AT, OUT_OWNER_LEN, OUT_POLL_MS, OUT_WAIT_MS } from "./protocol.js";

/** The core's exports, filled by `connect`: each answers a number (a step, FAILED) unless said otherwise. */
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
  core.checkLock = glue.__kCheck; // the TTL, or CHECK_KEY_AS_STRING
  core.lockArgumentsError = glue.__kLockError; // or undefined
  core.checkLimit = glue.__kLimit;
  core.currentBinding = glue.__kCurrent;
  core.openSlot = glue.__kOpen;
  core.twinSlot = glue.__kTwin;
  core.closeSlot = glue.__kClose; // KEPT, CLOSED or SPARED
  core.setPermits = glue.__kShare;
  core.ownerText = glue.__kOwner; // a text answer
  core.lastError = glue.__kError; // of the last call that answered FAILED
  // A run's acquisition (handle/acquire.rs, handle/queue.rs): each answers the next step.
  core.beginAcquire = glue.__kBegin;
  core.acquireAnswered = glue.__kAnswered; // false, true or a fence: ANSWER_*
  core.acquireAnsweredValue = glue.__kAnsweredValue; // judged by the seam's rules
  core.acquireOrWaitAnswered = glue.__kAnsweredWaited;
  core.acquireUnanswered = glue.__kUnanswered;
  core.retryAcquire = glue.__kRetry;
  core.abandonAcquire = glue.__kAbandon;
  core.stopWaiting = glue.__kWithdraw;
  core.stepQueued = glue.__kPoll;
  // Ending and reading a hold (handle/release.rs).
  core.endRun = glue.__kEnd;
  core.releaseHold = glue.__kRelease;
  core.releaseAnswered = glue.__kReleased;
  core.adoptHold = glue.__kAdopt;
  core.forgetRunHold = glue.__kForget;
  core.fenceOf = glue.__kFence; // NaN: none
  core.holdLost = glue.__kExpired; // a boolean
  // The other operations (operations.rs).
  core.extendHold = glue.__kExtend;
  core.extendAnswered = glue.__kExtended;
  core.extendFailed = glue.__kExtendFailed;
  core.keyOperation = glue.__kInspect; // isLocked, remainingTime, forceRelease
  core.keyOperationAnswered = glue.__kInspected;
  core.serialize = glue.__kSerialize; // a text answer
  core.restore = glue.__kRestore;
  core.keyOf = glue.__kKeyOf; // a text answer
  core.ttlOf = glue.__kTtlOf;
  core.limitOf = glue.__kLimitOf;
  core.memoryCall = glue.__kMemoryCall; // the memory store's answer
  // A hold's watcher (watching.rs).
  core.checkAutoExtend = glue.__kKeepAliveCheck;
  core.startWatcher = glue.__kWatch;
  core.watcherStep = glue.__kWatchNext;
  core.watcherExtend = glue.__kWatchExtend;
  core.watcherExtended = glue.__kWatchExtended;
  core.stopWatcher = glue.__kWatchStop;
  // Errors made by the core's checks.
  core.optionsError = glue.__kOptionsError; // or undefined
  core.notAFunctionError = glue.__kNotAFunction;
  core.notANumberError = glue.__kNotANumber;
  core.notSerializedError = glue.__kNotSerialized;
  core.notHeldError = glue.__kNotHeld;
  core.extendIdleError = glue.__kExtendIdle;
  core.noSharedError = glue.__kNoShared;
  core.timeoutError = glue.__kTimeoutError;
  core.releaseAnswerError = glue.__kReleaseAnswerError;
  core.lostError = glue.__kLostError;
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
