#!/usr/bin/env bash
# Installs what rollstream needs on a fresh Debian/Ubuntu machine: nats-server (tests and the embedded
# run start their own), bubblewrap (the sandbox actor), OpenBLAS (optional fast matmul, loaded at run
# time), then the npm dependencies, which also compile the native kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
ldconfig -p 2>/dev/null | grep -q libopenblas || need+=(libopenblas0-pthread)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq || true
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null; then
    echo "setup: could not install ${need[*]} with apt-get; install them by hand (nats-server is required)" >&2
  fi
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
