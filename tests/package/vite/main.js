import * as keel from "keel-lock";
import * as testing from "keel-lock/testing";
import { instrumentKeelLock } from "keel-lock/otel";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { smoke } from "../smoke.mjs";

smoke(keel, testing, { instrumentKeelLock, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor }).then(
  (r) => { window.__keelResult = r; document.getElementById("out").textContent = JSON.stringify(r); },
  (e) => { window.__keelResult = { error: String(e && e.stack || e) }; },
);
