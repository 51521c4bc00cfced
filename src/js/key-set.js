// What makes a set of keys one multi-key lock takes, for the JS face and for the JS stores
// (pkg/stores/ gets a generated copy: scripts/generate-shared-js.mjs): its size limit and the
// order its keys are taken in. Plain JS with no imports, so that both can load it.

/** The most keys one multi-key lock takes: the core's limit (`MultiLock`'s `MAX_KEYS`). */
export const MAX_KEYS = 64;

/**
 * Orders two strings by code point — the order of their UTF-8 bytes, in which the Rust core
 * sorts keys — so JS and Rust callers of one store take shared keys in the same order.
 */
export function byCodePoint(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    // Code units order code points except where a surrogate (half of one above U+FFFF) meets a
    // unit from U+E000 up: lift surrogates above those.
    if (x >= 0xd800 && y >= 0xd800) {
      x += x >= 0xe000 ? -0x800 : 0x2000;
      y += y >= 0xe000 ? -0x800 : 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}
