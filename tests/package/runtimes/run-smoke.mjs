// Entry for Deno and Bun: import the installed package by name, run the smoke checks, print JSON.
import * as keel from "keel-lock";
import * as testing from "keel-lock/testing";
import { instrumentKeelLock } from "keel-lock/otel";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { smoke } from "../smoke.mjs";

console.log(JSON.stringify(await smoke(keel, testing, { instrumentKeelLock, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor })));
