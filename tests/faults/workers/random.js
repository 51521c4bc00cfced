// mulberry32: a small seeded generator, so a run's choices repeat for a seed (its timing does
// not). Shared by the Node side of the fault suite and the Worker, which is bundled from this
// folder.
export function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
