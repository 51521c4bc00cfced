// The numbers the JS face exchanges with the wasm, each declared (with what it means) in
// src/js/protocol.rs; tests/js_protocol.rs holds the two, and the JS files' use, together.

// --- protocol (src/js/protocol.rs) ---------------------------------------------------------
// Step codes. A held step answers the fence (≥ 1) or HELD_UNFENCED.
export const REFUSED = 0;
export const HELD_UNFENCED = -1;
export const CALL = -2;
export const SLEEP = -3;
export const TIMED_OUT = -4;
export const CHECK_KEY_AS_STRING = -5;
export const STILL_QUEUED = -7;
export const CALL_ACQUIRE_OR_WAIT = -8;
export const FAILED = -100; // the error is core.lastError()
// Ending a hold, and what became of the handle's slot.
export const KEPT = 0;
export const CLOSED = 3;
export const SPARED = 4;
// Store operations.
export const OP_ACQUIRE = 0;
export const OP_RELEASE = 1;
export const OP_EXTEND = 2;
export const OP_IS_LOCKED = 3;
export const OP_REMAINING_TIME = 4;
export const OP_FORCE_RELEASE = 5;
export const OP_ACQUIRE_SHARED = 6;
export const OP_INSPECT = 7;
// A JS store's acquire answer, told apart by type.
export const ANSWER_FALSE = 0;
export const ANSWER_TRUE = 1;
export const ANSWER_FENCE = 2;
// Answers of the other operations.
export const YES = 1;
export const NOBODY = -1;
export const NOT_HELD_EXTEND = 0;
export const NOT_HELD_SERIALIZE = 1;
// A hold's watcher: its steps, and why a watch ended.
export const WATCH_LOST = 0;
export const WATCH_EXTEND = -2;
export const WATCH_SLEEP = -3;
export const LOST_NOTHING = 0;
// OUT: what a step hands over besides its code, read from wasm memory.
export const OUT_LEN = 5;
export const OUT_ARG = 0;
export const OUT_OWNER_AT = 1;
export const OUT_OWNER_LEN = 2;
export const OUT_TTL = 3;
export const OUT_EXTEND_ID = 4;
export const OUT_WAIT_MS = 3;
export const OUT_POLL_MS = 4;
export const MINTED_TOKEN_LEN = 32;
// --- end protocol ----------------------------------------------------------------------------
