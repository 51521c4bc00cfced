// keel-lock/redis: the names the store and its Lua scripts both build (the scripts have them
// written in by scripts/generate-redis-scripts.mjs).

// Every hand-over under prefix P is published on the channel P + CHANNEL.
export const CHANNEL = "keel-lock:handover";
// A lock's watch set, and the channel its exclusive holder changes are published on while
// someone watches it, is named by its lock name followed by this.
export const WATCH_SUFFIX = ":watch";
