// /proc readings the benchmarks share: a process's CPU and page-fault counters, and the processes below one.
import { readdirSync, readFileSync } from "node:fs";

export interface ProcStat {
  ppid: number;
  /** utime + stime, in clock ticks (USER_HZ, 100 a second). */
  selfTicks: number;
  /** cutime + cstime: children it has reaped. */
  childTicks: number;
  selfFaults: number;
  childFaults: number;
}

/** /proc/<pid>/stat, or null when the process has exited. */
export function procStat(pid: number): ProcStat | null {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return {
      ppid: Number(f[1]),
      selfFaults: Number(f[7]),
      childFaults: Number(f[8]),
      selfTicks: Number(f[11]) + Number(f[12]),
      childTicks: Number(f[13]) + Number(f[14]),
    };
  } catch {
    return null;
  }
}

/** Every descendant of `root`. */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    const s = procStat(Number(p));
    if (!s) continue;
    const list = children.get(s.ppid) ?? [];
    list.push(Number(p));
    children.set(s.ppid, list);
  }
  const out: number[] = [];
  const stack = [...(children.get(root) ?? [])];
  while (stack.length) {
    const p = stack.pop()!;
    out.push(p);
    stack.push(...(children.get(p) ?? []));
  }
  return out;
}
