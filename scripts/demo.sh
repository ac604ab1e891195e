#!/usr/bin/env bash
# The demo from a fresh clone: installs what is missing (nats-server, bubblewrap, OpenBLAS, npm
# packages + native kernels), builds, then trains the demo config end to end with its own nats-server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run build --silent
exec node bin/rollstream.js train "${1:-examples/demo.yaml}" --fresh
