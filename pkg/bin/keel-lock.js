#!/usr/bin/env node
// keel-lock on the command line: run a command only while holding a key, lead with one, and see
// or free who holds what. A thin layer over keel-lock's public API and its stores (pkg/cli/).
import { readFileSync } from "node:fs";
import { EXIT, HELP, UsageError, parseCommand, splitCommand } from "../cli/options.js";
import { say } from "../cli/output.js";

async function main(argv) {
  const { global, command, rest } = splitCommand(argv);
  if (global.version) {
    const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    process.stdout.write(`keel-lock ${version}\n`);
    return 0;
  }
  if (command === undefined) {
    if (global.help) {
      process.stdout.write(HELP.main);
      return 0;
    }
    throw new UsageError("missing command (see keel-lock --help)");
  }
  const parsed = parseCommand(command, rest);
  if (parsed.help || global.help) {
    process.stdout.write(HELP[command]);
    return 0;
  }
  const options = parsed.options;
  // Loaded only now, so that --help and bad usage answer without loading the wasm or a driver.
  const [{ openStore }, { trackDeadlines }, api] = await Promise.all([
    import("../cli/stores.js"),
    import("../cli/deadline.js"),
    import("../node/index.mjs"),
  ]);
  const opened = await openStore(options.store ?? global.store ?? process.env.KEEL_LOCK_STORE);
  const tracker = trackDeadlines(opened.store);
  api.setLockStore(tracker.store);
  try {
    switch (command) {
      case "run":
        return await (await import("../cli/hold.js")).run(api, tracker, options);
      case "elect":
        return await (await import("../cli/hold.js")).elect(api, tracker, options);
      case "inspect":
        return await (await import("../cli/operator.js")).inspect(api, options);
      case "watch":
        return await (await import("../cli/operator.js")).watch(api, options);
      case "release":
        return await (await import("../cli/operator.js")).release(api, options);
    }
  } finally {
    await Promise.resolve(opened.close()).catch(() => {});
  }
  return EXIT.internal;
}

function failure(error) {
  if (error instanceof UsageError) {
    say(error.message);
    return EXIT.usage;
  }
  if (typeof error?.exitCode === "number") {
    say(error.message);
    return error.exitCode;
  }
  // A store call that failed outside a run (inspect, watch, release): the store is the suspect.
  if (error?.name === "LockStoreTimeoutError" || error?.code || /ECONN|timeout|closed/i.test(String(error?.message))) {
    say(`store failed: ${error.message}`);
    return EXIT.unavailable;
  }
  say(`internal error: ${error?.stack ?? error}`);
  return EXIT.internal;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => process.exit(failure(error)),
);
