// Command-line parsing for keel-lock's bin: node:util's parseArgs (no dependency to install or
// audit), plus what it leaves to its caller — durations, whole numbers, the `--` before COMMAND
// and the help texts. Every bad input becomes a UsageError: one line on stderr and exit 64.
import { parseArgs } from "node:util";

export const EXIT = Object.freeze({
  usage: 64,
  unavailable: 69,
  internal: 70,
  busy: 75,
  lost: 76,
});

export class UsageError extends Error {
  name = "UsageError";
}

const EXIT_CODES = `Exit status:
  COMMAND's own          its exit code, or 128 + the signal number that killed it
  0                      inspect, watch, release: done
  1                      release --force: declined at the prompt
  64                     bad usage (unknown option, bad duration, bad URL or key)
  69                     store unreachable or failing, or its driver is not installed
  70                     internal error (a bug: please report it)
  75                     not acquired: the key is busy, or --timeout ran out
  76                     the lock was lost while COMMAND ran, and COMMAND was stopped`;

const STORES = `Stores (--store URL, or KEEL_LOCK_STORE), and the driver each needs installed:
  redis://[USER:PASSWORD@]HOST[:PORT][/DB], rediss://…   Redis: ioredis
  redis+cluster://HOST:PORT[,HOST:PORT…], rediss+cluster://…
                                                         Redis Cluster: ioredis
  postgres://…, postgresql://…                           PostgreSQL: pg
  sqlite:PATH                                            SQLite: better-sqlite3 (Node < 22.13)
  https://… (http://… for a local proxy)                 Upstash REST: @upstash/redis, the token
                                  in KEEL_LOCK_UPSTASH_TOKEN (or UPSTASH_REDIS_REST_TOKEN)
  none: this machine, through this user's SQLite file
    $XDG_RUNTIME_DIR/keel-lock/locks.db, else $TMPDIR/keel-lock-<uid>/locks.db`;

export const HELP = {
  main: `Usage: keel-lock <command> [options]

  keel-lock run [options] KEY -- COMMAND [ARGS…]   run COMMAND only while holding KEY
  keel-lock elect [options] KEY -- COMMAND [ARGS…] run COMMAND as KEY's leader, once elected
  keel-lock inspect KEY [--json]                   who holds KEY, for how long, who waits
  keel-lock watch KEY [--json]                     KEY's leaders as they change, until Ctrl-C
  keel-lock release --force KEY [--yes]            free a stuck KEY whoever holds it

Options for every command:
  --store URL        where locks live (default: KEEL_LOCK_STORE, else this machine)
  -h, --help         help (also: keel-lock COMMAND --help)
  -V, --version      keel-lock's version

${STORES}

${EXIT_CODES}
`,
  run: `Usage: keel-lock run [options] KEY -- COMMAND [ARGS…]

Runs COMMAND while holding KEY, kept alive until COMMAND exits, then released at once.
COMMAND gets KEEL_LOCK_KEY and KEEL_LOCK_FENCE (pass the fence to what it writes).

Options (times in ms, or with a unit: 500ms, 5s, 2m, 1h):
  --ttl TIME         the hold's time to live, renewed every third of it (default 30s)
  --timeout TIME     wait this long for KEY (default 0: try once)
  --limit N          a semaphore: up to N holders at once
  --permits P        take P of the N permits (with --limit; default 1)
  --shared           a read lock: shared with other --shared runs, never with a plain run
  --metadata TEXT    what inspect shows of this holder (default: host, pid and command line)
  --grace TIME       after SIGTERM, wait this long before SIGKILL (default the lesser of 10s and
                     a third of --ttl; at most a third of --ttl)
  --quiet            no status line while waiting
  --json             tell what happens as JSON lines on stderr
  --store URL        where locks live

When the lock is lost, COMMAND's whole process group gets SIGTERM, then SIGKILL, all of it
before the lost hold's TTL could let another holder in. SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to keel-lock are passed on to COMMAND.

${EXIT_CODES}
`,
  elect: `Usage: keel-lock elect [options] KEY -- COMMAND [ARGS…]

Waits to lead KEY (first come, first served), then runs COMMAND as the leader until it exits.
COMMAND gets KEEL_LOCK_KEY and KEEL_LOCK_FENCE. Lost leadership stops COMMAND as a lost lock does.

Options: --ttl TIME, --metadata TEXT, --grace TIME, --quiet, --json, --store URL (as for run).

${EXIT_CODES}
`,
  inspect: `Usage: keel-lock inspect KEY [--json] [--store URL]

Prints who holds KEY (metadata, fence, time left) and how many wait; --json prints the
library's inspect() answer.

${EXIT_CODES}
`,
  watch: `Usage: keel-lock watch KEY [--json] [--store URL]

Prints KEY's leader each time it changes, one line each (JSON with --json), until interrupted.

${EXIT_CODES}
`,
  release: `Usage: keel-lock release --force KEY [--yes] [--json] [--store URL]

Frees KEY whoever holds it, for an operator clearing a stuck lock. Asks first on a terminal
unless --yes. The holder is not stopped by this: a keel-lock run holding KEY notices at its next
renewal and stops its COMMAND.

${EXIT_CODES}
`,
};

const common = {
  store: { type: "string" },
  help: { type: "boolean", short: "h" },
  json: { type: "boolean" },
};
const supervised = {
  ...common,
  ttl: { type: "string" },
  metadata: { type: "string" },
  grace: { type: "string" },
  quiet: { type: "boolean", short: "q" },
};
const OPTIONS = {
  run: { ...supervised, timeout: { type: "string" }, limit: { type: "string" }, permits: { type: "string" }, shared: { type: "boolean" } },
  elect: supervised,
  inspect: common,
  watch: common,
  release: { ...common, force: { type: "boolean" }, yes: { type: "boolean", short: "y" } },
};
export const COMMANDS = Object.keys(OPTIONS);

const UNITS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const MAX_MS = 2 ** 31 - 1;

/** `5000`, `5000ms`, `5s`, `1.5m`, `2h` → whole ms (fractions round up), within 0..2^31 − 1. */
export function duration(name, text, { min = 0 } = {}) {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text);
  if (!match) throw new UsageError(`--${name}: ${JSON.stringify(text)} is not a duration (say 500, 500ms, 5s, 2m or 1h)`);
  const ms = Math.ceil(Number(match[1]) * UNITS[match[2] ?? "ms"]);
  if (ms < min || ms > MAX_MS) {
    throw new UsageError(`--${name}: ${text} is out of range (${min} ms to ${MAX_MS} ms)`);
  }
  return ms;
}

function count(name, text, max = 2 ** 32 - 1) {
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > max) {
    throw new UsageError(`--${name}: ${JSON.stringify(text)} is not a whole number from 1 to ${max}`);
  }
  return Number(text);
}

/**
 * The words before the command (`--store`, `--help`, `--version`), the command, and its words.
 * Options may also come after the command name; the command's parser sees those.
 */
export function splitCommand(argv) {
  const global = { store: undefined, help: false, version: false };
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i];
    if (word === "-h" || word === "--help") global.help = true;
    else if (word === "-V" || word === "--version") global.version = true;
    else if (word === "--store") {
      if (i + 1 >= argv.length) throw new UsageError("--store needs a URL");
      global.store = argv[++i];
    } else if (word.startsWith("--store=")) global.store = word.slice("--store=".length);
    else if (word.startsWith("-")) throw new UsageError(`unknown option ${word} before the command (see keel-lock --help)`);
    else {
      if (!COMMANDS.includes(word)) throw new UsageError(`unknown command ${JSON.stringify(word)} (commands: ${COMMANDS.join(", ")})`);
      return { global, command: word, rest: argv.slice(i + 1) };
    }
  }
  return { global, command: undefined, rest: [] };
}

/** A command's words → its options, KEY, and COMMAND (for run and elect). */
export function parseCommand(command, rest) {
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: OPTIONS[command], allowPositionals: true, strict: true, tokens: true });
  } catch (error) {
    // parseArgs's messages are one line but name Node's own advice; keep the first sentence.
    throw new UsageError(`${command}: ${String(error.message).split(/\. |\n/)[0]}`);
  }
  const { values, positionals, tokens } = parsed;
  if (values.help) return { help: true, values };
  const terminator = tokens.find((token) => token.kind === "option-terminator");
  // parseArgs puts what follows `--` among the positionals: split them at the terminator.
  const before = terminator ? tokens.filter((t) => t.kind === "positional" && t.index < terminator.index).length : positionals.length;
  const words = positionals.slice(0, before);
  const argv = positionals.slice(before);
  const takesCommand = command === "run" || command === "elect";
  if (words.length === 0) throw new UsageError(`${command}: missing KEY (see keel-lock ${command} --help)`);
  if (takesCommand) {
    if (words.length > 1) throw new UsageError(`${command}: missing -- between KEY and COMMAND (keel-lock ${command} KEY -- COMMAND)`);
    if (!terminator || argv.length === 0) throw new UsageError(`${command}: missing -- COMMAND after KEY`);
  } else {
    if (words.length > 1 || terminator) throw new UsageError(`${command}: takes one KEY, got ${words.length + argv.length} words`);
  }
  const options = { key: words[0], argv, json: Boolean(values.json), store: values.store };
  if (command === "release") {
    if (!values.force) throw new UsageError("release: needs --force (a run releases its own key when COMMAND exits)");
    options.yes = Boolean(values.yes);
  }
  if (takesCommand) Object.assign(options, supervisedOptions(command, values));
  return { help: false, options };
}

function supervisedOptions(command, values) {
  const ttlMs = values.ttl === undefined ? 30_000 : duration("ttl", values.ttl, { min: 1 });
  // The grace fits in the third of the TTL left between the last renewal a holder made in time
  // and the moment its hold could run out (see stopDeadlines in supervise.js).
  const maxGrace = Math.floor(ttlMs / 3);
  const graceMs = values.grace === undefined ? Math.min(10_000, maxGrace) : duration("grace", values.grace);
  if (graceMs > maxGrace) {
    throw new UsageError(`--grace: ${values.grace} is more than a third of --ttl (${maxGrace} ms); raise --ttl or lower --grace`);
  }
  const options = { ttlMs, graceMs, metadata: values.metadata, quiet: Boolean(values.quiet) };
  if (command === "run") {
    options.timeoutMs = values.timeout === undefined ? 0 : duration("timeout", values.timeout);
    if (values.shared && values.limit !== undefined) throw new UsageError("--shared and --limit cannot go together (a read lock or a semaphore)");
    options.shared = Boolean(values.shared);
    options.limit = values.limit === undefined ? undefined : count("limit", values.limit);
    if (values.permits !== undefined) {
      if (options.limit === undefined) throw new UsageError("--permits needs --limit");
      options.permits = count("permits", values.permits, options.limit);
    }
  }
  return options;
}
