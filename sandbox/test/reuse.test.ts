// A pool sandbox serves one-shot requests one after another (its supervisor is a fork server). These
// tests plant something in one execution and probe for it in the next one ON THE SAME SANDBOX (pool of
// one, one slot: the stats prove no new sandbox was started), and each probe has a positive control:
// the same probe run in the planting execution itself finds what was planted. Then: the fork server
// cannot be reached or signalled from an execution (or, where the kernel lets a same-uid process touch
// it, the change is detected and the sandbox retired), and bombs do not reach a concurrent execution.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { assertHealthy, bombsBesideVictim, describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";
import type { SandboxLanguage } from "../../environments/api/sandbox.js";

/** Runs `plant` then `probe` in the same program (positive control) and in two executions on the same sandbox. */
async function plantAndProbe(fx: SandboxFixture, lang: SandboxLanguage, plant: string, probe: string, join = "\n") {
  const control = await fx.client.exec({ language: lang, code: `${plant}${join}${probe}` });
  assert.equal(control.exitCode, 0, describeResult(control));
  const s0 = fx.service.stats();
  const planted = await fx.client.exec({ language: lang, code: plant });
  assert.equal(planted.exitCode, 0, describeResult(planted));
  const probed = await fx.client.exec({ language: lang, code: probe });
  assert.equal(probed.exitCode, 0, describeResult(probed));
  const s1 = fx.service.stats();
  assert.equal(s1.sandboxes_started_total, s0.sandboxes_started_total, "the probe ran on the sandbox the plant ran on");
  assert.equal(s1.sandboxes_retired_unclean_total, s0.sandboxes_retired_unclean_total);
  return { control: control.stdout, next: probed.stdout };
}

// Both per-execution loops of the supervisor. The C one (forkserver.c) serves one-shot python requests without
// files: with the reset alone keeping executions apart (the default), and with fresh namespaces per execution on
// top (in the supervisor's template user namespace, or, as root by default, each in a user namespace of its own).
// supervisor.py's own loop serves the rest (node, bash, requests with files, sessions): here every request
// carries a file (PYTHON_LOOP_FILE), which the C loop hands back to it.
const PYTHON_LOOP_FILE = "rs-python-loop.txt";
const LOOPS = [
  { freshNamespaces: true, name: "C loop, fresh namespaces" },
  { freshNamespaces: true, perExecutionUid: false, name: "C loop, fresh namespaces in the template user namespace" },
  { freshNamespaces: false, name: "C loop, reset only" },
  { freshNamespaces: false, pythonLoop: true, name: "Python loop: each request carries a file" },
];
for (const { freshNamespaces, perExecutionUid, pythonLoop, name } of LOOPS) {
  describe(`reused sandboxes (${name}): nothing crosses from one execution to the next`, { timeout: 120_000 }, () => {
    let fx: SandboxFixture;
    before(async () => {
      fx = await startSandboxFixture({
        poolSize: 1,
        maxConcurrent: 1,
        isolation: { freshNamespaces, perExecutionUid },
        runtimes: { node: { poolSize: 1 } },
      });
      if (pythonLoop) {
        const exec = fx.client.exec.bind(fx.client);
        fx.client.exec = (req) => exec({ ...req, files: { ...req.files, [PYTHON_LOOP_FILE]: "" } });
      }
    });
    after(async () => {
      await fx?.stop();
    });

    it("runs the loop it was asked for", async () => {
      assert.equal(fx.service.stats().isolation_fresh_namespaces, freshNamespaces ? 1 : 0);
      // The Python loop resets before it reports; the C loop reports first (reset-after-reply.test), which with
      // the reset alone (the control) is long enough here to be counted after the reply.
      const r = await fx.client.exec({ language: "python", code: "for i in range(2000):\n    open(f'/tmp/{i}', 'w').close()" });
      assert.equal(r.exitCode, 0, describeResult(r));
      await fx.client.exec({ language: "python", code: "print(1)" });
      if (pythonLoop) assert.equal(fx.service.stats().resets_after_reply_total, 0);
      else if (!freshNamespaces) assert.ok(fx.service.stats().resets_after_reply_total > 0);
    });

    it("files: in /workspace, /tmp, /dev/shm, hidden, unreadable, xattrs and times of the work dirs", async () => {
      const plant = `
import os
for d in ("/workspace", "/tmp", "/dev/shm"):
    open(d + "/leak.txt", "w").write("secret")
    open(d + "/.hidden", "w").write("secret")
    os.makedirs(d + "/deep/er", exist_ok=True)
    open(d + "/deep/er/f", "w").write("x")
    os.chmod(d + "/deep", 0)
try:
    os.setxattr("/tmp", "user.leak", b"1")
except OSError:
    pass
os.utime("/workspace", (123456, 123456))
os.chmod("/tmp", 0o700)
`;
      const probe = `
import os
found = []
for d in ("/workspace", "/tmp", "/dev/shm"):
    found += [d + "/" + n for n in os.listdir(d) if n != "${PYTHON_LOOP_FILE}"]
try:
    found += ["xattr:" + a for a in os.listxattr("/tmp")]
except OSError:
    pass
if os.stat("/workspace").st_mtime == 123456:
    found.append("mtime")
if os.stat("/tmp").st_mode & 0o7777 != 0o1777:
    found.append("mode")
print("FOUND", sorted(found))
`;
      const { control, next } = await plantAndProbe(fx, "python", plant, probe);
      assert.match(control, /leak\.txt/);
      assert.match(control, /mtime/);
      assert.match(control, /mode/);
      assert.equal(next, "FOUND []\n");
    });

    it("processes: daemons, double forks, stopped and setsid children", async () => {
      const plant = `
import os, subprocess, signal
subprocess.Popen(["sleep", "300"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "301"])
    os._exit(0)
p = subprocess.Popen(["sleep", "302"])
os.kill(p.pid, signal.SIGSTOP)
import time
time.sleep(0.3)  # the double fork's grandchild has exec'd sleep by then (for the positive control)
`;
      const probe = `
import os
me = os.getpid()
others = []
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) not in (1, me):
        try:
            others.append(open("/proc/%s/cmdline" % p).read().replace("\\0", " ").strip())
        except OSError:
            pass
print("OTHERS", sorted(o for o in others if o))
`;
      const { control, next } = await plantAndProbe(fx, "python", plant, probe);
      assert.match(control, /sleep 300/);
      assert.match(control, /sleep 301/);
      assert.equal(next, "OTHERS []\n");
    });

    it("environment variables: python, bash and node", async () => {
      const probe = `import os\nprint("ENV", os.environ.get("RS_LEAK"), "RS_LEAK" in open("/proc/self/environ").read())`;
      const py = await plantAndProbe(fx, "python", `import os\nos.environ["RS_LEAK"] = "1"\nos.putenv("RS_LEAK", "1")`, probe);
      assert.equal(py.next, "ENV None False\n");
      // The control in the same program: os.environ sees it (/proc/self/environ is fixed at exec).
      assert.match(py.control, /^ENV 1 /);
      const sh = await plantAndProbe(fx, "bash", "export RS_LEAK=1", `echo "ENV \${RS_LEAK:-none}"`, "; ");
      assert.equal(sh.control, "ENV 1\n");
      assert.equal(sh.next, "ENV none\n");
      const js = await plantAndProbe(fx, "node", "process.env.RS_LEAK = '1';", "console.log('ENV', process.env.RS_LEAK ?? 'none');");
      assert.equal(js.control, "ENV 1\n");
      assert.equal(js.next, "ENV none\n");
    });

    it("module monkey-patches and interpreter state: builtins, modules (preloaded ones too), sys.path, cwd, umask, signals, recursion limit, gc, __main__, argv, stdout", async () => {
      // gc: the supervisor freezes its objects before forking; a program may unfreeze, disable or retune the collector.
      // __main__, argv and stdout's buffering are built once in pid 1 and shared copy-on-write by every child.
      const plant = `
import builtins, gc, json, os, signal, sys, types
gc.unfreeze()
gc.disable()
gc.set_threshold(1)
json.dumps = lambda *a, **k: "PATCHED"
builtins.RS_LEAK = 1
sys.modules["rs_leak"] = types.ModuleType("rs_leak")
sys.path.append("/rs-leak")
sys.setrecursionlimit(123)
os.chdir("/tmp")
os.umask(0o077)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
import math
math.pi = 3
import traceback, typing
traceback.format_exc = lambda *a, **k: "PATCHED"
typing.List = None
RS_MAIN_LEAK = 1
sys.argv.append("rs-leak")
sys.stdout.reconfigure(line_buffering=False)
`;
      const probe = `
import builtins, gc, json, math, os, signal, sys
leaks = []
if not gc.isenabled(): leaks.append("gc.disable")
if gc.get_threshold()[0] == 1: leaks.append("gc.threshold")
if gc.get_freeze_count() == 0: leaks.append("gc.unfreeze")
if json.dumps(1) == "PATCHED": leaks.append("json.dumps")
if hasattr(builtins, "RS_LEAK"): leaks.append("builtins")
if "rs_leak" in sys.modules: leaks.append("sys.modules")
if "/rs-leak" in sys.path: leaks.append("sys.path")
if sys.getrecursionlimit() == 123: leaks.append("recursionlimit")
if os.getcwd() != "/workspace": leaks.append("cwd")
u = os.umask(0); os.umask(u)
if u == 0o077: leaks.append("umask")
if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN: leaks.append("signal")
if math.pi == 3: leaks.append("math.pi")
import traceback, typing
if traceback.format_exc() == "PATCHED": leaks.append("traceback")
if typing.List is None: leaks.append("typing")
if "RS_MAIN_LEAK" in globals() or hasattr(sys.modules["__main__"], "RS_MAIN_LEAK"): leaks.append("__main__")
if sys.argv != ["-c"]: leaks.append("argv")
if not sys.stdout.line_buffering: leaks.append("stdout")
print("LEAKS", leaks)
`;
      const { control, next } = await plantAndProbe(fx, "python", plant, probe);
      assert.equal(
        control,
        "LEAKS ['gc.disable', 'gc.threshold', 'gc.unfreeze', 'json.dumps', 'builtins', 'sys.modules', 'sys.path', 'recursionlimit', 'cwd', 'umask', 'signal', 'math.pi', 'traceback', 'typing', '__main__', 'argv', 'stdout']\n",
      );
      assert.equal(next, "LEAKS []\n");
      const js = await plantAndProbe(
        fx,
        "node",
        "globalThis.RS_LEAK = 1; JSON.stringify = () => 'PATCHED'; require('fs').rsLeak = 1;",
        "console.log('LEAKS', [globalThis.RS_LEAK, JSON.stringify(1), require('fs').rsLeak].filter((x) => x !== undefined && x !== '1').length);",
      );
      assert.equal(js.control, "LEAKS 3\n");
      assert.equal(js.next, "LEAKS 0\n");
    });

    it("SysV IPC objects are removed; POSIX message queues are refused", async () => {
      const plant = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0x5253, 4096, 0o1600) >= 0
assert libc.msgget(0x5254, 0o1600) >= 0
assert libc.semget(0x5255, 1, 0o1600) >= 0
`;
      const probe = `
rows = 0
for kind in ("shm", "msg", "sem"):
    rows += len(open("/proc/sysvipc/" + kind).read().splitlines()) - 1
print("IPC", rows)
`;
      const { control, next } = await plantAndProbe(fx, "python", plant, probe);
      assert.equal(control, "IPC 3\n");
      assert.equal(next, "IPC 0\n");
      const mq = await fx.client.exec({
        language: "python",
        code: "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.mq_open(b'/rs', 0o100 | 2, 0o600, None), ctypes.get_errno())",
      });
      assert.equal(mq.stdout, "-1 1\n", `mq_open refused with EPERM: ${describeResult(mq)}`);
    });

    it("scheduling weight: a session's autogroup nice, writable by its processes, does not reach the next execution", async (t) => {
      // /proc/self/autogroup sets the CPU weight of the whole session: were executions in the sandbox's session,
      // a program's nice 19 there would slow every later command of the sandbox (its tests, to a timeout). The
      // kernel takes one such write a second from the whole machine (EAGAIN otherwise): each plant retries, and
      // prints what its session has then (the positive control); the next execution on the sandbox prints its own.
      const where = await fx.client.exec({ language: "python", code: "import os\nprint(os.path.exists('/proc/self/autogroup'))" });
      if (where.stdout !== "True\n") return t.skip("the kernel has no autogroups (CONFIG_SCHED_AUTOGROUP)");
      const programs: [SandboxLanguage, string, string][] = [
        [
          "python",
          "import time\nfor _ in range(40):\n    try:\n        with open('/proc/self/autogroup', 'w') as f: f.write('19')\n        break\n    except BlockingIOError:\n        time.sleep(0.1)\nprint(open('/proc/self/autogroup').read().split()[-1])",
          "print(open('/proc/self/autogroup').read().split()[-1])",
        ],
        [
          "bash",
          "for i in $(seq 40); do { echo 19 > /proc/self/autogroup; } 2>/dev/null && break; sleep 0.1; done; cut -d' ' -f3 /proc/self/autogroup",
          "cut -d' ' -f3 /proc/self/autogroup",
        ],
        [
          "node",
          "const fs = require('fs'); for (let i = 0; i < 40; i++) { try { fs.writeFileSync('/proc/self/autogroup', '19'); break; } catch { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100); } } console.log(fs.readFileSync('/proc/self/autogroup', 'utf8').trim().split(' ').pop());",
          "console.log(require('fs').readFileSync('/proc/self/autogroup', 'utf8').trim().split(' ').pop());",
        ],
      ];
      for (const [lang, plant, probe] of programs) {
        const s0 = fx.service.stats();
        const planted = await fx.client.exec({ language: lang, code: plant, limits: { wallMs: 8000 } });
        assert.equal(planted.stdout, "19\n", `${lang}: the plant took effect in its own session: ${describeResult(planted)}`);
        const probed = await fx.client.exec({ language: lang, code: probe });
        assert.equal(probed.stdout, "0\n", `${lang}: ${describeResult(probed)}`);
        assert.equal(fx.service.stats().sandboxes_started_total, s0.sandboxes_started_total, "the probe ran on the sandbox the plant ran on");
      }
    });

    it("network: TCP connections an execution closed (TIME_WAIT, for a minute) do not reach the next execution", async () => {
      // Nothing can remove them from the sandbox's network namespace: the reset finds them and the sandbox is
      // replaced. The plant lists its own closed connection (the control); the next execution lists none.
      const entries = "sum(len(open(p).read().splitlines()) - 1 for p in ('/proc/net/tcp', '/proc/net/tcp6') if os.path.exists(p))";
      const plant = `import os, socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
c = socket.create_connection(s.getsockname())
a, _ = s.accept()
c.close()
a.close()
s.close()
print(${entries})`;
      const s0 = fx.service.stats();
      const planted = await fx.client.exec({ language: "python", code: plant });
      assert.equal(planted.exitCode, 0, describeResult(planted));
      assert.ok(Number(planted.stdout) >= 1, `the closed connection is listed where it was made: ${describeResult(planted)}`);
      const probed = await fx.client.exec({ language: "python", code: `import os\nprint(${entries})` });
      assert.equal(probed.stdout, "0\n", describeResult(probed));
      assert.equal(fx.service.stats().sandboxes_retired_unclean_total, s0.sandboxes_retired_unclean_total + 1, "the sandbox was replaced");
      // A command that used no TCP leaves its sandbox in service.
      await fx.client.exec({ language: "python", code: "print(1)" });
      const s1 = fx.service.stats();
      await fx.client.exec({ language: "python", code: "print(2)" });
      assert.equal(fx.service.stats().sandboxes_retired_unclean_total, s1.sandboxes_retired_unclean_total);
    });

    it("the fork server cannot be reached or signalled from an execution", async () => {
      const s0 = fx.service.stats();
      const r = await fx.client.exec({
        language: "python",
        code: `
import os, signal
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGINT, signal.SIGSEGV):
    # Dropped by the kernel (pid 1 of the namespace has no handler), or refused: under perExecutionUid
    # the execution is another uid than the supervisor's.
    try:
        os.kill(1, sig)
    except PermissionError:
        pass
for path, mode in (("/proc/1/fd/3", "rb"), ("/proc/1/fd/4", "wb"), ("/proc/1/mem", "rb"), ("/proc/1/comm", "w"), ("/proc/1/environ", "rb"), ("/proc/1/oom_score_adj", "w")):
    try:
        open(path, mode)
        print("OPENED", path)
    except OSError as e:
        print("denied", path, type(e).__name__)
print("state", open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0])
`,
      });
      assert.equal(r.exitCode, 0, describeResult(r));
      assert.doesNotMatch(r.stdout, /OPENED/);
      // Sleeping, or running on another core at that instant (seen under load): alive and not stopped (T) either way.
      assert.match(r.stdout, /^state [SR]$/m, "the supervisor is neither stopped nor dead");
      const after1 = await fx.client.exec({ language: "python", code: "print(open('/proc/1/comm').read().strip())" });
      assert.equal(after1.stdout, "rs-supervisor\n");
      const s1 = fx.service.stats();
      assert.equal(s1.sandboxes_started_total, s0.sandboxes_started_total, "same sandbox, still serving");

      // With a host uid per execution (perExecutionUid, with fresh namespaces as root) the execution is not
      // pid 1's uid, and may change nothing about it: both changes are refused, the sandbox stays in service.
      if (s1.isolation_per_execution_uid) {
        const refused = await fx.client.exec({
          language: "python",
          code: `
import os, resource
for name, change in (("prlimit", lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (64, 64))), ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))):
    try:
        change()
        print("CHANGED", name)
    except PermissionError:
        print("refused", name)
`,
        });
        assert.equal(refused.stdout, "refused prlimit\nrefused setpriority\n", describeResult(refused));
        assert.equal(fx.service.stats().sandboxes_started_total, s1.sandboxes_started_total, "same sandbox, still serving");
        await assertHealthy(fx.client);
        return;
      }
      // What a same-uid process may change about pid 1 (rlimits, nice, affinity, I/O priority): the
      // positive control shows each change takes effect; the reset detects it and the sandbox is retired,
      // so the next execution runs on a fresh one with nothing changed.
      const tamper = await fx.client.exec({
        language: "python",
        code: `
import os, resource
resource.prlimit(1, resource.RLIMIT_NOFILE, (64, 64))
os.setpriority(os.PRIO_PROCESS, 1, 19)
print("nofile", resource.prlimit(1, resource.RLIMIT_NOFILE)[1], "nice", os.getpriority(os.PRIO_PROCESS, 1))
`,
      });
      assert.equal(tamper.stdout, "nofile 64 nice 19\n", describeResult(tamper));
      const next = await fx.client.exec({
        language: "python",
        code: "import os, resource\nprint('nofile', resource.getrlimit(resource.RLIMIT_NOFILE)[1] > 64, 'nice', os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, 1))",
      });
      assert.equal(next.stdout, "nofile True nice 0 0\n", describeResult(next));
      const s2 = fx.service.stats();
      assert.equal(s2.sandboxes_retired_unclean_total, s1.sandboxes_retired_unclean_total + 1, "the tampered sandbox was retired");
      assert.ok(s2.sandboxes_started_total > s1.sandboxes_started_total, "and replaced");
      await assertHealthy(fx.client);
    });
  });
}

describe("concurrent executions on reused sandboxes", { timeout: 120_000 }, () => {
  let fx: SandboxFixture;
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 3, maxConcurrent: 4 });
  });
  after(async () => {
    await fx?.stop();
  });

  it("a fork bomb or a memory bomb in one execution does not affect a concurrent one", async () => {
    // 128 MB and a 10 s wall: on a guest whose page faults cost ~30 µs, filling 512 MB next to a fork bomb took
    // over 3 s, and the bomb was stopped by the wall clock before it reached its memory limit.
    // The victim forks processes and allocates memory of its own while the bombs go off.
    const { victim, bombs } = await bombsBesideVictim(fx.client, {
      fork: {
        language: "python",
        code: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        limits: { wallMs: 3000, maxProcesses: 256 },
      },
      memory: { language: "python", code: "a = []\nwhile True:\n    a.append(bytearray(16 << 20))", limits: { memoryMb: 128, wallMs: 10_000 } },
      victim: {
        language: "python",
        code: `
import subprocess
outs = [subprocess.run(["echo", str(i)], capture_output=True, text=True).stdout for i in range(10)]
buf = bytearray(100 << 20)
print(len(outs), len(buf) >> 20)
`,
        limits: { wallMs: 10_000 },
      },
    });
    assert.equal(victim.stdout, "10 100\n", describeResult(victim));
    const [f, m] = await bombs;
    assert.equal(f.timedOut, true, describeResult(f));
    assert.equal(m.outOfMemory, true, describeResult(m));
    await assertHealthy(fx.client);
  });

  it("batch: a verdict per case, each case isolated, budget and stopOnFailure", async () => {
    const code = `
import os, sys
x = sys.stdin.read().strip()
if x == "write":
    open("case.txt", "w").write("1")
if x == "loop":
    while True:
        pass
print("seen" if os.path.exists("case.txt") else "fresh", x)
sys.exit(3 if x == "fail" else 0)
`;
    const b = await fx.client.execBatch({
      language: "python",
      code,
      cases: [
        { stdin: "write", expectedStdout: "seen write" },
        { stdin: "a", expectedStdout: "fresh a" },
        { stdin: "b", expectedStdout: "fresh x" },
        { stdin: "fail" },
        { stdin: "loop" },
        { stdin: "c" },
      ],
      limits: { wallMs: 500 },
      batchWallMs: 400,
    });
    assert.deepEqual(
      b.results.map((r) => r.verdict),
      ["passed", "passed", "failed", "error", "timeout", "skipped"],
      JSON.stringify(b.results.map((r) => [r.verdict, r.stdout, r.wallMs])),
    );
    assert.equal(b.passed, 2);
    assert.equal(b.results[3]!.exitCode, 3);
    const stop = await fx.client.execBatch({
      language: "bash",
      code: 'read x; echo $x; [ "$x" != bad ]',
      cases: [{ stdin: "ok" }, { stdin: "bad" }, { stdin: "ok" }],
      stopOnFailure: true,
    });
    assert.deepEqual(
      stop.results.map((r) => r.verdict),
      ["passed", "error", "skipped"],
    );
    await assert.rejects(fx.client.execBatch({ language: "python", code: "1", cases: [] }), /cases/);
  });
});
