// Hold metadata as the stores in this folder take it: an optional string given at acquisition,
// at most MAX_METADATA_BYTES of UTF-8, kept in the hold's row and shown by inspect(key). The core
// checks it before it calls a store; these checks guard a store called directly, with the same
// limit.

/** Longest metadata accepted, in bytes of UTF-8. */
export const MAX_METADATA_BYTES = 1024;

/** The length of `text` in UTF-8 (a lone surrogate counts as U+FFFD, three bytes, as it is sent). */
export function utf8Length(text) {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit < 0xdc00 && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next < 0xe000) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

/**
 * One hold's metadata as `who` takes it: undefined → null (none), a string of at most
 * MAX_METADATA_BYTES bytes of UTF-8 → itself; a longer string is a RangeError, anything else a
 * TypeError.
 */
export function checkMetadata(who, metadata) {
  if (metadata === undefined) return null;
  if (typeof metadata !== "string") {
    throw new TypeError(`${who}: metadata must be a string or undefined, got ${metadata === null ? "null" : typeof metadata}`);
  }
  // Every UTF-16 unit is at most 3 bytes: only a long string needs counting.
  if (metadata.length * 3 > MAX_METADATA_BYTES) {
    const bytes = utf8Length(metadata);
    if (bytes > MAX_METADATA_BYTES) {
      throw new RangeError(`${who}: metadata must be at most ${MAX_METADATA_BYTES} bytes of UTF-8, got ${bytes}`);
    }
  }
  return metadata;
}

/**
 * acquireMany's metadata: undefined → null (none for any key), or an array of one string or
 * undefined per key (`count` of them) → the same with null for undefined.
 */
export function checkMetadataList(who, metadata, count) {
  if (metadata === undefined) return null;
  if (!Array.isArray(metadata)) {
    throw new TypeError(`${who}: metadata must be an array (one string or undefined per key) or undefined, got ${metadata === null ? "null" : typeof metadata}`);
  }
  if (metadata.length !== count) {
    throw new RangeError(`${who}: metadata must hold one entry per key (${count}), got ${metadata.length}`);
  }
  const list = Array.from(metadata, (one) => checkMetadata(who, one));
  return list.every((one) => one === null) ? null : list;
}
