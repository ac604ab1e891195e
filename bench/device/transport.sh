#!/usr/bin/env bash
# Runs `rollstream bench transport` on the device machine (16 cores; no Node, no nats-server there) from
# what scripts/pack-transport-bench.sh put in .carry/. Prints the bench's lines; the last is its JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"
xz -dc .carry/node.xz > "$work/bin/node"
xz -dc .carry/nats-server.xz > "$work/bin/nats-server"
chmod +x "$work/bin/node" "$work/bin/nats-server"
tar -xJf .carry/transport-bench.tar.xz -C "$work"
export PATH="$work/bin:$PATH"
export NATS_SERVER_BIN="$work/bin/nats-server"
echo "cpus: $(nproc)  node: $(node --version)  nats-server: $(nats-server --version)"
cd "$work"
node dist/bench/transport.js "$@"
