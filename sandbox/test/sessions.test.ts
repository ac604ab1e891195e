// Sessions through the real service: state kept across commands, commands in order, limits per
// command without losing the session, close and idle expiry; and the session cap on the executor.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { SandboxServiceError } from "../../streams/sandbox-protocol.js";
import { createLocalSandbox, SandboxExecutor, SandboxRequestError } from "../index.js";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

let fx: SandboxFixture;

before(async () => {
  fx = await startSandboxFixture({ poolSize: 2 });
});
after(async () => {
  await fx?.stop();
});

describe("sandbox sessions", { timeout: 60_000 }, () => {
  it("returns from openSession at once and runs the first command when the open completes", async () => {
    const t0 = performance.now();
    const s = await fx.client.openSession();
    const openMs = performance.now() - t0;
    assert.ok(openMs < 50, `openSession returned after ${openMs.toFixed(1)} ms`);
    assert.match(s.id, /^[A-Za-z0-9_-]+$/);
    const r = await s.exec({ language: "python", code: "print('first')" });
    assert.equal(r.stdout, "first\n", describeResult(r));
    await s.close();
  });

  it("keeps files across commands and languages; each command is a fresh process", async () => {
    const s = await fx.client.openSession({ language: "python" });
    try {
      const a = await s.exec({ language: "python", code: "x = 41\nopen('state.txt', 'w').write('kept')\nopen('/tmp/t.txt', 'w').write('tmp kept')" });
      assert.equal(a.exitCode, 0, describeResult(a));
      const b = await s.exec({ language: "bash", code: "cat state.txt; echo; cat /tmp/t.txt" });
      assert.equal(b.stdout, "kept\ntmp kept", describeResult(b));
      const c = await s.exec({ language: "node", code: "console.log(require('fs').readFileSync('state.txt', 'utf8'))" });
      assert.equal(c.stdout, "kept\n", describeResult(c));
      const d = await s.exec({ language: "python", code: "print('x' in globals())", files: { "extra.txt": "from request" } });
      assert.equal(d.stdout, "False\n");
      const e = await s.exec({ language: "bash", code: "cat extra.txt" });
      assert.equal(e.stdout, "from request");
    } finally {
      await s.close();
    }
  });

  it("runs a session's commands one at a time, in order", async () => {
    const s = await fx.client.openSession();
    try {
      const runs = [0, 1, 2, 3].map((i) => s.exec({ language: "bash", code: `sleep 0.0$((4 - ${i})); echo ${i} >> order.txt; cat order.txt | tr '\\n' ' '` }));
      const results = await Promise.all(runs);
      assert.equal(results[3]!.stdout.trim(), "0 1 2 3");
    } finally {
      await s.close();
    }
  });

  it("a command that times out or floods output is stopped, the session and its files survive", async () => {
    const s = await fx.client.openSession();
    try {
      await s.exec({ language: "bash", code: "echo safe > keep.txt" });
      const loop = await s.exec({ language: "python", code: "while True:\n    pass", limits: { wallMs: 500 } });
      assert.equal(loop.timedOut, true, describeResult(loop));
      const flood = await s.exec({ language: "bash", code: "yes", limits: { maxOutputBytes: 2000 } });
      assert.equal(flood.outputTruncated, true, describeResult(flood));
      const after = await s.exec({ language: "bash", code: "cat keep.txt" });
      assert.equal(after.stdout, "safe\n", describeResult(after));
    } finally {
      await s.close();
    }
  });

  it("a node session keeps a node interpreter warm between commands", async () => {
    const s = await fx.client.openSession({ language: "node" });
    try {
      await s.exec({ language: "node", code: "require('fs').writeFileSync('n.txt', '1')" });
      await sleep(300); // the next interpreter starts while the caller reads the result
      const r = await s.exec({ language: "node", code: "console.log(require('fs').readFileSync('n.txt', 'utf8'))" });
      assert.equal(r.stdout, "1\n", describeResult(r));
      assert.ok(r.wallMs < 40, `warm node command took ${r.wallMs} ms`);
    } finally {
      await s.close();
    }
  });

  it("is gone after close and after its idle timeout", async () => {
    const s = await fx.client.openSession();
    await s.exec({ language: "python", code: "print(1)" });
    await s.close();
    await s.close();
    await assert.rejects(s.exec({ language: "python", code: "print(1)" }), /closed/);

    const idle = await fx.client.openSession({ idleTimeoutMs: 200 });
    await idle.exec({ language: "python", code: "print(1)" });
    const expiredBefore = fx.service.stats().sessions_expired_total;
    await sleep(600);
    const err = await idle.exec({ language: "python", code: "print(1)" }).catch((e: unknown) => e);
    assert.ok(err instanceof SandboxServiceError && err.code === 404, `expected 404, got ${String(err)}`);
    assert.equal(fx.service.stats().sessions_expired_total, expiredBefore + 1);
  });
});

describe("sandbox executor without NATS", { timeout: 60_000 }, () => {
  it("caps open sessions at maxSessions and serves through createLocalSandbox", async () => {
    const ex = await SandboxExecutor.create({ poolSize: 1, maxSessions: 2, runtimes: { node: { enabled: false } } }, pino({ level: "warn" }));
    try {
      const sandbox = createLocalSandbox(ex);
      const a = await sandbox.openSession();
      const b = await sandbox.openSession();
      const err = await sandbox.openSession().catch((e: unknown) => e);
      assert.ok(err instanceof SandboxRequestError && err.code === 503, `expected 503, got ${String(err)}`);
      await a.close();
      const c = await sandbox.openSession();
      assert.equal((await c.exec({ language: "bash", code: "echo local" })).stdout, "local\n");
      const nodeErr = await sandbox.exec({ language: "node", code: "1" }).catch((e: unknown) => e);
      assert.ok(nodeErr instanceof SandboxRequestError && nodeErr.code === 400, "a disabled runtime is a bad request");
      await b.close();
      await c.close();
      assert.equal(ex.stats().sessions_open, 0);
    } finally {
      await ex.close();
    }
  });
});
