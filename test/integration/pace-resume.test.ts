// Under rl.staleness pace which messages a step trains on depends on when they arrived, so a learner restored
// from a checkpoint cannot rebuild its lost steps by reading again: it follows the stream sequences its earlier
// life recorded in its step records. SIGKILL the learner between checkpoints of a paced run with a slow and a
// fast environment; the new learner must redo each lost step on the same messages (the same `seqs`) with the
// same loss, bit for bit, and say that it follows the earlier life.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRun, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { writeTimedEnv } from "../helpers/slow-env.js";
import { testSampling } from "../helpers/rollout-fixtures.js";
import { StateKeys } from "../../streams/index.js";

test("a restored learner under pace redoes its lost steps on the messages its earlier life recorded, bit-exactly", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-pace-resume-envs-"));
  const before = process.env["ROLLSTREAM_ENV_PATH"];
  writeTimedEnv(dir, "slow", 400);
  process.env["ROLLSTREAM_ENV_PATH"] = writeTimedEnv(dir, "fast", 0);
  const run = await startRun("paceresume", {
    environments: [
      { id: "slow@^1", key: "slow" },
      { id: "fast@^1", key: "fast" },
    ],
    rl: {
      steps: 12,
      batchSize: 8,
      groupSize: 4,
      maxAsyncLevel: 1,
      maxOffPolicySteps: 2,
      staleness: "pace",
      pool: { band: [0, 1], quotas: { slow: 1, fast: 1 } },
      sampling: testSampling,
    },
    checkpoint: { interval: 4, keepLast: 3, keepVersions: 3 },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    await waitUntil(
      "a step between checkpoints",
      async () => {
        const step = await run.state.learnerStep();
        return step >= 5 && step % 4 !== 0 && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 4;
      },
      120_000,
      `${run.dir}/logs`,
    );
    process.kill(run.launcher.pid("learner", 0)!, "SIGKILL");
    await new Promise((r) => setTimeout(r, 300));
    run.launcher.start({ name: "learner", replica: 1 });
    await waitUntil("the run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 180_000, `${run.dir}/logs`);

    const steps = await storedSteps(run);
    const byStep = new Map<number, { loss: number; seqs: string }[]>();
    for (const e of steps) byStep.set(e.step, [...(byStep.get(e.step) ?? []), { loss: e.loss, seqs: e.seqs.join(",") }]);
    const redone = [...byStep.entries()].filter(([, lives]) => lives.length > 1);
    assert.ok(redone.length > 0, "the kill landed between checkpoints: some steps were done twice");
    for (const [step, lives] of redone) {
      assert.ok(
        lives.every((l) => l.seqs === lives[0]!.seqs),
        `step ${step} redone on other messages: ${lives.map((l) => l.seqs).join(" | ")}`,
      );
      assert.ok(
        lives.every((l) => l.loss === lives[0]!.loss),
        `step ${step} recomputed with another loss: ${lives.map((l) => l.loss)}`,
      );
    }
    assert.deepEqual(
      [...byStep.keys()].sort((a, b) => a - b),
      Array.from({ length: 12 }, (_, i) => i + 1),
    );
    const log = readFileSync(join(run.dir, "logs", "learner-1.log"), "utf8");
    assert.match(log, /redoing the earlier life's paced steps on the messages it recorded/);
  } finally {
    if (before === undefined) delete process.env["ROLLSTREAM_ENV_PATH"];
    else process.env["ROLLSTREAM_ENV_PATH"] = before;
    await run.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
