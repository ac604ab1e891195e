// Which idle sandbox a request goes to. Right after an execution its supervisor is still forking and preparing
// the next interpreter, and a request handed to it waits for that: the pool prefers the most recently used
// sandbox that has been back `settleMs`, and falls back to the most recent. settleMs: 0 is the control (always
// the most recent). A sandbox is told apart by its /workspace, a tmpfs of its own.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

const WHICH = "import os\nprint(os.stat('/workspace').st_dev)";
const SETTLE_MS = 1000;

async function sandboxOf(fx: SandboxFixture): Promise<string> {
  const r = await fx.client.exec({ language: "python", code: WHICH });
  assert.equal(r.exitCode, 0, describeResult(r));
  return r.stdout.trim();
}

/** Three executions: a first, a second 100 ms after it (its sandbox back but not settled), a third once both are settled. */
async function threeExecutions(settleMs: number): Promise<string[]> {
  const fx = await startSandboxFixture({ poolSize: 2, maxConcurrent: 1, settleMs, runtimes: { node: { enabled: false } } });
  try {
    await sleep(SETTLE_MS + 200);
    const first = await sandboxOf(fx);
    await sleep(100);
    const second = await sandboxOf(fx);
    await sleep(SETTLE_MS + 200);
    const third = await sandboxOf(fx);
    assert.equal(fx.service.stats().sandboxes_started_total, 2, "both executions ran on the two pool sandboxes");
    return [first, second, third];
  } finally {
    await fx.stop();
  }
}

describe("the pool's choice of an idle sandbox", { timeout: 120_000 }, () => {
  it("a request skips the sandbox that has just come back for one that has settled, else takes the most recent", async () => {
    const [first, second, third] = await threeExecutions(SETTLE_MS);
    assert.notEqual(second, first, "the second request went to the other, settled sandbox");
    assert.equal(third, second, "with both settled, the most recently used one");
    const [c1, c2] = await threeExecutions(0);
    assert.equal(c2, c1, "control, settleMs 0: the most recent sandbox, just back");
  });
});
