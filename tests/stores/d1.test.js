// databaseLockStore over Cloudflare D1, in local workerd through Miniflare. Every call crosses
// from Node into workerd's real D1 (SQLite) implementation.
import { after, before, describe } from "node:test";
import { databaseLockStore } from "../../pkg/stores/sql.js";
import { startD1 } from "./lib/servers.js";
import { newContext, registerContract } from "./lib/contract.js";
import { registerSqlTests } from "./lib/sql-suite.js";
import { registerAcquireManyTests } from "./lib/sql-multi.js";
import { registerInspectTests } from "./lib/sql-inspect.js";

let d1;
let stores;

const raw = async (sql, params) => {
  const result = await d1.db.prepare(sql).bind(...params).all();
  return result.results ?? [];
};

before(async () => {
  d1 = await startD1();
  stores = [databaseLockStore(d1.db)];
  await stores[0].createTable();
});

after(async () => {
  await d1?.stop();
});

describe("Cloudflare D1 (local workerd)", () => {
  registerContract(() => newContext(stores, "d1"));
  registerSqlTests(() => ({ dialect: "sqlite", db: d1.db, stores, raw }), { driver: "d1" });
  registerAcquireManyTests(() => ({ dialect: "sqlite", db: d1.db, stores, raw }));
  registerInspectTests(() => ({ dialect: "sqlite", db: d1.db, stores, raw }));
});
