#!/usr/bin/env bash
# Builds the sandbox supervisor's per-execution loop in C (forkserver.c -> build/forkserver.so), run by
# `npm ci` (package.json "install"). It needs no Python headers: the few C-API functions it calls are
# resolved against the sandbox's interpreter when the supervisor loads it. Without it, sandboxes run
# the same loop in Python (slower: see forkserver.c).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build
"${CC:-cc}" -O2 -Wall -Wextra -Werror -shared -fPIC -o build/forkserver.so.tmp forkserver.c
mv build/forkserver.so.tmp build/forkserver.so
# The node fork server's addon (nodefork.c): N-API, built against the headers of the node that runs npm
# (the same binary the sandbox runs by default). Without them, each node execution starts a node.
NODE_INCLUDE="$(node -p "require('path').resolve(process.execPath, '../../include/node')" 2>/dev/null || true)"
if [ -f "$NODE_INCLUDE/node_api.h" ] && [ -f "$NODE_INCLUDE/uv.h" ]; then
  "${CC:-cc}" -O2 -Wall -Wextra -Werror -shared -fPIC -I"$NODE_INCLUDE" -o build/nodefork.node.tmp nodefork.c
  mv build/nodefork.node.tmp build/nodefork.node
else
  echo "rollstream: no node headers at $NODE_INCLUDE; the node fork server is not built (each node execution starts a node)"
fi
