// `node:module` in a browser: nothing to require, so a test's look at the Node glue finds nothing
// (the checks that need it run under Node).
export const createRequire = () => () => ({});
