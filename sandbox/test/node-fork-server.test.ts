// The node fork server (nodefork.c, boot.cjs --zygote): each node execution of a sandbox is a fork of one
// warm node started with it. These tests show (1) executions really are forks of one server (its pid is
// every execution's parent), and a node started for its execution (the control: a fresh-namespace request
// with files, which its own process must write) is not; (2) nothing one
// execution plants reaches the next fork of the same server, each probe with a positive control; (3) an
// execution cannot signal, limit, renice or open the server, while the same calls aimed at a process of
// its own succeed (the control); (4) a fork bomb or memory bomb in one node execution leaves a concurrent
// one alone.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, readlinkSync, statSync } from "node:fs";
import { assertHealthy, bombsBesideVictim, describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";
import { childPids, sandboxSupervisors } from "./proc.js";

/** Host pids of this fixture's node fork servers (children of its sandboxes' supervisors). */
async function serverPids(fx: SandboxFixture): Promise<number[]> {
  const out: number[] = [];
  for (const { pid } of await sandboxSupervisors(fx))
    for (const child of childPids(pid)) {
      try {
        if (readFileSync(`/proc/${child}/cmdline`, "utf8").includes("/.rs/boot.js\0--zygote")) out.push(child);
      } catch {
        // gone meanwhile
      }
    }
  return out;
}

const NS = ["user", "mnt", "ipc"];
const LOOP_FDS =
  "const fs = require('fs'); console.log('eventpoll', fs.readdirSync('/proc/self/fd').filter((f) => { try { return fs.readlinkSync('/proc/self/fd/' + f) === 'anon_inode:[eventpoll]'; } catch { return false; } }).length);";

const WHO =
  "{ const fs = require('fs'); console.log('PARENT', process.ppid, fs.readFileSync('/proc/' + process.ppid + '/cmdline', 'utf8').split('\\0').join(' ').trim()); }";

// With the reset alone keeping executions apart (the default), and with fresh namespaces per execution on
// top (each fork then isolates itself as the C loop's executions do: its own namespaces and tmpfs folders,
// and as root a host uid of its own).
for (const freshNamespaces of [false, true]) {
  describe(`node fork server (${freshNamespaces ? "fresh namespaces" : "reset only"})`, { timeout: 120_000 }, () => {
    let fx: SandboxFixture;
    before(async () => {
      fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, isolation: { freshNamespaces }, runtimes: { node: { poolSize: 1 } } });
    });
    after(async () => {
      await fx?.stop();
    });

    async function node(code: string, limits?: Record<string, number>) {
      const r = await fx.client.exec({ language: "node", code, ...(limits ? { limits } : {}) });
      assert.equal(r.exitCode, 0, describeResult(r));
      return r.stdout;
    }

    it("every execution is a fork of the same warm node", async () => {
      const s0 = fx.service.stats();
      const a = await node(WHO);
      const b = await node(WHO);
      assert.match(a, /^PARENT (\d+) .*node --single-threaded \/\.rs\/boot\.js --zygote\n$/);
      assert.equal(b, a, "the same server forked both");
      assert.notEqual(a.split(" ")[1], "1");
      assert.equal(fx.service.stats().sandboxes_started_total, s0.sandboxes_started_total, "on the same sandbox");
    });

    it("nothing crosses forks: globals, builtin and prototype monkey-patches, env, files, processes", async () => {
      const plant = `
globalThis.leaked = 1;
require('fs').readFileSync = () => 'patched';
Array.prototype.leak = 1;
require('module').prototype.leak = 1;
process.env.RS_LEAK = '1';
process.chdir('/tmp');
require('fs').writeFileSync('/workspace/leak.txt', 'x');
require('fs').writeFileSync('/tmp/leak.txt', 'x');
require('child_process').spawn('sleep', ['300'], { detached: true, stdio: 'ignore' }).unref();
`;
      const probe = `
const fs = require('fs');
// readlink, not readFileSync: the plant patches that one (and the control runs after the plant).
const others = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).map((p) => { try { return fs.readlinkSync('/proc/' + p + '/exe'); } catch { return ''; } }).filter((c) => c.endsWith('/sleep'));
console.log(JSON.stringify({
  global: typeof globalThis.leaked,
  patched: String(fs.readFileSync).includes('patched'),
  proto: [].leak ?? null,
  module: require('module').prototype.leak ?? null,
  env: process.env.RS_LEAK ?? null,
  cwd: process.cwd(),
  files: fs.readdirSync('/workspace').concat(fs.readdirSync('/tmp')),
  sleepers: others,
}));
${WHO}
`;
      // Positive control: the probe, run after the plant in one program, sees every plant.
      const control = JSON.parse((await node(`${plant}\nsetTimeout(() => {}, 50);\n${probe}`)).split("\n")[0]!);
      assert.deepEqual(control, {
        global: "number",
        patched: true,
        proto: 1,
        module: 1,
        env: "1",
        cwd: "/tmp",
        files: ["leak.txt", "leak.txt"],
        sleepers: control.sleepers,
      });
      assert.equal(control.sleepers.length, 1, JSON.stringify(control));
      const planter = (await node(`${plant}\n${WHO}`)).trim().split("\n").pop();
      const [line, parent] = (await node(probe)).trim().split("\n");
      assert.deepEqual(JSON.parse(line!), {
        global: "undefined",
        patched: false,
        proto: null,
        module: null,
        env: null,
        cwd: "/workspace",
        files: [],
        sleepers: [],
      });
      // (The plant's own line names the server 'patched': it patched readFileSync. The pid is what counts.)
      assert.equal(parent!.split(" ")[1], planter!.split(" ")[1], "the probe was forked by the server that forked the plant");
    });

    it("an execution cannot signal, limit, renice, pin or open the server; the same calls on its own process succeed", async () => {
      // Run from python started by the node execution: the filter is inherited by everything it starts.
      const script = `
import os, resource, signal, subprocess, sys
server = int(sys.argv[1])
own = subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
def attempts(pid, tids, group):
    tries = [("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64))),
             ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
             ("affinity", lambda: os.sched_setaffinity(pid, {0})),
             ("pidfd", lambda: os.close(os.pidfd_open(pid)))]
    for t in tids:
        tries.append(("kill-thread", lambda t=t: os.kill(t, signal.SIGCONT)))
    tries.append(("kill-group", lambda: os.kill(-group, signal.SIGCONT)))
    out = []
    for name, f in tries:
        try:
            f()
            out.append(name + ":ok")
        except PermissionError:
            out.append(name + ":EPERM")
        except ProcessLookupError:
            out.append(name + ":ESRCH")
    return sorted(set(out))
print("OWN", attempts(own.pid, [own.pid], own.pid))
tids = [int(t) for t in os.listdir("/proc/%d/task" % server)]
print("SERVER", attempts(server, tids, server), len(tids) > 1)
for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGUSR1):
    for target in (server, -server, -1):
        try:
            os.kill(target, sig)
            print("SIGNALLED", target, sig)
        except PermissionError:
            pass
fd = os.open("/proc/%d" % server, os.O_RDONLY | os.O_DIRECTORY)
try:
    signal.pidfd_send_signal(fd, signal.SIGKILL)
    print("SIGNALLED through /proc")
except PermissionError:
    pass
for path, mode in (("mem", "rb"), ("environ", "rb"), ("oom_score_adj", "w"), ("fd/0", "rb")):
    try:
        open("/proc/%d/%s" % (server, path), mode)
        print("OPENED", path)
    except OSError:
        pass
try:
    os.listdir("/proc/%d/fd" % server)
    print("LISTED fds")
except OSError:
    pass
for name, f in (("user", lambda: os.setpriority(os.PRIO_USER, 0, 19)), ("pgrp", lambda: os.setpriority(os.PRIO_PGRP, server, 19))):
    try:
        f()
        print("RENICED", name)
    except PermissionError:
        pass
own.kill()
print("state", open("/proc/%d/stat" % server).read().rsplit(")", 1)[1].split()[0])
`;
      const before = await node(WHO);
      const out = await node(
        `const r = require('child_process').spawnSync('python3', ['-c', ${JSON.stringify(script)}, String(process.ppid)], { encoding: 'utf8' }); process.stdout.write(r.stdout + r.stderr);`,
      );
      assert.match(out, /^OWN \['affinity:ok', 'kill-group:ok', 'kill-thread:ok', 'pidfd:ok', 'prlimit:ok', 'setpriority:ok'\]$/m, out);
      assert.match(
        out,
        /^SERVER \['affinity:EPERM', 'kill-group:EPERM', 'kill-thread:EPERM', 'pidfd:EPERM', 'prlimit:EPERM', 'setpriority:EPERM'\] True$/m,
        out,
      );
      assert.doesNotMatch(out, /SIGNALLED|OPENED|LISTED|RENICED|Traceback/, out);
      assert.match(out, /^state S$/m, out);
      assert.equal(await node(WHO), before, "the same server still forks the next execution");
      await assertHealthy(fx.client);
    });

    it("what node cached in the server is each fork's own: pid, Math.random's seed, signals to itself", async () => {
      const probe = `const fs = require('fs');
const report = () => console.log(JSON.stringify({ pid: process.pid, real: Number(fs.readlinkSync('/proc/self')), random: Math.random() }));
// Reported from the handler: a timer racing it lost on a slow host (it fired first and nothing then kept the
// process alive for the signal). The guard only keeps it alive, and says so if the signal never comes.
const guard = setTimeout(() => { console.log('SIGTERM not handled'); report(); }, 5000);
process.on('SIGTERM', () => { clearTimeout(guard); console.log('SIGTERM handled'); report(); });
process.kill(process.pid, 'SIGTERM');`;
      const runs = [];
      for (let i = 0; i < 3; i++) {
        const [handled, line] = (await node(probe)).trim().split("\n");
        assert.equal(handled, "SIGTERM handled");
        runs.push(JSON.parse(line!));
      }
      for (const r of runs) assert.equal(r.pid, r.real, "process.pid is the fork's, not the server's");
      assert.equal(new Set(runs.map((r) => r.pid)).size, 3);
      // Before each fork seeded its own, every execution drew the same first Math.random() (the server's state).
      assert.equal(new Set(runs.map((r) => r.random)).size, 3, JSON.stringify(runs));
    });

    it("process.uptime(), performance.now() and timeOrigin count from the fork's own start, and still agree with Date.now()", async () => {
      // serverAgeS: how long the fork's parent, the server, has run, from /proc (clock ticks since boot).
      const probe = `const fs = require('fs');
const stat = fs.readFileSync('/proc/' + process.ppid + '/stat', 'utf8');
const startTicks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
const serverAgeS = Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]) - startTicks / 100;
const t = performance.nodeTiming;
console.log(JSON.stringify({ serverAgeS, uptime: process.uptime(), now: performance.now(), originAgo: Date.now() - performance.timeOrigin,
  drift: performance.timeOrigin + performance.now() - Date.now(), milestones: [t.nodeStart, t.v8Start, t.environment, t.bootstrapComplete] }))`;
      // The control: the server has served over a second, which clocks carried over from it would show (before
      // this, performance.now() and timeOrigin did).
      let r = JSON.parse(await node(probe));
      for (let i = 0; i < 20 && r.serverAgeS < 1.2; i++) {
        await new Promise((done) => setTimeout(done, 200));
        r = JSON.parse(await node(probe));
      }
      assert.ok(r.serverAgeS >= 1.2, JSON.stringify(r));
      assert.ok(r.uptime >= 0 && r.uptime < 0.5, `uptime ${r.uptime} s in a fork of a server up ${r.serverAgeS} s`);
      assert.ok(r.now >= 0 && r.now < 500, `performance.now() ${r.now} ms in a fork of a server up ${r.serverAgeS} s`);
      assert.ok(r.originAgo >= 0 && r.originAgo < 500, `timeOrigin ${r.originAgo} ms ago in a fork of a server up ${r.serverAgeS} s`);
      assert.ok(Math.abs(r.drift) < 50, JSON.stringify(r));
      // What node reached before the fork (its bootstrap) counts as reached at the fork's start: never before it.
      for (const m of r.milestones) assert.ok(m >= 0 && m < 500, JSON.stringify(r));
    });

    it("the server's warm-up collection leaves no gc function to programs, in their context or a new one", async () => {
      const probe = "console.log(typeof gc, require('vm').runInNewContext('typeof gc'))";
      assert.equal((await node(probe)).trim(), "undefined undefined");
      // The control: where the flag is set, both places show it.
      const control = spawnSync(process.execPath, ["--expose-gc", "-e", probe], { encoding: "utf8" });
      assert.equal(control.stdout.trim(), "function function", control.stderr);
    });

    it("a fork keeps no fd of the server's other event loops (node's platform threads run libuv loops)", async () => {
      const out = await node(LOOP_FDS);
      assert.equal(out, "eventpoll 1\n", "its own main loop's only");
    });

    it("each fork has its own namespaces, tmpfs and (as root) host uid, with fresh namespaces; the server's otherwise", async () => {
      assert.equal(fx.service.stats().isolation_fresh_namespaces, freshNamespaces ? 1 : 0);
      // The server is not dumpable, so its namespaces are read from the host: every live zygote's.
      const servers0 = await serverPids(fx);
      const servers = servers0.map((p) => NS.map((n) => readlinkSync(`/proc/${p}/ns/${n}`)));
      const serverDevs = servers0.map((p) => statSync(`/proc/${p}/root/workspace`).dev);
      assert.ok(servers.length >= 1, "a server is running");
      const probe = `const fs = require('fs');
const st = (p) => fs.readFileSync(p, 'utf8');
console.log(JSON.stringify({
  ns: ${JSON.stringify(NS)}.map((n) => fs.readlinkSync('/proc/self/ns/' + n)),
  tmpfs: fs.statSync('/workspace').dev,
  uid: st('/proc/self/status').match(/^Uid:\\s+(\\d+)/m)[1],
  map: st('/proc/self/uid_map').trim().split(/\\s+/),
  caps: st('/proc/self/status').match(/^CapEff:\\s+(\\w+)/m)[1],
  ppid: process.ppid,
}));`;
      const a = JSON.parse(await node(probe));
      const b = JSON.parse(await node(probe));
      assert.equal(a.ppid, b.ppid, "both forks of one server");
      assert.equal(a.caps, "0000000000000000");
      assert.equal(a.uid, "65534", "inside, the program is the sandbox user either way");
      const own = (f: { ns: string[] }) => servers.every((sv) => f.ns.every((n, i) => n !== sv[i]));
      if (!freshNamespaces) {
        // The control: without them a fork keeps its server's namespaces.
        assert.ok(
          servers.some((sv) => sv.join() === a.ns.join()),
          JSON.stringify({ a, servers }),
        );
        assert.deepEqual(b.ns, a.ns);
        assert.ok(serverDevs.includes(a.tmpfs), "and its /workspace");
        return;
      }
      assert.ok(own(a) && own(b), `user, mnt and ipc namespaces of their own: ${JSON.stringify({ a, b, servers })}`);
      // (The forks are compared with the live servers, not with each other: the kernel reuses a freed
      // namespace's inode and a freed tmpfs's device number, and the first fork is gone when the second runs.)
      assert.ok(
        serverDevs.every((d) => d !== a.tmpfs && d !== b.tmpfs),
        `a /workspace tmpfs of their own: ${JSON.stringify({ a: a.tmpfs, b: b.tmpfs, serverDevs })}`,
      );
      if (fx.service.stats().isolation_per_execution_uid) {
        assert.equal(a.map[0], "65534");
        assert.notEqual(a.map[1], b.map[1], "a host uid per execution");
      }
    });
  });
}

describe("node fork server: when it dies", { timeout: 60_000 }, () => {
  let fx: SandboxFixture;
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, runtimes: { node: { poolSize: 1 } } });
  });
  after(async () => {
    await fx?.stop();
  });

  it("the execution it was running ends killed, and the next one gets a new server", async () => {
    const before = await fx.client.exec({ language: "node", code: WHO });
    assert.match(before.stdout, /^PARENT \d+ .*--zygote\n$/, describeResult(before));
    const running = fx.client.exec({ language: "node", code: "setTimeout(() => console.log('done'), 3000);", limits: { wallMs: 10_000 } });
    await new Promise((r) => setTimeout(r, 500));
    // Nothing inside a sandbox can kill it (see above); the host can, as a crash would.
    const servers = await serverPids(fx);
    assert.equal(servers.length, 1, "one node sandbox, one server");
    process.kill(servers[0]!, "SIGKILL");
    const r = await running;
    assert.notEqual(r.stdout, "done\n", describeResult(r));
    assert.notEqual(r.exitCode, 0, describeResult(r));
    assert.ok(r.wallMs < 3000, `ended when its server died, not when its timer fired: ${describeResult(r)}`);
    const next = await fx.client.exec({ language: "node", code: WHO });
    assert.match(next.stdout, /^PARENT \d+ .*--zygote\n$/, describeResult(next));
    const again = await fx.client.exec({ language: "node", code: WHO });
    assert.equal(again.stdout, next.stdout, "the new server serves on");
  });
});

describe("a node started for its execution (the control)", { timeout: 60_000 }, () => {
  let fx: SandboxFixture;
  // With fresh namespaces a request's files are written by its execution's own process: never a fork's.
  const files = { "f.txt": "" };
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, isolation: { freshNamespaces: true }, runtimes: { node: { poolSize: 1 } } });
  });
  after(async () => {
    await fx?.stop();
  });

  it("is its own node, a child of the supervisor", async () => {
    const r = await fx.client.exec({ language: "node", code: WHO, files });
    assert.match(r.stdout, /^PARENT 1 /, describeResult(r));
    // The control of the fd probe: a node of its own has its platform's loops too.
    const loops = await fx.client.exec({ language: "node", code: LOOP_FDS, files });
    assert.match(loops.stdout, /^eventpoll [2-9]\n$/, describeResult(loops));
  });
});

describe("node fork server: concurrent executions", { timeout: 120_000 }, () => {
  let fx: SandboxFixture;
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 4, runtimes: { node: { poolSize: 3 } } });
  });
  after(async () => {
    await fx?.stop();
  });

  it("a fork bomb or a memory bomb in one node execution does not affect a concurrent one", async () => {
    const { victim, bombs } = await bombsBesideVictim(fx.client, {
      fork: {
        language: "node",
        code: "const { spawn } = require('child_process'); for (;;) { try { spawn('sleep', ['30'], { stdio: 'ignore' }); } catch {} }",
        limits: { wallMs: 3000, maxProcesses: 128 },
      },
      memory: { language: "node", code: "const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1));", limits: { memoryMb: 128, wallMs: 10_000 } },
      victim: {
        language: "node",
        code: "const { execFileSync } = require('child_process'); const outs = []; for (let i = 0; i < 10; i++) outs.push(execFileSync('echo', [String(i)]).toString()); const b = Buffer.alloc(50 << 20, 1); console.log(outs.length, b.length >> 20);",
        limits: { wallMs: 10_000 },
      },
    });
    assert.equal(victim.stdout, "10 50\n", describeResult(victim));
    const [f, m] = await bombs;
    assert.equal(f.timedOut, true, describeResult(f));
    assert.equal(m.outOfMemory, true, describeResult(m));
    const again = await fx.client.exec({ language: "node", code: "console.log(2)" });
    assert.equal(again.stdout, "2\n", describeResult(again));
  });
});
