// Small statistics helpers: percentiles over pooled samples, median of per-round rates.
export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}
export function median(values) {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
export function summarize(latencies) {
  const s = Float64Array.from(latencies).sort();
  return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] };
}
export const round = (x, digits = 2) => (Number.isFinite(x) ? Number(x.toFixed(digits)) : null);
