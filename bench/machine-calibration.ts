// What this machine's process primitives cost, measured in the benchmark's own run. A warm sandbox
// execution is a fork of a warm interpreter that takes ~230 copy-on-write faults and exits; a bare
// `python3 -c` is an exec and a full interpreter start. On a virtual machine whose page tables the
// hypervisor shadows, faults, forks and exits trap to it, and what they cost moves from day to day far
// more than plain computation does: so does the ratio between the two. These figures say which kind of day it was.
import { spawn, spawnSync } from "node:child_process";

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

// Two python3 -S loops that count what they get done in \`seconds\`, started together on a signal. FORK_LOOP
// forks children that each write one byte to 160 pages they share with it (an execution's copy-on-write
// faults) and exit; COMPUTE_LOOP only computes, the control. Run alone and then one per core: on bare metal
// or hardware-assisted paging both scale with the cores; on a guest whose hypervisor shadows page tables the
// forks contend for it, and 2 cores fork little more than one.
const LOOP_PRELUDE = `
import os, sys, time
buf = bytearray(160 * 4096)
for i in range(0, len(buf), 4096): buf[i] = 1
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
n, end = 0, time.monotonic() + float(sys.argv[1])
`;
const FORK_LOOP = `${LOOP_PRELUDE}
while time.monotonic() < end:
    if os.fork() == 0:
        for i in range(0, len(buf), 4096): buf[i] = 2
        os._exit(0)
    os.wait()
    n += 1
print(n)
`;
const COMPUTE_LOOP = `${LOOP_PRELUDE}
while time.monotonic() < end:
    for i in range(1000): pass
    n += 1
print(n)
`;

/** Rounds/s of `script` summed over `procs` python3 -S processes started together; NaN if one fails. */
async function roundsPerSecond(python: string, script: string, procs: number, seconds: number): Promise<number> {
  const children = Array.from({ length: procs }, () => spawn(python, ["-S", "-c", script, String(seconds)], { stdio: ["pipe", "pipe", "ignore"] }));
  const outputs = children.map((c) => {
    let out = "";
    // A loop that cannot start (no such interpreter) counts as done: its NaN says so.
    c.on("error", () => undefined);
    c.stdin.on("error", () => undefined);
    const done = new Promise<string>((ok) => c.on("close", () => ok(out)));
    const ready = new Promise<void>((ok) => {
      c.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes("ready")) ok();
      });
      void done.then(() => ok());
    });
    return { ready, done };
  });
  await Promise.race([Promise.all(outputs.map((o) => o.ready)), new Promise((ok) => setTimeout(ok, 10_000))]);
  for (const c of children) c.stdin.end("go\n");
  const counts = (await Promise.all(outputs.map((o) => o.done))).map((o) => Number(o.trim().split("\n").at(-1) || Number.NaN));
  return counts.every(Number.isFinite) ? counts.reduce((a, b) => a + b, 0) / seconds : Number.NaN;
}

/**
 * How much more `script` gets done on `cores` cores than on one: alone and together, alternated three times,
 * each side its best round (a round on this kind of guest can lose a third of its time to the host).
 */
async function scaling(python: string, script: string, cores: number, seconds: number): Promise<{ one: number; all: number; ratio: number }> {
  let one = Number.NEGATIVE_INFINITY;
  let all = Number.NEGATIVE_INFINITY;
  for (let round = 0; round < 3; round++) {
    one = Math.max(one, await roundsPerSecond(python, script, 1, seconds));
    all = Math.max(all, await roundsPerSecond(python, script, cores, seconds));
  }
  return { one, all, ratio: all / one };
}

/**
 * How fork-and-copy work scales with the cores (forks/s alone and one loop per core), and plain computation
 * for comparison. A warm execution is the first kind of work; a bare interpreter start is mostly the second.
 */
export async function forkScaling(python: string, cores: number, seconds = 1) {
  return { forks: await scaling(python, FORK_LOOP, cores, seconds), compute: await scaling(python, COMPUTE_LOOP, cores, seconds) };
}
