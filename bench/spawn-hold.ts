// How long starting a process holds the caller's event loop: node's spawn (a fork, which copies every page
// table of the caller first) against posix_spawn (the sandbox's rs_spawn addon), at the caller's own size
// and again with `ballastMb` more of touched memory, the case of a sandbox embedded in a large process.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { NativeChild } from "../sandbox/native-spawn.js";

async function holdMs(native: boolean, n: number): Promise<number> {
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const c = native
      ? new NativeChild("/bin/true", [], { fds: 5, extraFd: null })
      : spawn("/bin/true", [], { stdio: ["ignore", "pipe", "pipe", "pipe", "pipe"], detached: true, env: {} });
    ts.push(performance.now() - t);
    await once(c, "close");
  }
  ts.sort((a, b) => a - b);
  return ts[Math.floor(n / 2)]!;
}

export interface SpawnHold {
  rssMb: number;
  nodeMs: number;
  nativeMs: number;
}

/** p50 of `n` starts each way, alternating, at this process's size plus `extraMb` of touched memory. */
export async function spawnHold(extraMb: number, n = 30): Promise<SpawnHold> {
  const ballast = Buffer.alloc(extraMb * 1024 * 1024, 1);
  const node1 = await holdMs(false, n);
  const native1 = await holdMs(true, n);
  const node2 = await holdMs(false, n);
  const native2 = await holdMs(true, n);
  const rssMb = Math.round(process.memoryUsage().rss / 1048576);
  ballast.fill(0); // keeps it alive (and touched) to here
  return { rssMb, nodeMs: Math.min(node1, node2), nativeMs: Math.min(native1, native2) };
}
