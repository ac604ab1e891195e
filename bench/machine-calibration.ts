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

// A python3 -S whose children write one byte to each of 256 pages they share with it (a copy-on-write
// fault each), against children that exit at once. Unlike a fault on fresh memory, a copy-on-write fault
// also copies the page and flushes its old mapping from the TLB; the flush is what a paravirtualized guest
// pays the hypervisor for, and it is most of what a warm execution costs beyond its interpreter's work.
const COW_FAULT = `
import os, resource
pages, n = 256, 60
buf = bytearray(pages * 4096)
for i in range(0, len(buf), 4096): buf[i] = 1
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
def run(write):
    c0 = cpu()
    for _ in range(n):
        if os.fork() == 0:
            if write:
                for i in range(0, len(buf), 4096): buf[i] = 2
            os._exit(0)
        os.wait()
    return (cpu() - c0) / n
run(True); run(False)
costs = sorted(run(True) - run(False) for _ in range(3))
print(costs[1] * 1e6 / pages)
`;

/** Microseconds per copy-on-write fault in a forked python3 -S child (median of three rounds); NaN if it fails. */
export function cowFaultMicros(python: string): number {
  const r = spawnSync(python, ["-S", "-c", COW_FAULT], { encoding: "utf8", timeout: 60_000 });
  const us = Number(r.stdout?.trim());
  return r.status === 0 && Number.isFinite(us) ? us : Number.NaN;
}
