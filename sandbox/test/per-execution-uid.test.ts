// A host uid per execution (isolation.perExecutionUid, with freshNamespaces, as root): each one-shot
// execution of a reused sandbox runs under a host uid of its own, not its sandbox's, read here from the host
// (/proc/<pid>/status), while the program inside still sees uid 65534. The supervisor keeps CAP_SETUID,
// CAP_SETGID, CAP_KILL and CAP_SYS_RESOURCE for that; no execution, session command or exec'd program has any capability,
// and nothing an execution leaves running survives it although it ran under another uid than pid 1's. The
// control is the same sandbox with perExecutionUid off, where every execution runs under the sandbox's uid.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";
import { childPids, comm, hostUid, procStat, processStatus, sandboxSupervisors } from "./proc.js";

const asRoot = process.getuid?.() === 0;
const EXEC_UID_BASE = 1_700_000_000;
const SUPERVISOR_CAPS = (1n << 5n) | (1n << 6n) | (1n << 7n) | (1n << 24n); // KILL, SETGID, SETUID, SYS_RESOURCE

/** The supervisor (pid 1 inside) of the python pool's sandbox, by its host pid (the node pool's is live too). */
async function supervisor(fx: SandboxFixture): Promise<number> {
  const sup = (await sandboxSupervisors(fx)).find((s) => s.prestart === "python");
  if (!sup) throw new Error("no live python sandbox supervisor found");
  return sup.pid;
}

/** Host pids of every process whose host uid (and pid) pass `keep`. */
function processesWhere(keep: (uid: number, pid: number) => boolean): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .map(Number)
    .filter((p) => {
      try {
        return keep(hostUid(p), p);
      } catch {
        return false; // gone meanwhile
      }
    });
}

const processesOf = (uid: number) => processesWhere((u) => u === uid);
/** The "sleep" processes of any sandbox (host uids from hostUidBase, 1500000000, up). */
const sandboxSleepers = () => processesWhere((u, p) => u >= 1_500_000_000 && comm(p) === "sleep");

/** Runs a program that sleeps, and reads the host uid of the supervisor's child (the execution) meanwhile. */
async function uidOfAnExecution(fx: SandboxFixture, sup: number): Promise<{ host: number; inside: string }> {
  const running = fx.client.exec({ language: "python", code: "import os, time\nprint(os.getuid())\ntime.sleep(1.2)" });
  await sleep(600);
  const kids = childPids(sup);
  assert.equal(kids.length, 1, `the supervisor's children while one execution runs: ${kids.join(" ")}`);
  const host = hostUid(kids[0]!);
  const r = await running;
  assert.equal(r.exitCode, 0, describeResult(r));
  return { host, inside: r.stdout.trim() };
}

const MODES = [
  { perExecutionUid: true, name: "on" },
  { perExecutionUid: false, name: "off (control)" },
];

for (const { perExecutionUid, name } of MODES) {
  describe(`perExecutionUid ${name}`, { timeout: 120_000, skip: !asRoot && "needs root (per-sandbox host uids)" }, () => {
    let fx: SandboxFixture;
    before(async () => {
      fx = await startSandboxFixture({
        poolSize: 1,
        maxConcurrent: 1,
        isolation: { freshNamespaces: true, perExecutionUid, execUidBase: EXEC_UID_BASE },
        runtimes: { node: { poolSize: 1 } },
      });
    });
    after(async () => {
      await fx?.stop();
    });

    it("reports what is in force", () => {
      assert.equal(fx.service.stats().isolation_per_execution_uid, perExecutionUid ? 1 : 0);
      assert.equal(fx.service.stats().isolation_fresh_namespaces, 1);
    });

    it(
      perExecutionUid ? "two executions of one sandbox run under two host uids, neither the sandbox's" : "executions run under the sandbox's host uid",
      async () => {
        const sup = await supervisor(fx);
        const sandboxUid = hostUid(sup);
        const a = await uidOfAnExecution(fx, sup);
        const b = await uidOfAnExecution(fx, sup);
        assert.equal(await supervisor(fx), sup, "both ran on the sandbox that was already warm");
        assert.deepEqual([a.inside, b.inside], ["65534", "65534"], "inside, the program's uid is the usual one");
        if (perExecutionUid) {
          // One fork an execution: the second ran on the warm interpreter the C loop forked right after the first
          // (a launch that fell back to the Python loop would fork again, taking one more uid).
          assert.equal(b.host - a.host, 1, `host uids ${a.host} then ${b.host}`);
          for (const u of [a.host, b.host]) {
            assert.notEqual(u, sandboxUid);
            assert.ok(u >= EXEC_UID_BASE, `execution host uid ${u} is from execUidBase on`);
          }
        } else assert.deepEqual([a.host, b.host], [sandboxUid, sandboxUid]);
      },
    );

    it("executions take the C loop's hot path: the supervisor (pid 1) copy-on-write faults little per execution", async () => {
      // The Python loop, where a launch the C loop cannot do falls back to, costs pid 1 ~130 faults an execution
      // (its objects are shared with the forked child); the C loop ~20. A per-execution uid must not force it there.
      const sup = await supervisor(fx);
      const minflt = () => procStat(sup, 7);
      await fx.client.exec({ language: "python", code: "print(1)" });
      const f0 = minflt();
      for (let i = 0; i < 10; i++) await fx.client.exec({ language: "python", code: "print(1)" });
      const perExec = (minflt() - f0) / 10;
      assert.equal(await supervisor(fx), sup, "all on one sandbox");
      assert.ok(perExec < 60, `pid 1 took ${perExec} page faults an execution`);
    });

    it("each execution gets the rlimits of its request, one after the other (set by the supervisor on its uid)", async () => {
      for (const [memoryMb, maxProcesses] of [
        [96, 7],
        [160, 11],
      ]) {
        const r = await fx.client.exec({
          language: "python",
          code: "import resource as r\nprint(r.getrlimit(r.RLIMIT_DATA)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0])",
          limits: { memoryMb, maxProcesses },
        });
        // RLIMIT_NPROC counts the program's own process too (limits.ts: maxProcesses + 1).
        assert.equal(r.stdout.trim(), `${memoryMb} ${maxProcesses + 1}`, describeResult(r));
      }
    });

    it("the supervisor holds only what switching uids needs; executions, session commands and exec'd programs hold nothing", async () => {
      const sup = processStatus(await supervisor(fx));
      // The control for the readings below: on the supervisor, the host does see capabilities.
      assert.equal(BigInt(`0x${sup["CapEff"]}`), perExecutionUid ? SUPERVISOR_CAPS : 0n, `supervisor CapEff ${sup["CapEff"]}`);
      assert.equal(BigInt(`0x${sup["CapAmb"]}`), 0n, "no ambient capabilities in the supervisor");
      assert.equal(BigInt(`0x${sup["CapInh"]}`), 0n, "no inheritable capabilities in the supervisor");
      const caps = "grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status | cut -f2 | sort -u";
      const none = "0000000000000000";
      for (const language of ["bash", "python", "node"] as const) {
        const code = {
          bash: caps,
          python: `import re\nprint("\\n".join(sorted(set(re.findall(r"^Cap(?:Inh|Prm|Eff|Amb):\\t(\\w+)", open("/proc/self/status").read(), re.M)))))`,
          node: `const t = require("fs").readFileSync("/proc/self/status", "utf8"); console.log([...new Set([...t.matchAll(/^Cap(?:Inh|Prm|Eff|Amb):\\t(\\w+)/gm)].map((m) => m[1]))].join("\\n"))`,
        }[language];
        const r = await fx.client.exec({ language, code });
        assert.equal(r.stdout.trim(), none, `${language} one-shot: ${describeResult(r)}`);
      }
      const s = await fx.client.openSession({ language: "python" });
      try {
        for (const language of ["python", "bash"] as const) {
          const r = await s.exec({
            language,
            code:
              language === "bash"
                ? caps
                : `import subprocess\nprint(subprocess.run(["sh", "-c", ${JSON.stringify(caps)}], capture_output=True, text=True).stdout.strip())`,
          });
          assert.equal(r.stdout.trim(), none, `${language} session command: ${describeResult(r)}`);
        }
      } finally {
        await s.close();
      }
    });

    it("what an execution leaves running is killed after it, under whatever uid it ran", async () => {
      const running = fx.client.exec({ language: "bash", code: "setsid sleep 300 </dev/null >/dev/null 2>&1 & disown; sleep 1.5; echo started" });
      // The positive control: while the execution runs, its daemon is there, under its uid.
      let sleepers: number[] = [];
      for (let i = 0; i < 50 && sleepers.length < 2; i++) {
        await sleep(50);
        sleepers = sandboxSleepers();
      }
      assert.equal(sleepers.length, 2, "the execution's two sleep processes, seen from the host while it runs");
      const uid = hostUid(sleepers[0]!);
      assert.equal(hostUid(sleepers[1]!), uid);
      const r = await running;
      assert.equal(r.stdout.trim(), "started", describeResult(r));
      assert.deepEqual(sandboxSleepers(), [], "left running");
      if (perExecutionUid) assert.deepEqual(processesOf(uid), [], `nothing at all left under the execution's uid ${uid}`);
      const next = await fx.client.exec({ language: "bash", code: "for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | grep -c '^sleep$' || true" });
      assert.equal(next.stdout.trim(), "0", describeResult(next));
    });
  });
}
