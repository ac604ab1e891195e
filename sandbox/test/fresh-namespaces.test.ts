// Fresh namespaces per execution (isolation.freshNamespaces; needs the C loop and seccomp): each one-shot execution of a reused sandbox runs in its own mount and ipc namespaces with
// its own tmpfs /workspace, /tmp and /dev/shm, and can neither create namespaces nor mount. Its user namespace
// is the supervisor's template (entered, not made: exec-isolation.h) or, with per-execution uids, one of its
// own. The control is the same sandbox with freshNamespaces off, where two executions share them.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readlinkSync, statSync } from "node:fs";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";
import { childPids, sandboxSupervisors } from "./proc.js";
import type { SandboxLanguage } from "../../environments/api/sandbox.js";

const WHERE_AM_I = `
import os, json
ns = {n: os.readlink("/proc/self/ns/" + n) for n in ("user", "mnt", "ipc")}
mounts = {d: sum(1 for l in open("/proc/self/mountinfo") if l.split()[4] == d) for d in ("/workspace", "/tmp", "/dev/shm")}
devs = {d: os.stat(d).st_dev for d in ("/workspace", "/tmp", "/dev/shm")}
print(json.dumps({"ns": ns, "mounts": mounts, "devs": devs, "uidMap": open("/proc/self/uid_map").read().split(), "ppid": os.getppid()}))
`;

// What an execution may try to get out of its namespaces: each line says whether it worked.
const TRY_ESCAPE = `
import ctypes, os, json
libc = ctypes.CDLL(None, use_errno=True)
out = {}
out["unshareUser"] = libc.unshare(0x10000000) == 0
out["unshareMount"] = libc.unshare(0x00020000) == 0
out["setnsMount"] = libc.setns(os.open("/proc/self/ns/mnt", os.O_RDONLY), 0x00020000) == 0
os.makedirs("/tmp/m", exist_ok=True)
out["mountTmpfs"] = libc.mount(b"tmpfs", b"/tmp/m", b"tmpfs", 0, None) == 0
st = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)
out["caps"] = [st["CapEff"].strip(), st["CapPrm"].strip(), st["CapBnd"].strip(), st["CapAmb"].strip()]
print(json.dumps(out))
`;

/** How /proc shows an fd open on a namespace ("user:[4026532245]"). */
const NAMESPACE_LINK = /^(user|mnt|ipc|net|pid|uts|cgroup|time):\[\d+\]$/;

const FDS_HELD = `
import os, json
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink("/proc/self/fd/" + fd))
    except OSError:
        pass
print(json.dumps(links))
`;

interface Where {
  ns: Record<string, string>;
  mounts: Record<string, number>;
  devs: Record<string, number>;
  uidMap: string[];
  ppid: number;
  pid?: number;
}

/** Namespaces and folder devices of every live sandbox's supervisor (pid 1 inside), read from the host. */
async function supervisors(fx: SandboxFixture): Promise<Where[]> {
  const out: Where[] = [];
  for (const { pid } of await sandboxSupervisors(fx)) {
    const ns = Object.fromEntries(["user", "mnt", "ipc"].map((n) => [n, readlinkSync(`/proc/${pid}/ns/${n}`)]));
    const devs = Object.fromEntries(["/workspace", "/tmp", "/dev/shm"].map((d) => [d, statSync(`/proc/${pid}/root${d}`).dev]));
    out.push({ ns, devs, mounts: {}, uidMap: [], ppid: 0, pid });
  }
  assert.ok(out.length > 0, "no live sandbox supervisor found");
  return out;
}

/** The namespaces a process holds open (its fds), read from the host. */
function heldNamespaces(pid: number): string[] {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return []; // gone meanwhile
  }
  return fds
    .map((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        return "";
      }
    })
    .filter((l) => NAMESPACE_LINK.test(l));
}

async function whereAmI(fx: SandboxFixture): Promise<Where> {
  const r = await fx.client.exec({ language: "python", code: WHERE_AM_I });
  assert.equal(r.exitCode, 0, describeResult(r));
  return JSON.parse(r.stdout) as Where;
}

// perExecutionUid undefined: the default (on as root, where each execution unshares a user namespace of its
// own; off otherwise); false: executions enter the supervisor's template user namespace wherever the tests run.
for (const [freshNamespaces, perExecutionUid] of [
  [true, undefined],
  [true, false],
  [false, undefined],
] as const) {
  const title = freshNamespaces ? `on${perExecutionUid === false ? ", perExecutionUid off" : ""}` : "off (control)";
  describe(`one-shot executions with freshNamespaces ${title}`, { timeout: 120_000 }, () => {
    let fx: SandboxFixture;
    before(async () => {
      fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, isolation: { freshNamespaces, perExecutionUid }, runtimes: { node: { poolSize: 1 } } });
    });
    after(async () => {
      await fx?.stop();
    });

    it("reports what is in force", () => {
      assert.equal(fx.service.stats().isolation_fresh_namespaces, freshNamespaces ? 1 : 0);
    });

    it(freshNamespaces ? "two executions on one sandbox have different namespaces and folders" : "two executions on one sandbox share them", async () => {
      const s0 = fx.service.stats().sandboxes_started_total;
      const a = await whereAmI(fx);
      const b = await whereAmI(fx);
      assert.equal(fx.service.stats().sandboxes_started_total, s0, "both ran on the sandbox that was already warm");
      // Compared with the supervisors, which stay alive: the kernel recycles a namespace's inode number and a
      // tmpfs's device number once they are freed, so two executions one after the other may see equal numbers.
      // Each execution is the supervisor's own child (no long-lived middle process that could hold one set).
      const sups = await supervisors(fx);
      for (const w of [a, b]) {
        assert.equal(w.ppid, 1, "the execution is the supervisor's child");
        for (const n of ["user", "mnt", "ipc"]) {
          const shared = sups.some((s) => s.ns[n] === w.ns[n]);
          assert.equal(shared, !freshNamespaces, `${n} namespace ${w.ns[n]} ${shared ? "is" : "is not"} a supervisor's`);
        }
        for (const d of ["/workspace", "/tmp", "/dev/shm"]) {
          // Its own tmpfs over the sandbox's: two mounts there, and not the supervisor's device.
          assert.equal(w.mounts[d], freshNamespaces ? 2 : 1, `mounts at ${d}`);
          const shared = sups.some((s) => s.devs[d] === w.devs[d]);
          assert.equal(shared, !freshNamespaces, `${d} ${shared ? "is" : "is not"} a supervisor's folder`);
        }
      }
      // Without per-execution uids the user namespace is the template the supervisor holds open (the same for
      // every execution); with them, one of the execution's own. The template's fd is the supervisor's alone.
      if (freshNamespaces) {
        const perUid = fx.service.stats().isolation_per_execution_uid === 1;
        const held = sups.flatMap((s) => heldNamespaces(s.pid!));
        for (const w of [a, b]) assert.equal(held.includes(w.ns.user!), !perUid, `user namespace ${w.ns.user}; the supervisor holds ${held.join(" ")}`);
        if (!perUid) assert.equal(a.ns.user, b.ns.user);
        // Node executions are forks of the node fork server, which holds a template of its own.
        const node = await fx.client.exec({ language: "node", code: "console.log(require('fs').readlinkSync('/proc/self/ns/user'))" });
        assert.equal(node.exitCode, 0, describeResult(node));
        const heldBelow = sups.flatMap((s) => [s.pid!, ...childPids(s.pid!)]).flatMap((pid) => heldNamespaces(pid));
        assert.equal(heldBelow.includes(node.stdout.trim()), !perUid, `node's user namespace ${node.stdout.trim()}; held: ${heldBelow.join(" ")}`);
        // What the execution holds: its pipes and files, no namespace (positive control: the supervisor's list).
        assert.ok(held.some((l) => l.startsWith("user:")) || perUid, "the supervisor holds its template");
        const inside = await fx.client.exec({ language: "python", code: FDS_HELD });
        assert.equal(inside.exitCode, 0, describeResult(inside));
        assert.deepEqual(
          JSON.parse(inside.stdout).filter((l: string) => NAMESPACE_LINK.test(l)),
          [],
        );
      }
      // The execution's user namespace is a child of the sandbox's, where the program is uid 65534, or, with
      // perExecutionUid (the default as root; per-execution-uid.test.ts), a uid of its own.
      if (freshNamespaces) {
        for (const w of [a, b]) assert.deepEqual([w.uidMap[0], w.uidMap[2]], ["65534", "1"]);
        if (fx.service.stats().isolation_per_execution_uid) {
          assert.ok(Number(a.uidMap[1]) >= 100_000, `uid_map ${a.uidMap.join(" ")}`);
          assert.notEqual(a.uidMap[1], b.uidMap[1]);
        } else assert.deepEqual([a.uidMap[1], b.uidMap[1]], ["65534", "65534"]);
      } else assert.notEqual(a.uidMap[1], "65534");
    });

    it("an execution can neither create namespaces nor mount, and has no capabilities", async () => {
      const r = await fx.client.exec({ language: "python", code: TRY_ESCAPE });
      assert.equal(r.exitCode, 0, describeResult(r));
      const out = JSON.parse(r.stdout);
      assert.deepEqual(out, {
        unshareUser: false,
        unshareMount: false,
        setnsMount: false,
        mountTmpfs: false,
        caps: ["0000000000000000", "0000000000000000", "0000000000000000", "0000000000000000"],
      });
    });

    it("a session keeps one set of namespaces: its files persist across commands and languages", async () => {
      const s = await fx.client.openSession({ language: "python" });
      try {
        const a = await s.exec({ language: "python", code: "open('state.txt', 'w').write('kept'); open('/tmp/t.txt', 'w').write('tmp')" });
        assert.equal(a.exitCode, 0, describeResult(a));
        const b = await s.exec({ language: "bash", code: "cat state.txt /tmp/t.txt" });
        assert.equal(b.stdout, "kepttmp", describeResult(b));
        const c = await s.exec({ language: "node", code: "console.log(require('fs').readFileSync('state.txt', 'utf8'))", files: { "x.txt": "f" } });
        assert.equal(c.stdout, "kept\n", describeResult(c));
        const d = await s.exec({ language: "python", code: "print(open('x.txt').read())" });
        assert.equal(d.stdout, "f\n", describeResult(d));
        const e = await s.exec({ language: "python", code: TRY_ESCAPE });
        assert.deepEqual(JSON.parse(e.stdout).unshareUser, false, describeResult(e));
      } finally {
        await s.close();
      }
    });

    for (const language of ["python", "bash", "node"] as SandboxLanguage[]) {
      it(`${language}: request files reach the program, and not the next execution`, async () => {
        const read = {
          python: `print(open("data/in.txt").read())`,
          bash: `cat data/in.txt`,
          node: `console.log(require("fs").readFileSync("data/in.txt", "utf8"))`,
        }[language];
        const r = await fx.client.exec({ language, code: read, files: { "data/in.txt": `hello ${language}` } });
        assert.equal(r.exitCode, 0, describeResult(r));
        assert.equal(r.stdout.trim(), `hello ${language}`);
        const next = await fx.client.exec({ language: "python", code: `import os; print(os.path.exists("/workspace/data"))` });
        assert.equal(next.stdout.trim(), "False", describeResult(next));
      });
    }
  });
}

it("positive control for the escape probe: on the host, outside any sandbox, it reports what works", () => {
  const r = spawnSync("python3", ["-c", TRY_ESCAPE], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  // A new user namespace is allowed to an unprivileged process here (the sandbox itself needs that).
  assert.equal(out.unshareUser, true, r.stdout);
  // Re-entering its own mount namespace takes CAP_SYS_ADMIN, which root holds here.
  if (process.getuid?.() === 0) assert.equal(out.setnsMount, true, r.stdout);
});
