// The calls DurableObjectLockStore makes to a LockDurableObject stub.

/**
 * `stub[name](...args)`: a method call on the stub, as a JS caller makes it (not through
 * `Reflect` or `Function.prototype.call`: on an RPC stub, `.call` is itself a remote property).
 */
export function rpc(stub, name, ...args) {
  return stub[name](...args);
}
