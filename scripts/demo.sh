#!/usr/bin/env bash
# `make demo`: build the package (pkg/dist, including the workerd build) and run the demo on
# LOCAL workerd: two Workers "charge invoice 42" through the Durable Object lock store.
# No account, no network. The older in-process demo still runs with `node examples/node-demo.mjs`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/build-pkg.sh >/dev/null
[ -d examples/workers/node_modules/miniflare ] || (cd examples/workers && npm ci --no-audit --no-fund --loglevel=error)
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
node examples/workers/run-demo.mjs
cat <<'MSG'
Poke it yourself:  examples/workers/node_modules/.bin/wrangler dev --local --ip 127.0.0.1 --port 8787 --show-interactive-dev-session=false
                   curl -X POST 127.0.0.1:8787/charge; curl 127.0.0.1:8787/ledger
In-process (memory store) demo: node examples/node-demo.mjs
MSG
