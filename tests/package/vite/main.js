import * as keel from "keel-lock";
import * as testing from "keel-lock/testing";
import { smoke } from "../smoke.mjs";

smoke(keel, testing).then(
  (r) => { window.__keelResult = r; document.getElementById("out").textContent = JSON.stringify(r); },
  (e) => { window.__keelResult = { error: String(e && e.stack || e) }; },
);
