// A set's first attempt over a JS store with `acquireMany`, made through the keys' own handles.

import { releaseLateGrant } from "./promises.js";

/**
 * The handles of a set's keys are bound to `binding`, a copy of the store whose `acquire` is
 * collected while `take` runs them, and the collected calls are answered together from one
 * `acquireMany`. Each handle keeps all it does for a single key (its owner token, the bound on
 * its call, releasing a grant that lands late).
 */
export class OneStep {
  #calls = null;
  #store;

  constructor(store) {
    this.#store = store;
    const collect = this;
    this.binding = {
      ...store,
      acquire(key, owner, ttlMs, ...said) {
        if (collect.#calls === null) return store.acquire.call(this, key, owner, ttlMs, ...said);
        return new Promise((resolve, reject) => collect.#calls.push({ key, owner, ttlMs, metadata: said[0], resolve, reject }));
      },
    };
  }

  /**
   * Acquires every handle of `locks` at once, their calls answered by one `acquireMany`:
   * `true` when all are held; `false` (none held) when refused; `null` (none held) when the
   * store cannot take this set in one step.
   */
  async take(locks, metadata) {
    this.#calls = [];
    let outcomes;
    const calls = this.#calls;
    const options = metadata === undefined ? undefined : { metadata };
    try {
      outcomes = Promise.allSettled(locks.map((lock) => lock.acquire(options)));
    } finally {
      this.#calls = null;
    }
    // A handle that made no call synchronously (it had nothing to send) leaves the step
    // incomplete: it is answered as refused, and the keys are taken one by one.
    let oneStep = calls.length === locks.length;
    if (oneStep) oneStep = await this.#send(calls);
    else for (const call of calls) call.resolve(false);
    const results = await outcomes;
    let failed;
    let all = true;
    const held = [];
    for (let i = 0; i < results.length; i++) {
      const r = results[i];
      if (r.status === "rejected") failed ??= [r.reason];
      else if (r.value) held.push(locks[i]);
      else all = false;
    }
    if (failed === undefined && all) return true;
    // A partial set (only a store answering per key can leave one) is freed whole.
    for (let i = held.length - 1; i >= 0; i--) await held[i].release().catch(() => {});
    if (failed !== undefined) throw failed[0];
    return oneStep === null ? null : false;
  }

  /** One `acquireMany` for `calls`: each call answered its key's part; null for "not one step". */
  async #send(calls) {
    const store = this.#store;
    let answer;
    try {
      const said = calls[0].metadata === undefined ? [] : [calls.map((c) => c.metadata)];
      answer = await store.object.acquireMany(
        calls.map((c) => c.key),
        calls.map((c) => c.owner),
        calls[0].ttlMs,
        ...said,
      );
    } catch (error) {
      for (const call of calls) call.reject(error);
      return true;
    }
    if (answer === null) {
      for (const call of calls) call.resolve(false);
      return null;
    }
    if (answer === false) {
      for (const call of calls) call.resolve(false);
    } else if (Array.isArray(answer) && answer.length === calls.length) {
      for (let i = 0; i < calls.length; i++) calls[i].resolve(answer[i]);
    } else {
      const error = new TypeError(
        `LockStore.acquireMany must answer false, null or an array of ${calls.length} acquire answers, got ${describe(answer)}`,
      );
      // A grant in a malformed answer is not taken: each key is given back by its own owner.
      for (const call of calls) {
        call.reject(error);
        releaseLateGrant(true, store.object, call.key, call.owner);
      }
    }
    return true;
  }
}

/** A short description of a value for an error message. */
function describe(value) {
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return value === null ? "null" : typeof value === "object" ? "an object" : `${typeof value} ${String(value)}`;
}
