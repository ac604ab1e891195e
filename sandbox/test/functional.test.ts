// What a program can do in the sandbox, through the real service: languages, stdin, files, exit
// codes, fresh state per request, bad requests, queueing beyond capacity and the pool refilling.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { encode } from "@msgpack/msgpack";
import { Command } from "commander";
import { exitCodeFor, registerSandboxCommands } from "../../cli/commands/sandbox.js";
import { decodeErrorBody, SandboxSubjects } from "../../streams/sandbox-protocol.js";
import { assertHealthy, describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

let fx: SandboxFixture;

before(async () => {
  fx = await startSandboxFixture({ poolSize: 2, maxConcurrent: 2 });
});
after(async () => {
  await fx?.stop();
});

describe("sandbox exec", { timeout: 60_000 }, () => {
  it("runs python, node (CommonJS and ES modules) and bash", async () => {
    const py = await fx.client.exec({ language: "python", code: "import sys\nprint('py', sys.version_info[0], 6 * 7)" });
    assert.deepEqual(
      [py.stdout, py.stderr, py.exitCode, py.signal, py.timedOut, py.outOfMemory, py.outputTruncated],
      ["py 3 42\n", "", 0, null, false, false, false],
    );
    assert.ok(py.wallMs > 0 && py.cpuMs >= 0, describeResult(py));
    const cjs = await fx.client.exec({ language: "node", code: "const os = require('os'); console.log('cjs', typeof os.cpus, require.main === module)" });
    assert.equal(cjs.stdout, "cjs function true\n", describeResult(cjs));
    const esm = await fx.client.exec({ language: "node", code: "import { join } from 'node:path';\nconsole.log('esm', join('a', 'b'));" });
    assert.equal(esm.stdout, "esm a/b\n", describeResult(esm));
    const sh = await fx.client.exec({ language: "bash", code: 'echo "sh $((6*7))"; echo err >&2; whoami; pwd' });
    assert.equal(sh.stdout, "sh 42\nsandbox\n/workspace\n", describeResult(sh));
    assert.equal(sh.stderr, "err\n");
  });

  it("gives the program stdin", async () => {
    const py = await fx.client.exec({ language: "python", code: "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin: "1 2 3\n4\n" });
    assert.equal(py.stdout, "10\n", describeResult(py));
    const js = await fx.client.exec({
      language: "node",
      code: "let d='';process.stdin.on('data',c=>d+=c).on('end',()=>console.log(d.trim().toUpperCase()))",
      stdin: "hello",
    });
    assert.equal(js.stdout, "HELLO\n", describeResult(js));
    const big = "x".repeat(300_000);
    const sh = await fx.client.exec({ language: "bash", code: "wc -c", stdin: big });
    assert.equal(sh.stdout.trim(), "300000", "stdin larger than a pipe buffer arrives whole");
    const none = await fx.client.exec({ language: "python", code: "import sys\nprint(repr(sys.stdin.read()))" });
    assert.equal(none.stdout, "''\n", "no stdin reads as end of file");
  });

  it("writes request files into the work dir (importable, nested)", async () => {
    const r = await fx.client.exec({
      language: "python",
      code: "import helper\nprint(helper.f(), open('data/in.txt').read())",
      files: { "helper.py": "def f():\n    return 42\n", "data/in.txt": "hello files" },
    });
    assert.equal(r.stdout, "42 hello files\n", describeResult(r));
  });

  it("reports non-zero exits, tracebacks and signals", async () => {
    const exit3 = await fx.client.exec({ language: "python", code: "import sys\nsys.exit(3)" });
    assert.equal(exit3.exitCode, 3);
    const boom = await fx.client.exec({ language: "python", code: "x = 1\ny = x / 0" });
    assert.equal(boom.exitCode, 1);
    assert.match(boom.stderr, /File "<string>", line 2/);
    assert.match(boom.stderr, /y = x \/ 0/, "the traceback shows the source line");
    assert.match(boom.stderr, /ZeroDivisionError/);
    const syntax = await fx.client.exec({ language: "python", code: "def (" });
    assert.equal(syntax.exitCode, 1);
    assert.match(syntax.stderr, /SyntaxError/);
    const js = await fx.client.exec({ language: "node", code: "throw new Error('nope')" });
    assert.equal(js.exitCode, 1);
    assert.match(js.stderr, /Error: nope/);
    const sig = await fx.client.exec({ language: "bash", code: "kill -TERM $$" });
    assert.equal(sig.exitCode, null);
    assert.equal(sig.signal, "SIGTERM");
    const busy = await fx.client.exec({ language: "python", code: "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass" });
    assert.ok(busy.cpuMs >= 180 && busy.wallMs >= 180, `cpu ${busy.cpuMs} wall ${busy.wallMs}`);
  });

  it("gives every request a fresh sandbox", async () => {
    await fx.client.exec({ language: "bash", code: "echo 1 > /workspace/left.txt; echo 1 > /tmp/left.txt" });
    const r = await fx.client.exec({ language: "bash", code: "ls -A /workspace /tmp" });
    assert.doesNotMatch(r.stdout, /left\.txt/, describeResult(r));
  });

  it("answers malformed requests with an error reply and keeps serving", async () => {
    const cases: Array<[Uint8Array, RegExp]> = [
      [new Uint8Array([0xc1, 0x00]), /not valid MessagePack/],
      [encode({ language: "cobol", code: "x" }), /language/],
      [encode({ language: "python" }), /code/],
      [encode({ language: "python", code: "1", limits: { wallMs: -5 } }), /limits\.wallMs/],
      [encode({ language: "python", code: "1", files: { "../escape": "x" } }), /files/],
      [encode({ language: "python", code: "1", bogus: true }), /bogus|unrecognized/i],
    ];
    for (const [data, why] of cases) {
      const m = await fx.nc.request(SandboxSubjects.exec, data, { timeout: 5000 });
      assert.equal(m.headers?.get("Nats-Service-Error-Code"), "400");
      assert.match(decodeErrorBody(m.data).error.message, why);
    }
    await assert.rejects(fx.client.exec({ language: "python", code: 5 as unknown as string }), /invalid sandbox request/);
    const unknown = await fx.nc.request(SandboxSubjects.sessionExec(fx.service.instance), encode({ sessionId: "nope", language: "python", code: "1" }), {
      timeout: 5000,
    });
    assert.equal(unknown.headers?.get("Nats-Service-Error-Code"), "404");
    assert.ok(fx.service.stats().malformed_total >= cases.length);
    await assertHealthy(fx.client);
  });

  it("queues requests beyond maxConcurrent instead of dropping them", async () => {
    let peakQueued = 0;
    const probe = setInterval(() => (peakQueued = Math.max(peakQueued, fx.service.stats().queued)), 5);
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => fx.client.exec({ language: "python", code: `import time\ntime.sleep(0.05)\nprint(${i})` })),
    );
    clearInterval(probe);
    assert.deepEqual(
      results.map((r) => r.stdout),
      Array.from({ length: 12 }, (_, i) => `${i}\n`),
    );
    assert.ok(peakQueued > 0, "some requests waited for a slot");
  });

  it("keeps the warm pool full: sandboxes come back after each request, reset", async () => {
    // Start from a full pool (the burst of the test before may have drained it on a loaded machine), so
    // these requests must be served from it.
    for (let i = 0; i < 200 && fx.service.stats().pool_idle_python < 2; i++) await sleep(50);
    const before = fx.service.stats();
    assert.equal(before.pool_idle_python, 2, `pool full before the requests: ${JSON.stringify(before)}`);
    await Promise.all([0, 1, 2].map(() => fx.client.exec({ language: "python", code: "print(1)" })));
    let s = fx.service.stats();
    for (let i = 0; i < 100 && s.pool_idle_python < 2; i++) {
      await sleep(50);
      s = fx.service.stats();
    }
    assert.equal(s.pool_idle_python, 2, `pool back at poolSize: ${JSON.stringify(s)}`);
    // Reused after a clean reset, not started anew (a fresh sandbox per request is maxExecsPerSandbox: 1).
    assert.ok(s.pool_reuses_total >= before.pool_reuses_total + 3, JSON.stringify(s));
    assert.equal(s.sandboxes_retired_unclean_total, before.sandboxes_retired_unclean_total);
    assert.ok(s.pool_hits_total > before.pool_hits_total, "requests were served from the pool");
    const t0 = performance.now();
    await fx.client.exec({ language: "python", code: "print(1)" });
    assert.ok(performance.now() - t0 < 1000);
  });

  it("`rollstream sandbox exec` prints the output and mirrors the exit code", async () => {
    const program = new Command().exitOverride();
    const out: string[] = [];
    const err: string[] = [];
    registerSandboxCommands(program, { out: (t) => out.push(t), err: (t) => err.push(t) });
    const saved = process.exitCode;
    await program.parseAsync(["sandbox", "exec", "--lang", "python", "-c", "import sys\nprint(7)\nsys.exit(3)", "--server", fx.nats.url], { from: "user" });
    const code = process.exitCode;
    process.exitCode = saved;
    assert.equal(out.join(""), "7\n");
    assert.match(err.join(""), /\[sandbox\] exit 3/);
    assert.equal(code, 3);
    assert.equal(exitCodeFor({ exitCode: null, signal: "SIGKILL", timedOut: false }), 137);
    assert.equal(exitCodeFor({ exitCode: null, signal: "SIGKILL", timedOut: true }), 124);
  });
});
