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
