#!/usr/bin/env bash
# Packs what `rollstream bench transport` needs to run on a machine with no Node and no network (the
# device machine: 16 cores, where the 2-core limit of this bench does not apply) into .carry/:
#   node.xz                    this machine's node binary
#   nats-server.xz             this machine's nats-server
#   transport-bench.tar.xz     dist/ (bench, streams, deploy) + the node_modules the bench imports
# Then, on the device: run(command="bash bench/device/transport.sh", carry=[".carry"]).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f dist/bench/transport.js ] || npm run build --silent
mkdir -p .carry
[ -s .carry/node.xz ] && [ .carry/node.xz -nt "$(command -v node)" ] || xz -T0 -c "$(command -v node)" > .carry/node.xz
nats=$(command -v nats-server || true)
[ -n "$nats" ] || { echo "pack-transport-bench: nats-server not found (bash scripts/setup.sh installs it)" >&2; exit 1; }
xz -T0 -c "$nats" > .carry/nats-server.xz
# Only what the bench's imports reach: the NATS client, Arrow and everything they depend on.
mapfile -t mods < <(node -e '
  const fs = require("fs"), seen = new Set(), todo = ["@nats-io/transport-node", "@nats-io/jetstream", "apache-arrow"];
  while (todo.length) {
    const name = todo.pop();
    if (seen.has(name)) continue;
    seen.add(name);
    const pkg = JSON.parse(fs.readFileSync(`node_modules/${name}/package.json`, "utf8"));
    for (const d of Object.keys(pkg.dependencies ?? {})) if (fs.existsSync(`node_modules/${d}/package.json`)) todo.push(d);
  }
  for (const n of [...seen].sort()) console.log(`node_modules/${n}`);')
tar -cJf .carry/transport-bench.tar.xz package.json dist/bench dist/streams dist/deploy "${mods[@]}"
du -ch .carry/node.xz .carry/nats-server.xz .carry/transport-bench.tar.xz | tail -1
