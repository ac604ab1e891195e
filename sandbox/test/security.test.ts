// Attacks against the real service (real nats-server, real bubblewrap). Each one must fail, be
// reported with the right flag where there is one, and leave the service serving the next request.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { assertHealthy, describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

let fx: SandboxFixture;

/** Host processes whose command line contains `needle` (the sandbox cannot hide from the host's /proc). */
function hostProcessesMatching(needle: string): number[] {
  const found: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, "utf8").includes(needle)) found.push(Number(p));
    } catch {
      /* exited meanwhile */
    }
  }
  return found;
}

// Every attack runs against the default sandbox and against one that gives each execution fresh namespaces
// (isolation.freshNamespaces), where the sandbox-wide filter leaves unshare and mount to the supervisor.
for (const freshNamespaces of [false, true])
  describe(`sandbox security${freshNamespaces ? " (fresh namespaces per execution)" : ""}`, { timeout: 60_000 }, () => {
    before(async () => {
      fx = await startSandboxFixture({ poolSize: 2, isolation: { freshNamespaces } });
      assert.equal(fx.service.stats().isolation_fresh_namespaces, freshNamespaces ? 1 : 0, "the isolation asked for is in force");
    });
    after(async () => {
      await fx?.stop();
    });

    it("cannot open network connections: loopback (the test's NATS port) and an outside address", async () => {
      const code = `
import socket
for host, port in [("127.0.0.1", ${fx.nats.port}), ("192.0.2.1", 80)]:
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect((host, port))
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__)
print(open("/proc/net/dev").read().count(":"), "interfaces")
`;
      const r = await fx.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 0, describeResult(r));
      assert.doesNotMatch(r.stdout, /CONNECTED/);
      assert.match(r.stdout, /blocked 127\.0\.0\.1/);
      assert.match(r.stdout, /blocked 192\.0\.2\.1/);
      assert.match(r.stdout, /^1 interfaces$/m, "only loopback exists in the sandbox's network namespace");
      const n = await fx.client.exec({
        language: "node",
        code: `const s = require("net").connect(${fx.nats.port}, "127.0.0.1"); s.on("connect", () => { console.log("CONNECTED"); process.exit(0); }); s.on("error", (e) => console.log("blocked", e.code));`,
      });
      assert.match(n.stdout, /blocked/, describeResult(n));
      await assertHealthy(fx.client);
    });

    it("cannot read host files: the project, /etc/shadow, /root, the service's runtime folder", async () => {
      const paths = [`${process.cwd()}/package.json`, "/work/main/package.json", "/etc/shadow", "/root/.bashrc", "/root", "/home", "/var/log"];
      const code = `
import os
for p in ${JSON.stringify(paths)}:
    try:
        if os.path.isdir(p):
            print("LISTED", p, os.listdir(p)[:3])
        else:
            open(p).read(1)
            print("READ", p)
    except OSError as e:
        print("denied", p, type(e).__name__)
`;
      const r = await fx.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 0, describeResult(r));
      assert.doesNotMatch(r.stdout, /READ|LISTED/, r.stdout);
      assert.equal(r.stdout.trim().split("\n").length, paths.length);
      await assertHealthy(fx.client);
    });

    it("cannot see another sandbox's work dir", async () => {
      const a = await fx.client.openSession();
      const b = await fx.client.openSession();
      try {
        const w = await a.exec({ language: "bash", code: "echo s3cr3t-a > /workspace/secret-a.txt && echo s3cr3t-a > /tmp/secret-a.txt && echo ok" });
        assert.equal(w.stdout, "ok\n", describeResult(w));
        const code = `
import os
hits = []
for top in ["/workspace", "/tmp", "/dev/shm", "/", "/proc"]:
    for root, dirs, files in os.walk(top):
        if root.startswith("/proc/") and root.count("/") > 3:
            dirs[:] = []
        if root.startswith("/usr"):
            dirs[:] = []
            continue
        hits += [os.path.join(root, f) for f in files if "secret-a" in f]
print("hits", sorted(set(hits)))
`;
        const r = await b.exec({ language: "python", code });
        assert.equal(r.exitCode, 0, describeResult(r));
        assert.equal(r.stdout.trim(), "hits []");
        const again = await a.exec({ language: "bash", code: "cat /workspace/secret-a.txt" });
        assert.equal(again.stdout, "s3cr3t-a\n", "the owner still sees its own file");
      } finally {
        await a.close();
        await b.close();
      }
      await assertHealthy(fx.client);
    });

    it("cannot write outside the work dir (and what it writes there dies with the sandbox)", async () => {
      const targets = ["/usr/evil", "/etc/evil", "/evil", "/.rs/supervisor.py", "/dev/evil", "/proc/evil"];
      const code = `
for p in ${JSON.stringify(targets)}:
    try:
        open(p, "w").write("x")
        print("WROTE", p)
    except OSError as e:
        print("denied", p, type(e).__name__)
open("/workspace/mine.txt", "w").write("ok")
open("/tmp/mine.txt", "w").write("ok")
print("work dir ok")
`;
      const r = await fx.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 0, describeResult(r));
      assert.doesNotMatch(r.stdout, /WROTE/, r.stdout);
      assert.match(r.stdout, /work dir ok/);
      const next = await fx.client.exec({ language: "bash", code: "ls /workspace /tmp; test -e /workspace/mine.txt && echo LEAKED || echo fresh" });
      assert.match(next.stdout, /fresh/, "a one-shot request gets a fresh sandbox");
      await assertHealthy(fx.client);
    });

    it("a fork bomb is capped by the process limit and contained by the wall clock", async () => {
      const counted = await fx.client.exec({
        language: "python",
        code: `
import os, time
n = 0
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped at", n, type(e).__name__)
`,
        limits: { maxProcesses: 32, wallMs: 5000 },
      });
      const m = /stopped at (\d+)/.exec(counted.stdout);
      assert.ok(m, describeResult(counted));
      assert.ok(Number(m[1]) <= 32, `forked ${m[1]} processes with maxProcesses 32`);
      const t0 = Date.now();
      const bomb = await fx.client.exec({
        language: "python",
        code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        limits: { wallMs: 1500 },
      });
      assert.equal(bomb.timedOut, true, describeResult(bomb));
      assert.ok(Date.now() - t0 < 10_000, "the bomb was stopped promptly");
      await assertHealthy(fx.client);
    });

    it("a memory bomb hits the memory limit and is reported as out of memory", async () => {
      const py = await fx.client.exec({ language: "python", code: "a = []\nwhile True:\n    a.append(bytearray(16 << 20))", limits: { memoryMb: 256 } });
      assert.equal(py.outOfMemory, true, describeResult(py));
      assert.notEqual(py.exitCode, 0);
      const big = await fx.client.exec({ language: "python", code: "x = bytearray(64 << 30)" });
      assert.equal(big.outOfMemory, true, describeResult(big));
      const js = await fx.client.exec({ language: "node", code: "const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1));", limits: { memoryMb: 256 } });
      assert.equal(js.outOfMemory, true, describeResult(js));
      await assertHealthy(fx.client);
    });

    it("an infinite loop is killed at the wall limit and flagged timedOut", async () => {
      const t0 = Date.now();
      const r = await fx.client.exec({ language: "python", code: "while True:\n    pass", limits: { wallMs: 1000 } });
      assert.equal(r.timedOut, true, describeResult(r));
      assert.equal(r.exitCode, null);
      assert.ok(r.wallMs >= 950 && r.wallMs < 3000, `wallMs ${r.wallMs}`);
      // CPU time depends on what else the (shared) machine runs; that it was counted at all is the point.
      assert.ok(r.cpuMs > 50, `the loop's CPU time is reported (${r.cpuMs} ms)`);
      assert.ok(Date.now() - t0 < 5000);
      const cpu = await fx.client.exec({ language: "node", code: "for(;;){}", limits: { cpuMs: 1000, wallMs: 20_000 } });
      assert.equal(cpu.timedOut, true, `CPU limit: ${describeResult(cpu)}`);
      await assertHealthy(fx.client);
    });

    it("a flood of output is cut at maxOutputBytes, killed, and flagged outputTruncated", async () => {
      const t0 = Date.now();
      const r = await fx.client.exec({ language: "python", code: "while True:\n    print('x' * 1000)", limits: { maxOutputBytes: 10_000, wallMs: 20_000 } });
      assert.equal(r.outputTruncated, true, describeResult(r));
      assert.ok(r.stdout.length <= 10_000 && r.stdout.length > 5_000, `kept ${r.stdout.length} bytes`);
      assert.equal(r.timedOut, false);
      assert.ok(Date.now() - t0 < 5000, "killed as soon as the cap was passed, not at the wall limit");
      const e = await fx.client.exec({ language: "bash", code: "yes error >&2", limits: { maxOutputBytes: 4096, wallMs: 20_000 } });
      assert.equal(e.outputTruncated, true, describeResult(e));
      assert.ok(e.stderr.length <= 4096);
      await assertHealthy(fx.client);
    });

    it("cannot see or signal host processes, nor the supervisor", async () => {
      const code = `
import os, signal
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids", pids)
print("comms", [open("/proc/%d/comm" % p).read().strip() for p in pids])
print("self", os.getpid())
for pid in (${process.pid}, ${fx.nats.process.pid}):
    try:
        os.kill(pid, signal.SIGKILL)
        print("KILLED", pid)
    except OSError as e:
        print("no such process", pid, type(e).__name__)
try:
    open("/proc/1/fd/4", "wb")
    print("OPENED supervisor control channel")
except OSError as e:
    print("supervisor fds denied", type(e).__name__)
try:
    os.kill(1, signal.SIGKILL)  # dropped by the kernel (pid 1 of the namespace has no handler)
except PermissionError:
    pass  # or refused: with perExecutionUid the execution is another uid than the supervisor's
print("supervisor survives")
`;
      const r = await fx.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 0, describeResult(r));
      const pids = JSON.parse(/pids (\[.*\])/.exec(r.stdout)?.[1] ?? "null") as number[];
      // Its own pid namespace: pid 1 is the supervisor, the rest is this program (a reused sandbox's pid
      // numbers keep growing, so they are checked by what they are, not by being small).
      const comms = JSON.parse((/comms (\[.*\])/.exec(r.stdout)?.[1] ?? "null").replace(/'/g, '"')) as string[];
      const self = Number(/self (\d+)/.exec(r.stdout)?.[1]);
      assert.ok(pids.length <= 3 && pids[0] === 1 && pids.includes(self), `sandbox sees only its own processes: ${pids}`);
      assert.deepEqual(
        comms.filter((c, i) => pids[i] !== self && c !== "rs-supervisor"),
        [],
        `nothing but the supervisor and the program: ${comms}`,
      );
      assert.doesNotMatch(r.stdout, /KILLED|OPENED/);
      assert.match(r.stdout, /supervisor survives/);
      assert.equal(fx.nats.process.exitCode, null, "nats-server still running");
      // kill(-1) from inside reaches only the sandbox's own processes, never pid 1 (the supervisor).
      const all = await fx.client.exec({
        language: "python",
        code: "import os, signal, subprocess\np = subprocess.Popen(['sleep', '30'])\nos.kill(-1, signal.SIGKILL)\nprint('child', p.wait())",
      });
      assert.equal(all.stdout, "child -9\n", describeResult(all));
      await assertHealthy(fx.client);
    });

    it("refuses privilege tricks: nested namespaces, mount, ptrace", async () => {
      const code = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("unshare", libc.unshare(0x10000000), ctypes.get_errno())
print("mount", libc.mount(b"none", b"/workspace", b"tmpfs", 0, None), ctypes.get_errno())
print("ptrace", libc.ptrace(16, 1, None, None), ctypes.get_errno())
print("caps", [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1])
`;
      const r = await fx.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 0, describeResult(r));
      assert.match(r.stdout, /^unshare -1 /m);
      assert.match(r.stdout, /^mount -1 /m);
      assert.match(r.stdout, /^ptrace -1 /m);
      assert.match(r.stdout, /^caps 0000000000000000$/m);
      await assertHealthy(fx.client);
    });

    it("a background child does not survive the request", async () => {
      const marker = `31337.${process.pid}`;
      const r = await fx.client.exec({
        language: "python",
        code: `
import os, subprocess
subprocess.Popen(["sleep", "${marker}"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "${marker}"])
    os._exit(0)
print("started")
`,
      });
      assert.equal(r.stdout, "started\n", describeResult(r));
      let left = hostProcessesMatching(marker);
      for (let i = 0; i < 20 && left.length; i++) {
        await sleep(50);
        left = hostProcessesMatching(marker);
      }
      assert.deepEqual(left, [], "no process of the request is left on the host");
      const s = await fx.client.openSession();
      try {
        await s.exec({ language: "bash", code: `(sleep ${marker} &) ; echo bg` });
        const next = await s.exec({
          language: "python",
          code: `import os\nn = 0\nfor p in os.listdir("/proc"):\n    try:\n        n += "${marker}" in open("/proc/%s/cmdline" % p).read()\n    except OSError:\n        pass\nprint(n)`,
        });
        assert.equal(next.stdout, "0\n", `session commands do not leave processes behind: ${describeResult(next)}`);
      } finally {
        await s.close();
      }
      await assertHealthy(fx.client);
    });
  });
