// Hold metadata: the optional string a caller gives at acquisition (who holds the lock, since
// when, from where), kept by the store with the hold and answered by `inspect(key)`. The checks
// here are shared by the stores in this folder; the core enforces the same limit before it calls
// a store, so these guard a store called directly.

/** Longest metadata accepted, in bytes of UTF-8. */
export const MAX_METADATA_BYTES = 1024;

/** Bytes of UTF-8 in `text` (a lone surrogate counts as the 3 bytes of U+FFFD it is sent as). */
export function utf8Length(text) {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) continue;
    if (unit < 0x800) bytes += 1;
    else if (unit >= 0xd800 && unit < 0xdc00 && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 2; // a surrogate pair: 4 bytes for its 2 units
      i++;
    } else bytes += 2;
  }
  return bytes;
}

/**
 * `metadata` as an acquiring method of `who` (e.g. "redisLockStore.acquire") takes it: undefined
 * (none), or a string of at most MAX_METADATA_BYTES bytes of UTF-8 (longer: RangeError); anything
 * else is a TypeError.
 */
export function checkMetadata(who, metadata) {
  if (metadata === undefined) return;
  if (typeof metadata !== "string") {
    throw new TypeError(`${who}: metadata must be a string, got ${metadata === null ? "null" : typeof metadata}`);
  }
  // Up to 341 UTF-16 units are at most 1023 bytes: only longer strings are counted.
  if (metadata.length > MAX_METADATA_BYTES / 3) {
    const bytes = utf8Length(metadata);
    if (bytes > MAX_METADATA_BYTES) {
      throw new RangeError(`${who}: metadata must be at most ${MAX_METADATA_BYTES} bytes of UTF-8, got ${bytes}`);
    }
  }
}

/**
 * acquireMany's `metadata`: undefined, or an array of one string-or-undefined per key (`count`
 * of them; another length is a RangeError), each checked as checkMetadata checks one.
 */
export function checkMetadataList(who, list, count) {
  if (list === undefined) return;
  if (!Array.isArray(list)) {
    throw new TypeError(`${who}: metadata must be an array of one string (or undefined) per key, got ${list === null ? "null" : typeof list}`);
  }
  if (list.length !== count) {
    throw new RangeError(`${who}: metadata must hold one entry per key (${count}), got ${list.length}`);
  }
  for (let i = 0; i < count; i++) checkMetadata(`${who} (metadata[${i}])`, list[i]);
}
