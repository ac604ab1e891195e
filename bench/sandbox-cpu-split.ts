// Where a sandbox execution's CPU goes, process by process: the client (this process), nats-server, the
// service, the sandboxes' supervisors (pid 1 of each sandbox: fork, wait, reset, report) and the executions
// (the processes they fork, reaped by their supervisor, so counted in its children's time). Page faults
// too: on a VM they are what a fork server's execution mostly costs (sandbox/README.md).
import { readFileSync } from "node:fs";
import { descendants, procStat, type ProcStat } from "./proc-stat.js";

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return "";
  }
}

/** The sandbox supervisors below `servicePid`: the python processes running supervisor.py whose parent is bwrap. */
function supervisors(servicePid: number): Map<number, ProcStat> {
  const out = new Map<number, ProcStat>();
  for (const pid of descendants(servicePid)) {
    const s = procStat(pid);
    const cmd = cmdline(pid);
    if (s && cmd.includes("supervisor.py") && !cmd.includes("bwrap") && cmdline(s.ppid).includes("bwrap")) out.set(pid, s);
  }
  return out;
}

export interface CpuSnapshot {
  client: number;
  nats: number;
  service: number;
  sup: Map<number, ProcStat>;
}

export function cpuSnapshot(servicePid: number, natsPid: number): CpuSnapshot {
  const u = process.cpuUsage();
  return {
    client: (u.user + u.system) / 1e6,
    nats: (procStat(natsPid)?.selfTicks ?? 0) / 100,
    service: (procStat(servicePid)?.selfTicks ?? 0) / 100,
    sup: supervisors(servicePid),
  };
}

export interface CpuSplit {
  client_ms: number;
  nats_ms: number;
  service_ms: number;
  supervisor_ms: number;
  execution_ms: number;
  supervisor_faults: number;
  execution_faults: number;
}

/** Per execution, between two snapshots (a supervisor started in between counts from zero: its start is in). */
export function cpuSplit(a: CpuSnapshot, b: CpuSnapshot, executions: number): CpuSplit {
  let sup = 0;
  let exe = 0;
  let supF = 0;
  let exeF = 0;
  for (const [pid, s1] of b.sup) {
    const s0 = a.sup.get(pid);
    sup += s1.selfTicks - (s0?.selfTicks ?? 0);
    exe += s1.childTicks - (s0?.childTicks ?? 0);
    supF += s1.selfFaults - (s0?.selfFaults ?? 0);
    exeF += s1.childFaults - (s0?.childFaults ?? 0);
  }
  const per = (seconds: number) => Math.round((seconds * 1e5) / executions) / 100; // ms, 2 decimals
  return {
    client_ms: per(b.client - a.client),
    nats_ms: per(b.nats - a.nats),
    service_ms: per(b.service - a.service),
    supervisor_ms: per(sup / 100),
    execution_ms: per(exe / 100),
    supervisor_faults: Math.round(supF / executions),
    execution_faults: Math.round(exeF / executions),
  };
}
