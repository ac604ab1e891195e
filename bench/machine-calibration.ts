// What this machine's process primitives cost, measured in the benchmark's own run. A warm sandbox
// execution is a fork of a warm interpreter that takes ~230 copy-on-write faults and exits; a bare
// `python3 -c` is an exec and a full interpreter start. On a virtual machine whose page tables the
// hypervisor shadows, faults, forks and exits trap to it, and what they cost moves from day to day far
// more than plain computation does: so does the ratio between the two. These figures say which kind of day it was.
import { spawnSync } from "node:child_process";

const PAGE = 4096;

/**
 * Microseconds per page fault: filling a freshly mapped buffer (a fault per page, plus the writes) minus
 * filling it again (the writes alone), over its pages; the median of `rounds` fresh buffers.
 */
export function pageFaultMicros(bytes = 64 * 1024 * 1024, rounds = 5): number {
  const costs: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // allocUnsafeSlow: a buffer of its own, not from the pool; at this size malloc maps it fresh (untouched).
    const buf = Buffer.allocUnsafeSlow(bytes);
    const t0 = performance.now();
    buf.fill(r + 1);
    const first = performance.now() - t0;
    const t1 = performance.now();
    buf.fill(r + 2);
    const again = performance.now() - t1;
    costs.push(((first - again) * 1000) / (bytes / PAGE));
  }
  costs.sort((a, b) => a - b);
  return costs[Math.floor(costs.length / 2)]!;
}

// A python3 -S that forks children which exit at once: the floor of any fork-per-execution design.
const FORK_EXIT = `
import os, resource
def cpu(w):
    r = resource.getrusage(w)
    return r.ru_utime + r.ru_stime
for _ in range(20):
    if os.fork() == 0: os._exit(0)
    os.wait()
n, c0, s0 = 200, cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
for _ in range(n):
    if os.fork() == 0: os._exit(0)
    os.wait()
print((cpu(resource.RUSAGE_CHILDREN) - c0 + cpu(resource.RUSAGE_SELF) - s0) * 1000 / n)
`;

/** CPU milliseconds (parent and child) for a python3 -S to fork a child that exits at once; NaN if it fails. */
export function forkExitCpuMs(python: string): number {
  const r = spawnSync(python, ["-S", "-c", FORK_EXIT], { encoding: "utf8", timeout: 60_000 });
  const ms = Number(r.stdout?.trim());
  return r.status === 0 && Number.isFinite(ms) ? ms : Number.NaN;
}
