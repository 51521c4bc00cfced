// What keel-lock itself prints. stdout belongs to COMMAND (and to inspect/watch answers);
// keel-lock's messages go to stderr, one line each, and the waiting status line only to a
// terminal, redrawn in place.

export function say(message) {
  process.stderr.write(`keel-lock: ${message}\n`);
}

function seconds(ms) {
  return ms >= 10_000 ? `${Math.round(ms / 1000)}s` : `${(ms / 1000).toFixed(1)}s`;
}

/** One holder as a person reads it: metadata, fence, time left. */
export function describeHolder(holder) {
  const who = holder.metadata === null ? "(no metadata)" : holder.metadata;
  const fence = holder.fence === null ? "" : `fence ${holder.fence}, `;
  return `${who} (${fence}${seconds(holder.remainingMs)} left)`;
}

/** The status line while waiting, on a terminal only: who holds the key, for how long, who waits. */
export class StatusLine {
  static start(api, key) {
    if (!process.stderr.isTTY) return null;
    return new StatusLine(api, key);
  }

  constructor(api, key) {
    this.key = key;
    this.since = performance.now();
    this.stopped = false;
    const look = async () => {
      let text;
      try {
        const info = await api.inspect(key);
        const holders = info.holders.map(describeHolder).join("; ") || "nobody (being handed over)";
        const waiting = info.waiting === null ? "" : `, ${info.waiting} waiting`;
        text = `waiting ${seconds(performance.now() - this.since)} for ${key}: held by ${holders}${waiting}`;
      } catch {
        text = `waiting ${seconds(performance.now() - this.since)} for ${key}`;
      }
      if (!this.stopped) process.stderr.write(`\r\x1b[Kkeel-lock: ${text.slice(0, (process.stderr.columns || 100) - 12)}`);
    };
    this.timer = setInterval(look, 1_000);
    this.timer.unref();
    look();
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    process.stderr.write("\r\x1b[K");
  }
}
