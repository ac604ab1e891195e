// A sandbox that serves many commands pins, at start, the pages its python executions write
// (sandbox/supervisor/pin-hot.h), and its node fork server those of node executions, so that each fork copies
// them at once instead of faulting on first write. It pins with io_uring, which the sandbox's filter leaves to
// its start and the seal then takes away (sandbox/README.md, "io_uring at a sandbox's start"): no execution may
// set up or reach an io_uring, in a reused sandbox or a one-shot one, with shared or fresh namespaces.
// Controls: a service with a fresh sandbox per execution (maxExecsPerSandbox: 1) pins nothing (VmPin 0), has no
// seal (its filter refuses io_uring outright) and its executions fault more; within one execution, a change it
// makes is visible to itself (so its absence in the next one means something).
// On a machine that cannot pin (io_uring off, Linux before 5.18, RLIMIT_MEMLOCK under 1 MiB: pinningPossible),
// pid 1 pins nothing and serves as before, the seal still in force (checked with `prlimit --memlock=65536`).
import { readFileSync } from "node:fs";
import { release } from "node:os";
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

/**
 * Whether this machine lets a sandbox pin: io_uring enabled for everyone (kernel.io_uring_disabled 0), Linux
 * 5.18 or later (a ring registered with the task) and RLIMIT_MEMLOCK of at least 1 MiB (the sandboxes inherit
 * this process's). Where it does not, pid 1 must pin nothing and everything else must hold the same.
 */
function pinningPossible(): boolean {
  try {
    const disabled = readFileSync("/proc/sys/kernel/io_uring_disabled", "utf8").trim();
    if (disabled !== "0") return false;
  } catch {
    /* older kernels have no such switch */
  }
  const [major = 0, minor = 0] = release().split(".").map(Number);
  if (major < 5 || (major === 5 && minor < 18)) return false;
  const m = /^Max locked memory\s+(\S+)/m.exec(readFileSync("/proc/self/limits", "utf8"));
  return m?.[1] === "unlimited" || Number(m?.[1]) >= 1 << 20;
}
const PINS = pinningPossible();

// pid 1's pinned memory (its /proc status is readable; its memory and fds are not), what io_uring_setup(2) and
// io_uring_register(2) give this execution, its fds that are an io_uring, and its seccomp filter count.
const IO_URING_PROBE = `
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return [r, ctypes.get_errno() if r < 0 else 0]
status = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines() if ":" in l)
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        fds.append(os.readlink("/proc/self/fd/" + fd))
    except OSError:
        pass
own = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print(json.dumps({
    "pid1_pinned_kb": int(status["VmPin"].split()[0]),
    "setup": call(425, 1, ctypes.create_string_buffer(120)),
    "sqpoll": call(425, 1, ctypes.create_string_buffer(b"\\0" * 8 + (2).to_bytes(4, "little") + b"\\0" * 108)),
    "register": call(427, 0, 0, 0, 0),
    "ring_fds": [f for f in fds if "io_uring" in f],
    "filters": int(own["Seccomp_filters"]),
}))
`;

// Page faults of this execution so far (a fork starts the count at 0): copy-on-write faults are most of them.
const FAULTS = "import resource\nx = [str(i) for i in range(50)]\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)\n";

// The node fork server (nodefork.c) pins what its node executions write the same way: pid 1 starts it before
// sealing itself, and it loads the same seal on itself after pinning. A node program reaches syscalls only
// through what it starts: the python it spawns must find io_uring refused as a python execution does.
const NODE_IO_URING_PROBE = `
const fs = require("node:fs");
const { execFileSync } = require("node:child_process");
const field = (pid, key) => Number(new RegExp("^" + key + ":\\\\s+(\\\\d+)", "m").exec(fs.readFileSync("/proc/" + pid + "/status", "utf8"))[1]);
const probe = ${JSON.stringify(IO_URING_PROBE)};
const spawned = JSON.parse(execFileSync("/usr/bin/python3", ["-c", probe], { encoding: "utf8" }));
console.log(JSON.stringify({
  serverPinnedKb: field(process.ppid, "VmPin"),
  filters: field("self", "Seccomp_filters"),
  faults: process.resourceUsage().minorPageFault,
  spawned,
}));
`;

const EPERM = 1;

describe("hot pages pinned", { timeout: 120_000 }, () => {
  let on: SandboxFixture;
  let off: SandboxFixture;
  before(async () => {
    on = await startSandboxFixture({ poolSize: 1 });
    off = await startSandboxFixture({ poolSize: 1, maxExecsPerSandbox: 1 });
  });
  after(async () => {
    await on?.stop();
    await off?.stop();
  });

  it("pid 1 pins pages; an execution can neither set up nor reach an io_uring (a sandbox per execution: nothing pinned)", async () => {
    for (const [fx, pinned] of [
      [on, true],
      [off, false],
    ] as const) {
      for (let i = 0; i < 3; i++) {
        const r = await fx.client.exec({ language: "python", code: IO_URING_PROBE });
        assert.equal(r.exitCode, 0, describeResult(r));
        const p = JSON.parse(r.stdout);
        if (pinned && PINS) assert.ok(p.pid1_pinned_kb >= 200, `pid 1 pinned ${p.pid1_pinned_kb} kB: ${r.stdout}`);
        else assert.equal(p.pid1_pinned_kb, 0, r.stdout);
        assert.deepEqual(p.setup, [-1, EPERM], r.stdout);
        assert.deepEqual(p.sqpoll, [-1, EPERM], r.stdout);
        assert.deepEqual(p.register, [-1, EPERM], r.stdout);
        assert.deepEqual(p.ring_fds, [], "no fd of pid 1's ring reaches an execution");
        // bwrap's filter, and in a reused sandbox pid 1's seal on top of it.
        assert.equal(p.filters, pinned ? 2 : 1, r.stdout);
      }
    }
    // The service says which in the isolation it logs at start (and in its metadata).
    assert.ok(on.service.executor.isolation.lines.some((l) => l.startsWith("hot pages: each reused sandbox's pid 1 pins")));
    assert.ok(off.service.executor.isolation.lines.some((l) => l.startsWith("hot pages: not pinned")));
  });

  it("an execution faults far less on pages pid 1 pinned, and its output is its own", async () => {
    const faults = async (fx: SandboxFixture) => {
      const r = await fx.client.exec({ language: "python", code: FAULTS });
      assert.equal(r.stderr, "", describeResult(r));
      return Number(r.stdout);
    };
    const a = [await faults(on), await faults(on), await faults(on)];
    const b = [await faults(off), await faults(off), await faults(off)];
    // Where this machine cannot pin there is nothing to compare: the control's sandboxes also differ in what
    // they preload and never move their code onto huge pages.
    if (PINS) assert.ok(Math.max(...a) < 0.6 * Math.min(...b), `faults with pinned pages ${a}, without ${b}`);
    // The survey programs pid 1 ran at start printed to /dev/null, not into a command's output.
    const first = await startSandboxFixture({ poolSize: 1 });
    try {
      const r = await first.client.exec({ language: "python", code: "print(7)" });
      assert.deepEqual([r.stdout, r.stderr], ["7\n", ""], describeResult(r));
    } finally {
      await first.stop();
    }
  });

  it("what an execution writes on a pinned page does not reach the next one", async () => {
    // Objects every execution touches (their pages are pinned): builtins, sys, the __main__ dict, an int cache.
    const change = `
import builtins, sys
builtins.print_orig = builtins.print
builtins.len = lambda x: -1
sys.path.append("/left-behind")
sys.modules["__main__"].__dict__["left"] = 1
sys.setrecursionlimit(77)
builtins.print_orig(len([1]), "/left-behind" in sys.path, left, sys.getrecursionlimit())
`;
    const look = `
import builtins, sys
print(len([1]), "/left-behind" in sys.path, "left" in globals(), sys.getrecursionlimit() == 77, hasattr(builtins, "print_orig"))
`;
    const c = await on.client.exec({ language: "python", code: change });
    assert.equal(c.stdout, "-1 True 1 77\n", `within the execution the change is there: ${describeResult(c)}`);
    for (let i = 0; i < 3; i++) {
      const r = await on.client.exec({ language: "python", code: look });
      assert.equal(r.stdout, "1 False False False False\n", describeResult(r));
    }
  });

  it("the node fork server pins pages; a node execution, and what it starts, can neither set up nor reach an io_uring (a sandbox per execution: nothing pinned)", async () => {
    const faults: Record<string, number[]> = { on: [], off: [] };
    for (const [fx, pinned] of [
      [on, true],
      [off, false],
    ] as const) {
      for (let i = 0; i < 3; i++) {
        const r = await fx.client.exec({ language: "node", code: NODE_IO_URING_PROBE });
        assert.equal(r.exitCode, 0, describeResult(r));
        const p = JSON.parse(r.stdout);
        if (pinned && PINS) assert.ok(p.serverPinnedKb >= 200, `the node fork server pinned ${p.serverPinnedKb} kB: ${r.stdout}`);
        else assert.equal(p.serverPinnedKb, 0, r.stdout);
        // bwrap's filter, the server's seal (in a reused sandbox) and the filter each node execution loads for itself.
        assert.equal(p.filters, pinned ? 3 : 2, r.stdout);
        const s = p.spawned;
        assert.deepEqual([s.setup, s.sqpoll, s.register, s.ring_fds], [[-1, EPERM], [-1, EPERM], [-1, EPERM], []], r.stdout);
        assert.equal(s.filters, p.filters, "what a node execution starts inherits its filters");
        faults[pinned ? "on" : "off"]!.push(p.faults);
      }
    }
    // Fewer faults where the server pinned, spawning included.
    if (PINS) assert.ok(Math.max(...faults.on!) < 0.8 * Math.min(...faults.off!), `faults pinned ${faults.on}, not ${faults.off}`);
  });

  it("the node survey's output never reaches a command, and a change one node execution makes does not reach the next", async () => {
    const first = await startSandboxFixture({ poolSize: 1 });
    try {
      const r = await first.client.exec({ language: "node", code: "console.log(7)" });
      assert.deepEqual([r.stdout, r.stderr], ["7\n", ""], describeResult(r));
    } finally {
      await first.stop();
    }
    const change = "globalThis.left = 1; Array.prototype.sort = () => 'patched'; console.log(left, [2, 1].sort())";
    const c = await on.client.exec({ language: "node", code: change });
    assert.equal(c.stdout, "1 patched\n", `within the execution the change is there: ${describeResult(c)}`);
    for (let i = 0; i < 3; i++) {
      const r = await on.client.exec({ language: "node", code: "console.log(typeof globalThis.left, [2, 1].sort().join())" });
      assert.equal(r.stdout, "undefined 1,2\n", describeResult(r));
    }
  });
});

// Fresh namespaces per execution (and, as root, a uid per execution): the seal holds there too.
describe("hot pages pinned, fresh namespaces per execution", { timeout: 60_000 }, () => {
  let fx: SandboxFixture;
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 1, isolation: { freshNamespaces: true } });
  });
  after(async () => {
    await fx?.stop();
  });

  it("pid 1 pins pages; an execution can neither set up nor reach an io_uring", async () => {
    assert.equal(fx.service.stats().isolation_fresh_namespaces, 1);
    const r = await fx.client.exec({ language: "python", code: IO_URING_PROBE });
    assert.equal(r.exitCode, 0, describeResult(r));
    const p = JSON.parse(r.stdout);
    assert.ok(PINS ? p.pid1_pinned_kb >= 200 : p.pid1_pinned_kb === 0, r.stdout);
    assert.deepEqual([p.setup, p.sqpoll, p.register, p.ring_fds], [[-1, EPERM], [-1, EPERM], [-1, EPERM], []], r.stdout);
  });
});
