// The operator's commands: inspect (the library's inspect), watch (observe) and release --force
// (forceRelease). Their answers go to stdout — they are what was asked for.
import { createInterface } from "node:readline/promises";
import { UsageError } from "./options.js";
import { describeHolder, say } from "./output.js";

function handleFor(api, key) {
  try {
    return api.lock(key);
  } catch (error) {
    throw new UsageError(`bad KEY ${JSON.stringify(key)}: ${error.message}`);
  }
}

export async function inspect(api, o) {
  const info = await handleFor(api, o.key).inspect();
  if (o.json) {
    process.stdout.write(JSON.stringify(info) + "\n");
    return 0;
  }
  const lines = [info.held ? `${o.key}: held` : `${o.key}: free`];
  for (const holder of info.holders) lines.push(`  ${describeHolder(holder)}`);
  lines.push(`  waiting: ${info.waiting === null ? "unknown (this store's waiters poll)" : info.waiting}`);
  process.stdout.write(lines.join("\n") + "\n");
  return 0;
}

export async function watch(api, o) {
  handleFor(api, o.key);
  const controller = new AbortController();
  const stop = () => controller.abort();
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.once(signal, stop);
  try {
    for await (const leader of api.observe(o.key, { signal: controller.signal })) {
      const at = new Date().toISOString();
      if (o.json) process.stdout.write(JSON.stringify({ at, key: o.key, leader }) + "\n");
      else if (leader === null) process.stdout.write(`${at} ${o.key}: nobody leads\n`);
      else {
        const fence = leader.fence === null ? "" : ` (fence ${leader.fence})`;
        process.stdout.write(`${at} ${o.key}: ${leader.metadata ?? "(no metadata)"}${fence}\n`);
      }
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  }
  return 0;
}

export async function release(api, o) {
  const handle = handleFor(api, o.key);
  if (!o.yes) {
    if (!process.stdin.isTTY || !process.stderr.isTTY) {
      throw new UsageError("release --force: not on a terminal, so cannot ask: add --yes");
    }
    const info = await handle.inspect();
    if (!info.held) {
      say(`${o.key} is not held`);
      return 0;
    }
    const holders = info.holders.map(describeHolder).join("; ");
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await rl.question(`keel-lock: free ${o.key}, held by ${holders}? [y/N] `);
    rl.close();
    if (!/^y(es)?$/i.test(answer.trim())) {
      say("not freed");
      return 1; // declined: nothing done, and no usage error either
    }
  }
  const freed = await handle.forceRelease();
  if (o.json) process.stdout.write(JSON.stringify({ key: o.key, released: freed }) + "\n");
  else say(freed ? `freed ${o.key}` : `${o.key} was not held`);
  return 0;
}
