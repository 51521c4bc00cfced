// The package's API tests that need nothing of Node, bundled by Vite with `node:test`,
// `node:assert/strict` and `node:module` replaced by the shims beside this file, and run in a
// browser: the results land in `window.__keelResults`.
import { run } from "./node-test.mjs";
import "../suite.test.mjs";
import "../shared.test.mjs";
import "../multi.test.mjs";
import "../inspect.test.mjs";
import "../operations.test.mjs";
import "../handing-over.test.mjs";
import "../abort.test.mjs";
import "../watching.test.mjs";
import "../tokens.test.mjs";

// The tests name their keys after the process.
globalThis.process ??= { pid: 0 };

run().then(
  (results) => {
    window.__keelResults = results;
    document.getElementById("out").textContent = JSON.stringify(results, null, 1);
  },
  (error) => {
    window.__keelResults = [{ name: "the runner", ok: false, error: String(error?.stack ?? error) }];
  },
);
