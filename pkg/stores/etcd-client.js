// The HTTP side of keel-lock/etcd: etcd's v3 JSON gateway over fetch. Every request is
// `POST <endpoint>/v3/<service>/<method>` with a JSON body; keys and values travel as base64 and
// int64 fields come back as decimal strings (false, 0 and empty fields are left out of replies).
// Nothing here is Node-only: fetch, AbortSignal.timeout, btoa/atob and TextEncoder/TextDecoder
// exist in Node, Deno, Bun, browsers and Workers.
//
// Endpoints and failover. One endpoint is current; a request goes there. When it cannot be
// reached or answers "unavailable" (a timeout, a reset connection, HTTP 5xx or 429: no leader, a
// leader change, an overloaded member), the next endpoint becomes current and:
//   - a request that was never sent (the connection was refused, the name did not resolve) is
//     sent to the next endpoint, whatever it is;
//   - a request that changes nothing or may be repeated (range, lease grant / keep-alive /
//     revoke / time-to-live, authenticate) is sent again to the next endpoint;
//   - a transaction that writes is NEVER sent again: it may have applied. The call rejects with an
//     EtcdStoreError whose `outcomeUnknown` is true, and the store reads the key back to decide
//     (see etcd.js).
// A call keeps trying (every endpoint in turn, pausing 50..400 ms after each full round) for at
// most three times the request timeout; each request is cut off after `timeoutMs`.
//
// Authentication: with `auth: { username, password }` the client asks /v3/auth/authenticate for a
// token before its first request and sends it in the `Authorization` header; a token etcd no
// longer accepts is replaced once and the request, refused before it did anything, sent again.
// No error message or property carries the password or the token.

/** An error from etcd or from talking to it. `etcdCode` is etcd's gRPC status code, if it sent one. */
export class EtcdStoreError extends Error {
  constructor(message, { cause, status, etcdCode, endpoint, outcomeUnknown = false } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "EtcdStoreError";
    this.status = status ?? null;
    this.etcdCode = etcdCode ?? null;
    this.endpoint = endpoint ?? null;
    this.outcomeUnknown = outcomeUnknown;
  }
}

// gRPC status codes etcd answers with.
export const NOT_FOUND = 5;
const UNAUTHENTICATED = 16;
const INVALID_ARGUMENT = 3;

// Connection failures in which the request never left: safe to send anywhere else.
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

/** A string as etcd's gateway takes bytes: its UTF-8, base64. */
export function b64(text) {
  const bytes = encoder.encode(text);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** The end of the key range that starts with `prefix` (its last byte + 1; our prefixes end in "/"). */
export function rangeEndOf(prefix) {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

/** Bytes from etcd's gateway (base64) as a string (UTF-8). */
export function unb64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return decoder.decode(bytes);
}

/** An int64 field of a reply (a decimal string, or absent for 0) as a JS number; `what` names it in errors. */
export function int64(value, what, { signed = false } = {}) {
  if (value === undefined || value === null) return 0;
  const text = typeof value === "number" ? String(value) : value;
  if (typeof text !== "string" || !(signed ? /^-?\d{1,20}$/ : /^\d{1,20}$/).test(text)) {
    throw new EtcdStoreError(`etcd answered ${what} as ${JSON.stringify(value)}: not an integer`);
  }
  return Number(text);
}

/** The endpoint URLs as given (a string or an array of them), checked and without a trailing slash. */
export function checkEndpoints(who, endpoints) {
  const list = typeof endpoints === "string" ? [endpoints] : endpoints;
  if (!Array.isArray(list) || list.length === 0) {
    throw new TypeError(`${who}: endpoints must be a non-empty array of http:// or https:// URLs, got ${describe(endpoints)}`);
  }
  return list.map((endpoint) => {
    if (typeof endpoint !== "string") throw new TypeError(`${who}: each endpoint must be a URL string, got ${describe(endpoint)}`);
    let url;
    try {
      url = new URL(endpoint);
    } catch {
      throw new TypeError(`${who}: endpoint ${JSON.stringify(endpoint)} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`${who}: endpoint ${url.origin === "null" ? JSON.stringify(endpoint) : url.origin} must be http:// or https://`);
    }
    if (url.username || url.password) {
      // Never echo it: it holds a secret.
      throw new TypeError(`${who}: an endpoint URL must not carry credentials; pass options.auth instead`);
    }
    if (url.search || url.hash) throw new TypeError(`${who}: endpoint ${url.origin} must have no query or fragment`);
    return url.origin + url.pathname.replace(/\/+$/, "");
  });
}

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return typeof value;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function failureCode(error) {
  let e = error;
  for (let depth = 0; e && depth < 4; depth++, e = e.cause) {
    if (typeof e.code === "string") return e.code;
  }
  return null;
}

/**
 * The client one store uses. `call(path, body, { write })` answers the parsed reply or throws an
 * EtcdStoreError; with `write: true` a request whose outcome is unknown is not sent again.
 */
export function etcdClient({ who, endpoints, auth, fetch: fetchFn, timeoutMs }) {
  const doFetch = fetchFn ?? ((url, init) => globalThis.fetch(url, init));
  let current = 0;
  let token = null; // the current auth token's promise, or null
  const budgetMs = 3 * timeoutMs;

  // One request to one endpoint: { ok: reply } or { fail: "not-sent" | "unavailable", error } or throws (definitive).
  async function once(endpoint, path, body, headers) {
    let response;
    let text;
    try {
      response = await doFetch(endpoint + path, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
      text = await response.text();
    } catch (error) {
      const code = failureCode(error);
      const what = error?.name === "TimeoutError" || error?.name === "AbortError" ? `no answer within ${timeoutMs} ms` : `${error?.message ?? error}${code ? ` (${code})` : ""}`;
      return { fail: NOT_SENT.has(code) ? "not-sent" : "unavailable", error: new EtcdStoreError(`${endpoint}: ${what}`, { cause: error, endpoint }) };
    }
    let reply;
    try {
      reply = JSON.parse(text);
    } catch {
      reply = undefined;
    }
    const isObject = reply !== null && typeof reply === "object" && !Array.isArray(reply);
    if (response.ok) {
      // Every reply of etcd's v3 gateway has a header (keep-alive's: inside `result`).
      const inner = isObject && reply.result && typeof reply.result === "object" ? reply.result : reply;
      if (isObject && inner.header && typeof inner.header === "object") return { ok: reply };
      if (isObject && reply.error && typeof reply.error === "object") {
        // A streamed method's error, inside a 200 reply.
        return errorReply(endpoint, path, response.status, reply.error);
      }
      throw notEtcd(endpoint, path, response, text);
    }
    if (isObject && typeof (reply.message ?? reply.error) === "string" && reply.code !== undefined) {
      return errorReply(endpoint, path, response.status, reply);
    }
    if (response.status >= 500 || response.status === 429) {
      return { fail: "unavailable", error: new EtcdStoreError(`${endpoint}: HTTP ${response.status} to ${path}`, { status: response.status, endpoint }) };
    }
    throw notEtcd(endpoint, path, response, text);
  }

  function errorReply(endpoint, path, status, reply) {
    const message = String(reply.message ?? reply.error);
    const etcdCode = Number(reply.code);
    const error = new EtcdStoreError(`etcd at ${endpoint} refused ${path}: ${message}`, { status, etcdCode, endpoint });
    if (etcdCode === UNAUTHENTICATED) return { fail: "token", error };
    if (status >= 500 || status === 429 || etcdCode === 14 || etcdCode === 4) return { fail: "unavailable", error };
    if (etcdCode === INVALID_ARGUMENT && /user name is empty/.test(message)) {
      throw new EtcdStoreError(`etcd at ${endpoint} requires authentication: pass options.auth ({ username, password })`, {
        status,
        etcdCode,
        endpoint,
      });
    }
    throw error;
  }

  function notEtcd(endpoint, path, response, text) {
    const type = response.headers?.get?.("content-type") ?? "no content type";
    const start = text.slice(0, 80).replace(/\s+/g, " ");
    return new EtcdStoreError(
      `${endpoint} is not etcd's v3 JSON gateway (etcd 3.4 or later): POST ${path} answered HTTP ${response.status} (${type}) ${JSON.stringify(start)}`,
      { status: response.status, endpoint },
    );
  }

  async function authenticate() {
    const reply = await send("/v3/auth/authenticate", { name: auth.username, password: auth.password }, { write: false, authRequest: true }).catch(
      (error) => {
        if (error.etcdCode === INVALID_ARGUMENT || error.etcdCode === 9) {
          throw new EtcdStoreError(
            `etcd refused the credentials of user ${JSON.stringify(auth.username)} (authentication failed: wrong user name or password, or auth is not enabled)`,
            { status: error.status, etcdCode: error.etcdCode, endpoint: error.endpoint },
          );
        }
        throw error;
      },
    );
    if (typeof reply.token !== "string" || reply.token.length === 0) {
      throw new EtcdStoreError(`etcd answered /v3/auth/authenticate for user ${JSON.stringify(auth.username)} without a token`);
    }
    return reply.token;
  }

  function tokenNow() {
    if (token === null) {
      const pending = authenticate();
      token = pending;
      pending.catch(() => {
        if (token === pending) token = null; // the next call asks again
      });
    }
    return token;
  }

  async function send(path, body, { write = false, authRequest = false } = {}) {
    const started = Date.now();
    const failures = new Map();
    let renewed = false;
    let misses = 0;
    for (let round = 0; ; ) {
      const headers = { "content-type": "application/json" };
      let used = null;
      if (auth && !authRequest) {
        used = tokenNow();
        headers.authorization = await used;
      }
      const index = current;
      const endpoint = endpoints[index];
      const result = await once(endpoint, path, body, headers);
      if (result.ok) return result.ok;
      if (result.fail === "token") {
        // Refused before it did anything: a new token, once per call.
        if (!auth || authRequest || renewed) {
          throw auth ? result.error : new EtcdStoreError(`etcd at ${endpoint} requires authentication: pass options.auth ({ username, password })`, { endpoint });
        }
        renewed = true;
        if (token === used) token = null;
        continue;
      }
      failures.set(endpoint, result.error.message);
      if (current === index) current = (index + 1) % endpoints.length;
      if (write && result.fail === "unavailable") {
        throw new EtcdStoreError(`${result.error.message}; the transaction may or may not have applied`, {
          cause: result.error,
          endpoint,
          outcomeUnknown: true,
          status: result.error.status,
          etcdCode: result.error.etcdCode,
        });
      }
      misses++;
      if (Date.now() - started >= budgetMs) {
        throw new EtcdStoreError(`${who}: no etcd endpoint answered ${path} within ${budgetMs} ms: ${[...failures.values()].join("; ")}`, {
          cause: result.error,
        });
      }
      if (misses % endpoints.length === 0) {
        round++;
        await sleep(Math.min(400, 50 * 2 ** (round - 1)));
      }
    }
  }

  // A streamed call (a watch): the response of POST `path` on the current endpoint, whose body
  // carries one JSON message per line; `signal` ends it. Refused or unreachable: the next endpoint
  // becomes current and it throws (the caller looks again and opens another).
  async function open(path, body, signal) {
    const headers = { "content-type": "application/json" };
    if (auth) headers.authorization = await tokenNow();
    const endpoint = endpoints[current];
    const moveOn = () => {
      if (endpoints[current] === endpoint) current = (current + 1) % endpoints.length;
    };
    let response;
    try {
      response = await doFetch(endpoint + path, { method: "POST", headers, body: JSON.stringify(body), signal });
    } catch (error) {
      if (!signal.aborted) moveOn();
      throw new EtcdStoreError(`${endpoint}: ${error?.message ?? error}`, { cause: error, endpoint });
    }
    if (!response.ok || !response.body) {
      const text = await response.text().catch(() => "");
      if (response.status === 401 && auth) token = null;
      moveOn();
      throw response.status >= 500 || response.status === 401 || response.status === 429
        ? new EtcdStoreError(`${endpoint}: HTTP ${response.status} to ${path}`, { status: response.status, endpoint })
        : notEtcd(endpoint, path, response, text);
    }
    return response;
  }

  return { call: send, open, endpoints };
}
