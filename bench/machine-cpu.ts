// What the whole machine's CPUs did, for benchmarks that must tell their own work from a neighbour's, or count
// the CPU an operation costs across every process it involves (a sandbox execution: client, service, sandbox).
import { readFileSync } from "node:fs";

/** CPU-seconds busy on the whole machine (all cores, from /proc/stat), or NaN where there is no /proc. */
export function machineBusySeconds(): number {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
    return (user + nice + system + irq + softirq + steal) / 100; // USER_HZ
  } catch {
    return Number.NaN;
  }
}

/** Runs `fn` and returns what it returned, with the CPU-seconds the whole machine was busy meanwhile. */
export async function machineCpuDuring<T>(fn: () => Promise<T>): Promise<{ value: T; busySeconds: number }> {
  const busy0 = machineBusySeconds();
  const value = await fn();
  return { value, busySeconds: machineBusySeconds() - busy0 };
}
