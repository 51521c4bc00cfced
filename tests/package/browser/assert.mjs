// The part of `node:assert/strict` the API tests use, for a browser.
class AssertionError extends Error {
  constructor(message) {
    super(message);
    this.name = "AssertionError";
  }
}

const show = (v) => {
  try {
    return typeof v === "string" ? JSON.stringify(v) : String(JSON.stringify(v) ?? v);
  } catch {
    return String(v);
  }
};

function deepEqualValues(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => deepEqualValues(x, b[i]));
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && deepEqualValues(a[k], b[k]));
}

/**
 * Whether `error` satisfies `expected`: a class, a RegExp (of its message), a predicate, or an
 * object whose every property the error has (a RegExp property matching a string one).
 */
function matches(error, expected) {
  if (expected === undefined) return true;
  if (expected instanceof RegExp) return expected.test(error?.message ?? String(error));
  if (typeof expected === "function") {
    if (expected.prototype !== undefined && (expected === Error || expected.prototype instanceof Error)) {
      return error instanceof expected;
    }
    return expected(error) === true;
  }
  if (typeof expected === "object" && expected !== null) {
    return Object.keys(expected).every((k) => {
      const want = expected[k];
      const got = error?.[k];
      return want instanceof RegExp && typeof got === "string" ? want.test(got) : deepEqualValues(got, want);
    });
  }
  throw new AssertionError(`unsupported expectation ${show(expected)}`);
}

function fail(message, fallback) {
  throw new AssertionError(typeof message === "string" ? message : fallback);
}

const assert = {
  ok(value, message) {
    if (!value) fail(message, `expected a truthy value, got ${show(value)}`);
  },
  equal(actual, expected, message) {
    if (!Object.is(actual, expected)) fail(message, `expected ${show(expected)}, got ${show(actual)}`);
  },
  notEqual(actual, expected, message) {
    if (Object.is(actual, expected)) fail(message, `expected anything but ${show(expected)}`);
  },
  deepEqual(actual, expected, message) {
    if (!deepEqualValues(actual, expected)) fail(message, `expected ${show(expected)}, got ${show(actual)}`);
  },
  match(actual, regexp, message) {
    if (!regexp.test(actual)) fail(message, `expected ${show(actual)} to match ${regexp}`);
  },
  throws(f, expected, message) {
    try {
      f();
    } catch (error) {
      if (!matches(error, expected)) fail(message, `unexpected error ${error?.name}: ${error?.message}`);
      return;
    }
    fail(message, "missing expected exception");
  },
  async rejects(promise, expected, message) {
    try {
      await (typeof promise === "function" ? promise() : promise);
    } catch (error) {
      if (!matches(error, expected)) fail(message, `unexpected rejection ${error?.name}: ${error?.message}`);
      return;
    }
    fail(message, "missing expected rejection");
  },
  async doesNotReject(promise) {
    await (typeof promise === "function" ? promise() : promise);
  },
  doesNotThrow(f) {
    f();
  },
};

export default assert;
