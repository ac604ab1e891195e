// Sandbox starts through posix_spawn (native-spawn.ts, the rs_spawn addon): the child gets exactly the fds it
// is given, a session of its own and default signal handling, and its exit reaches us as ChildProcess's
// would. Then a whole sandbox service started that way.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { once } from "node:events";
import { NativeChild, nativeSpawnAddon } from "../native-spawn.js";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";
import { hostUid, procStat, statField } from "./proc.js";

async function run(script: string, input?: string): Promise<{ out: string; err: string; code: number | null; signal: string | null; child: NativeChild }> {
  const child = new NativeChild("/bin/sh", ["-c", script], { fds: 5, extraFd: null });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d));
  child.stderr.on("data", (d: Buffer) => (err += d));
  for (const s of child.stdio) s?.on("error", () => undefined);
  if (input !== undefined) child.stdio[3]!.end(input);
  const [code, signal] = (await once(child, "close")) as [number | null, string | null];
  return { out, err, code, signal, child };
}

describe("NativeChild (posix_spawn)", () => {
  it("the addon is built by npm ci", () => {
    assert.ok(nativeSpawnAddon(), "sandbox/spawn/build/Release/rs_spawn.node is missing");
  });

  it("fds 1-4 are sockets to us, fd 0 is /dev/null, and nothing else is open", async () => {
    const r = await run("echo out; echo err >&2; echo \"$(head -c 5 <&3)\"; readlink /proc/self/fd/0; ls /proc/self/fd | sort -n | tr '\\n' ' '", "hello");
    assert.equal(r.err, "err\n");
    const [first, hello, stdin, fds] = r.out.split("\n");
    assert.deepEqual([first, hello, stdin], ["out", "hello", "/dev/null"]);
    // ls holds one more fd (the directory it lists); 0-4 are the ones we gave.
    const open = fds!.trim().split(" ").map(Number);
    assert.deepEqual(open.slice(0, 5), [0, 1, 2, 3, 4]);
    assert.ok(open.length <= 6, `fds open in the child: ${open.join(" ")}`);
    assert.equal(r.code, 0);
  });

  it("runs in a session of its own, with the standard signals at their defaults (node ignores SIGPIPE)", async () => {
    const r = await run("cat /proc/$$/stat; grep -E '^Sig(Ign|Blk)' /proc/self/status");
    const stat = r.out.split("\n")[0]!;
    const pid = Number(stat.split(" ")[0]);
    assert.equal(statField(stat, 3), pid, "its own session");
    // Signals 1-31; glibc keeps its two internal real-time signals as they were, as node's own spawn does.
    const standard = (line: string) => BigInt(`0x${new RegExp(`^${line}:\\s+([0-9a-f]+)`, "m").exec(r.out)![1]}`) & 0x7fffffffn;
    assert.equal(standard("SigIgn"), 0n);
    assert.equal(standard("SigBlk"), 0n);
    // The control: this process does ignore SIGPIPE (13).
    const ours = BigInt(`0x${/^SigIgn:\s+([0-9a-f]+)/m.exec(readFileSync("/proc/self/status", "utf8"))![1]}`);
    assert.notEqual(ours & (1n << 12n), 0n);
  });

  it("exit codes and signals come back as ChildProcess gives them", async () => {
    const r = await run("exit 7");
    assert.deepEqual([r.code, r.signal, r.child.exitCode, r.child.signalCode], [7, null, 7, null]);
    const child = new NativeChild("/bin/sleep", ["30"], { fds: 5, extraFd: null });
    const exited = once(child, "exit");
    assert.equal(child.kill("SIGKILL"), true);
    assert.deepEqual(await exited, [null, "SIGKILL"]);
    await once(child, "close");
    assert.equal(child.kill("SIGKILL"), false, "nothing left to kill");
  });

  it("a program that cannot be started throws, naming it", () => {
    assert.throws(() => new NativeChild("/nonexistent/bwrap", [], { fds: 5, extraFd: null }), /posix_spawn \/nonexistent\/bwrap: No such file/);
  });
});

describe("a sandbox service started with posix_spawn", { timeout: 60_000 }, () => {
  let fx: SandboxFixture;
  before(async () => {
    fx = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1 });
  });
  after(async () => {
    await fx?.stop();
  });

  it("runs programs", async () => {
    const r = await fx.client.exec({ language: "python", code: "print(6 * 7)" });
    assert.equal(r.stdout, "42\n", describeResult(r));
  });

  it("bwrap runs under the sandbox's own host uid (as root) in a session of its own", async (t) => {
    if (process.getuid?.() !== 0) return t.skip("per-sandbox host uids need root");
    const pids = await fx.service.executor.sandboxPids();
    assert.ok(pids.length > 0, "no live sandbox");
    for (const pid of pids) {
      const uid = hostUid(pid);
      assert.ok(uid >= 1_000_000, `bwrap ${pid} runs as uid ${uid}`);
      assert.equal(procStat(pid, 3), pid, "its own session");
    }
  });
});
