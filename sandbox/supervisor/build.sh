#!/usr/bin/env bash
# Builds the sandbox's in-sandbox native code, run by `npm ci` (package.json "install"); the service refuses
# to start without it.
#   build/forkserver.so  the supervisor's per-execution loop in C (forkserver.c). It needs no Python headers:
#                        the few C-API functions it calls are resolved against the sandbox's interpreter when
#                        the supervisor loads it.
#   build/nodefork.node  the node fork server's addon (nodefork.c): N-API, built against the headers of the
#                        node that runs npm (the same binary the sandbox runs by default).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build
"${CC:-cc}" -O2 -Wall -Wextra -Werror -shared -fPIC -o build/forkserver.so.tmp forkserver.c
mv build/forkserver.so.tmp build/forkserver.so
NODE_INCLUDE="$(node -p "require('path').resolve(process.execPath, '../../include/node')" 2>/dev/null || true)"
if [ ! -f "$NODE_INCLUDE/node_api.h" ] || [ ! -f "$NODE_INCLUDE/uv.h" ]; then
  echo "rollstream: no node headers at $NODE_INCLUDE; the node fork server (build/nodefork.node) is not built (node's official builds ship them in include/node beside bin/)" >&2
  exit 1
fi
"${CC:-cc}" -O2 -Wall -Wextra -Werror -shared -fPIC -I"$NODE_INCLUDE" -o build/nodefork.node.tmp nodefork.c
mv build/nodefork.node.tmp build/nodefork.node
