// Reading sandbox processes from the host's /proc, for tests that check what the kernel says rather than
// what a program inside reports.
import { readFileSync } from "node:fs";
import type { SandboxFixture } from "./fixture.js";

/** A field of a /proc/<pid>/stat text after the command name: 1 ppid, 3 session, 7 minflt (proc(5) minus 3). */
export function statField(statText: string, n: number): number {
  return Number(statText.slice(statText.lastIndexOf(")") + 2).split(" ")[n]);
}

/** That field of a live process. */
export function procStat(pid: number, n: number): number {
  return statField(readFileSync(`/proc/${pid}/stat`, "utf8"), n);
}

/** /proc/<pid>/status as a record ("Uid" -> "real effective saved fs"). */
export function processStatus(pid: number): Record<string, string> {
  return Object.fromEntries(
    readFileSync(`/proc/${pid}/status`, "utf8")
      .split("\n")
      .map((l) => l.split(":\t"))
      .filter((kv) => kv.length === 2)
      .map(([k, v]) => [k!, v!.trim()]),
  );
}

/** The real host uid of a process. */
export function hostUid(pid: number): number {
  return Number(processStatus(pid)["Uid"]!.split(/\s+/)[0]);
}

/** The children of a process. */
export function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
}

export function comm(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return ""; // gone meanwhile
  }
}

/** Every live sandbox's supervisor (pid 1 inside, bwrap's child): its host pid and what it prestarts (argv[6]). */
export async function sandboxSupervisors(fx: SandboxFixture): Promise<Array<{ pid: number; prestart: string }>> {
  const out: Array<{ pid: number; prestart: string }> = [];
  for (const bwrap of await fx.service.executor.sandboxPids())
    for (const pid of childPids(bwrap))
      if (comm(pid) === "rs-supervisor") out.push({ pid, prestart: readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[6] ?? "" });
  return out;
}
