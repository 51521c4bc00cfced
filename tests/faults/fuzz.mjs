// JS-level fuzzing of the packed package: random restoreLock strings, option objects, keys and
// TTLs, and JS stores answering random values (wrong types, NaN, huge numbers, thenables,
// rejections, getters that throw). Every call must settle with a value or with a documented
// error — TypeError, RangeError, LockNotHeldError, LockUnavailableError, or the very object the
// store threw — and never trap the wasm instance (WebAssembly.RuntimeError, e.g.
// "unreachable"); after the run the instance must still lock.
//   node fuzz.mjs [cases] [seed]      (default 2000 cases, seed 1; make fuzz runs 200000)
import { lock, restoreLock, setLockStore, MemoryLockStore, LockNotHeldError, LockUnavailableError } from "keel-lock";

const cases = Number(process.argv[2] ?? process.env.KEEL_JS_FUZZ_CASES ?? 2000);
const seed = Number(process.argv[3] ?? 1);
if (!Number.isSafeInteger(cases) || cases < 1) throw new Error("cases must be a positive integer");

let state = seed >>> 0;
const random = () => {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (list) => list[Math.floor(random() * list.length)];
const int = (n) => Math.floor(random() * n);

const NUMBERS = [0, -0, 1, -1, 0.5, 1.5, 29.9, 30_000, 2 ** 31 - 1, 2 ** 31, 2 ** 53 - 1, 2 ** 53, 1e300, -1e300, NaN, Infinity, -Infinity, Number.MIN_VALUE, 4.2e-7];
const oddValues = () => [undefined, null, true, false, "", "1", "true", {}, [], [1], () => 1, Symbol("s"), 10n, new Date(0), { valueOf: () => 5 }];
const number = () => (random() < 0.7 ? pick(NUMBERS) : (random() - 0.5) * 10 ** int(20));
const anyValue = () => (random() < 0.5 ? number() : pick(oddValues()));

const ALPHABET = "keel-lock:0123456789abcdefABCDEF_-=+/ :\u00e9\ud800\u{1f512}\0\n";
function randomString(max = 80) {
  let s = "";
  const n = int(max);
  for (let i = 0; i < n; i++) s += ALPHABET[int(ALPHABET.length)];
  return s;
}
const b64 = (text) => Buffer.from(text, "utf8").toString("base64url");
function serializedCandidate() {
  const owner = Array.from({ length: 32 }, () => "0123456789abcdef"[int(16)]).join("");
  const fields = [
    pick(["keel-lock", "keel-lock", "keel-lok", ""]),
    pick(["2", "1", "3", "02", ""]),
    pick([String(int(100_000)), "0", "2147483648", "-5", "+5", "1e3", ""]),
    pick([String(Date.now() + int(1e6)), "0", "8640000000000001", "", "007"]),
    pick([String(1 + int(1000)), "", "0", "9007199254740992", "1.5"]),
    pick([b64(owner), b64(owner.toUpperCase()), b64("x"), "!!", "", b64(owner) + "="]),
    pick([b64(randomString(20) || "k"), "", "%%", b64("a".repeat(600))]),
  ];
  if (random() < 0.3) fields.splice(int(fields.length), 1);
  let s = fields.join(":");
  if (random() < 0.3) s = s.slice(0, int(s.length + 1));
  if (random() < 0.2) s = randomString(200);
  return s;
}
function options() {
  if (random() < 0.15) return anyValue();
  const o = {};
  // Valid waits stay short so that a store answering "held" cannot stall the run.
  if (random() < 0.6) o.timeout = random() < 0.5 ? int(20) : number();
  if (random() < 0.5) o.retryDelay = random() < 0.5 ? int(5) : number();
  if (random() < 0.2) o.signal = pick([AbortSignal.abort(new Error("aborted")), new AbortController().signal, "signal", {}]);
  if (random() < 0.2) o.autoExtend = pick([true, false, { every: number() }, { maxHoldMs: number() }, 3]);
  for (const [k, v] of Object.entries(o)) if (typeof v === "number" && v > 20 && v <= 2 ** 31 - 1 && (k === "timeout" || k === "retryDelay")) o[k] = 20;
  return o;
}

class StoreError extends Error {}
function answer(kind) {
  const value = random() < 0.3 ? pick([true, false, { fence: number() }, { fence: 1 + int(100) }, { fence: anyValue(), waitedMs: number() }]) : anyValue();
  const roll = random();
  if (roll < 0.1) throw new StoreError(`store ${kind} threw`);
  if (roll < 0.2) return Promise.reject(new StoreError(`store ${kind} rejected`));
  if (roll < 0.3) return Promise.resolve(value);
  if (roll < 0.35) return { then: (resolve) => resolve(value) };
  if (roll < 0.38) return { then: () => { throw new StoreError("thenable threw"); } };
  return value;
}
function randomStore() {
  const methods = ["acquire", "release", "extend", "isLocked", "remainingTime", "acquireOrWait", "withdraw", "forceRelease"];
  const store = {};
  for (const m of methods) {
    const r = random();
    if (r < 0.05 && m.length > 0) continue; // missing
    if (r < 0.08) store[m] = anyValue();
    else if (r < 0.1) Object.defineProperty(store, m, { get() { throw new StoreError("getter threw"); }, enumerable: true });
    else if (m === "acquireOrWait" || m === "withdraw" || m === "forceRelease") {
      if (random() < 0.5) store[m] = () => answer(m);
    } else store[m] = () => answer(m);
  }
  return store;
}

const documented = (e) =>
  e instanceof TypeError || e instanceof RangeError || e instanceof LockNotHeldError || e instanceof LockUnavailableError || e instanceof StoreError || e?.message === "aborted";

let failures = 0;
const counts = { ok: 0, documented: 0 };
async function attempt(what, fn) {
  try {
    await fn();
    counts.ok++;
  } catch (e) {
    if (e instanceof WebAssembly.RuntimeError || !documented(e)) {
      failures++;
      if (failures <= 10) console.error(`${what}: ${e instanceof WebAssembly.RuntimeError ? "WASM TRAP" : "undocumented error"}: ${e?.stack ?? e}`);
    } else counts.documented++;
  }
}

const memory = new MemoryLockStore();
const started = Date.now();
for (let i = 0; i < cases; i++) {
  const useMemory = random() < 0.3;
  if (!useMemory) {
    await attempt("setLockStore", () => setLockStore(random() < 0.1 ? anyValue() : randomStore()));
  } else setLockStore(memory);
  const key = random() < 0.7 ? `fuzz:${int(5)}` : pick([randomString(40), "", "a".repeat(513), anyValue()]);
  const ttl = random() < 0.3 ? undefined : number();
  const op = int(10);
  await attempt(`case ${i} op ${op}`, async () => {
    if (op === 0) return restoreLock(random() < 0.1 ? anyValue() : serializedCandidate());
    const l = lock(key, ttl);
    switch (op) {
      case 1: return l.acquire(options());
      case 2: return l.run(() => int(2) ? 1 : Promise.resolve(2), options());
      case 3: await l.acquire({ timeout: 0 }); return l.extend(random() < 0.3 ? undefined : number());
      case 4: await l.acquire({ timeout: 0 }); return l.release();
      case 5: return Promise.all([l.isLocked(), l.getRemainingTime(), l.isExpired()]);
      case 6: await l.acquire({ timeout: 0 }); return restoreLock(l.serialize()).release();
      case 7: return l.hold(options()).then((h) => h.release());
      case 8: return l.run(({ fence, signal }) => [fence, signal.aborted], options());
      default: await l.acquire({ timeout: 0 }); l.autoExtend(random() < 0.5 ? undefined : { every: number() }); return l.release();
    }
  });
}
// A trap would have poisoned the instance: it must still lock.
setLockStore(new MemoryLockStore());
const [ran, value] = await lock("fuzz:after").run(() => "alive");
if (!ran || value !== "alive") {
  console.error("keel-lock no longer works after the fuzz run");
  failures++;
}
console.log(`JS fuzz: ${cases} cases (seed ${seed}) in ${Date.now() - started} ms: ${counts.ok} calls settled with a value, ${counts.documented} with a documented error, ${failures} failures`);
process.exit(failures === 0 ? 0 : 1);
