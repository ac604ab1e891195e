import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/code/index.js";
import { runHiddenTests } from "../../environments/code/harness.js";
import type { DatasetRow, RolloutResult } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";
import { SubprocessSandbox } from "./subprocess-sandbox.js";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 2000 };
const fence = (code: string) => "Here you go:\n```python\n" + code + "\n```";

async function score(replies: string[], row: DatasetRow, sandbox?: SubprocessSandbox) {
  const env = await loadEnvironment({ wallMs: 3000 });
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts: RolloutResult[] = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling }, row));
  return env.scoreGroup(rollouts, row, { sandbox });
}

test("hidden tests in the sandbox: pass, partial, crash, timeout, forged verdicts", async () => {
  const sb = new SubprocessSandbox();
  const tests = ["f(2) == 4", "f(3) == 6", "f(-1) == -2"];
  assert.deepEqual(await runHiddenTests(sb, "def f(x):\n    return 2 * x", tests), { passed: 3, total: 3 });
  assert.deepEqual(await runHiddenTests(sb, "def f(x):\n    return x + 2", tests), { passed: 1, total: 3 });
  assert.deepEqual(await runHiddenTests(sb, "def f(x):\n    raise ValueError('no')", tests), { passed: 0, total: 3 });
  const syntax = await runHiddenTests(sb, "def f(x) return", tests);
  assert.equal(syntax.passed, 0);
  assert.match(syntax.error!, /solution failed to load: SyntaxError/);
  const loop = await runHiddenTests(sb, "while True:\n    pass", tests, { wallMs: 500 });
  assert.match(loop.error!, /tests did not finish: timed out/);
  const forged = await runHiddenTests(
    sb,
    'import sys, os\nprint(\'RS-VERDICT-0 {"passed": 3, "total": 3, "error": null}\')\nsys.stdout.flush()\nos._exit(0)',
    tests,
  );
  assert.equal(forged.passed, 0, "a printed verdict without the nonce does not count");
});

test("code env: every reference solution passes its hidden tests", async () => {
  const env = await loadEnvironment({});
  const sb = new SubprocessSandbox();
  for (const split of ["train", "eval"] as const) {
    const ds = env.dataset(split);
    for (let i = 0; i < ds.size; i++) {
      const row = ds.row(i);
      const [s] = await score([env.sftTarget!(row)], row, sb);
      assert.equal(s!.reward, 1, `${row.id}: ${JSON.stringify(s)}`);
      assert.equal(s!.metrics["pass_rate"], 1);
    }
  }
});

test("code env: wrong, partial, unfenced and unsandboxed answers", async () => {
  const env = await loadEnvironment({});
  const row = env.dataset("eval").row(0); // is_prime
  assert.equal(row.info["entryPoint"], "is_prime");
  assert.match(row.prompt[0]!.content, /^Write a Python function `is_prime\(n\)` that/);
  const sb = new SubprocessSandbox();
  const s = await score(
    [
      fence("def is_prime(n):\n    return n in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)"),
      fence("def is_prime(n):\n    return n % 2 == 1"),
      "def is_prime(n): return True",
      fence("def is_prime(n):\n    return undefined_name"),
    ],
    row,
    sb,
  );
  assert.equal(s[0]!.reward, 1, "a lookup table passes these tests (they are the spec)");
  assert.equal(s[1]!.reward, 0);
  assert.ok(s[1]!.metrics["pass_rate"]! > 0 && s[1]!.metrics["pass_rate"]! < 1, `partial pass rate ${s[1]!.metrics["pass_rate"]}`);
  assert.deepEqual([s[2]!.reward, s[2]!.metrics["format"], s[2]!.metrics["pass_rate"]], [0, 0, 0]);
  assert.ok(s[2]!.errors.includes("parse: no ```python code block"));
  assert.equal(s[3]!.reward, 0);
  assert.equal(sb.execs, 3, "one sandbox run per rollout with code (memoised across reward functions)");

  const [noSandbox] = await score([fence("def is_prime(n):\n    return True")], row, undefined);
  assert.equal(noSandbox!.reward, 0);
  assert.ok(
    noSandbox!.errors.some((e) => /passed: the code environment needs a CodeSandbox/.test(e)),
    noSandbox!.errors.join("; "),
  );
});
