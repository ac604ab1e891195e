// A sandbox that serves many commands (maxExecsPerSandbox > 1, the default) preloads the modules programs
// commonly import, and warms the traceback path, in its fork server: each execution finds them imported
// instead of paying for the import itself. A one-shot sandbox (maxExecsPerSandbox: 1) does not: it is
// the control, and what a program prints must not differ between the two.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

const REUSED_PRELOAD = ["traceback", "linecache", "typing", "string", "copy", "array", "decimal", "fractions", "datetime"];

const PROBE = `
import sys
print(sorted(m for m in ${JSON.stringify(REUSED_PRELOAD)} if m in sys.modules))
print(sorted(m for m in ("random", "threading", "queue") if m in sys.modules))
`;
const RAISES = "def f(x):\n    return 1 / x\nf(0)\n";

describe("preloaded modules in a reused sandbox", { timeout: 120_000 }, () => {
  let reused: SandboxFixture;
  let oneShot: SandboxFixture;
  before(async () => {
    reused = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, runtimes: { node: { enabled: false } } });
    oneShot = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, maxExecsPerSandbox: 1, runtimes: { node: { enabled: false } } });
  });
  after(async () => {
    await reused?.stop();
    await oneShot?.stop();
  });

  it("a reused sandbox's executions find the common modules imported; a one-shot sandbox's do not", async () => {
    const r = await reused.client.exec({ language: "python", code: PROBE });
    assert.equal(
      r.stdout,
      `${JSON.stringify([...REUSED_PRELOAD].sort())
        .replaceAll('"', "'")
        .replaceAll(",", ", ")}\n[]\n`,
      describeResult(r),
    );
    const o = await oneShot.client.exec({ language: "python", code: PROBE });
    assert.equal(o.stdout, "[]\n[]\n", describeResult(o));
  });

  it("a program that prints nothing gets empty streams (the warm-up print writes nothing)", async () => {
    for (const fx of [reused, oneShot]) {
      const r = await fx.client.exec({ language: "python", code: "pass" });
      assert.deepEqual([r.stdout, r.stderr, r.exitCode], ["", "", 0], describeResult(r));
    }
  });

  it("tracebacks and syntax errors read the same whether the traceback path was warmed or not", async () => {
    for (const code of [RAISES, "def g(:\n", "import linecache\nprint(sorted(linecache.cache))\nraise KeyError('k')\n"]) {
      const r = await reused.client.exec({ language: "python", code });
      const o = await oneShot.client.exec({ language: "python", code });
      assert.equal(r.exitCode, 1, describeResult(r));
      assert.deepEqual([r.stdout, r.stderr], [o.stdout, o.stderr], `${describeResult(r)}\nvs\n${describeResult(o)}`);
      assert.ok(!r.stderr.includes("warm-up") && r.stderr.includes("Error"), r.stderr);
    }
    const r = await reused.client.exec({ language: "python", code: RAISES });
    assert.match(r.stderr, /File "<string>", line 2, in f\n\s+return 1 \/ x\n/, "the program's own line is shown");
  });
});
