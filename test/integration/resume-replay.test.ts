// A learner killed mid-run restarts from its last checkpoint and recomputes the lost steps bit for bit;
// `rollstream replay` reproduces the recorded losses from a checkpoint over the stored stream.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startRun, waitUntil, replayInProcess } from "../helpers/run-fixture.js";
import { StateKeys, StepRecordSchema, type StepRecord } from "../../streams/index.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";

test("a SIGKILLed learner resumes from its checkpoint bit-exactly, and replay reproduces the losses", async () => {
  const run = await startRun("resume", {
    sft: { steps: 3, batchSize: 8 },
    rl: { steps: 16, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 3, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    checkpoint: { interval: 4, keepLast: 3, keepVersions: 3 },
  });
  try {
    const events: StepRecord[] = [];
    const sub = run.nc.subscribe(run.topology.names.subjects.steps);
    (async () => {
      for await (const m of sub) events.push(decodeMsgpack(StepRecordSchema, m.data));
    })();
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    // Kill between checkpoints (3 of every 4 steps), so the restored learner has steps to redo.
    await waitUntil(
      "a step between checkpoints",
      async () => {
        const step = await run.state.learnerStep();
        return step >= 2 && step % 4 !== 0 && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 0;
      },
      90_000,
      `${run.dir}/logs`,
    );
    process.kill(run.launcher.pid("learner", 0)!, "SIGKILL");
    await new Promise((r) => setTimeout(r, 200));
    const stepsBeforeKill = new Set(events.map((e) => e.step)).size;
    run.launcher.start({ name: "learner", replica: 1 });
    await waitUntil(
      "16 steps and the final checkpoint",
      async () => (await run.state.learnerStep()) >= 16 && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 16,
      120_000,
      `${run.dir}/logs`,
    );
    sub.unsubscribe();

    const byStep = new Map<number, number[]>();
    for (const e of events) byStep.set(e.step, [...(byStep.get(e.step) ?? []), e.loss]);
    const redone = [...byStep.entries()].filter(([, l]) => l.length > 1);
    const restoredLine = readFileSync(join(run.dir, "logs", "learner-1.log"), "utf8")
      .split("\n")
      .find((l) => l.includes("restored from checkpoint"));
    assert.ok(restoredLine, "the new learner restored a checkpoint");
    const restoredStep = JSON.parse(restoredLine).step as number;
    assert.ok(restoredStep < stepsBeforeKill, `restored step ${restoredStep}, killed after ${stepsBeforeKill}`);
    assert.equal(redone.length, stepsBeforeKill - restoredStep, "the restored learner redid exactly the steps after its checkpoint");
    for (const [step, losses] of redone)
      assert.ok(
        losses.every((l) => l === losses[0]),
        `step ${step} recomputed with a different loss: ${losses}`,
      );
    assert.deepEqual(
      [...byStep.keys()].sort((a, b) => a - b),
      Array.from({ length: 16 }, (_, i) => i + 1),
    );

    // Replay from the oldest kept checkpoint, against the step records on rs.<run>.steps.
    const { code, lines, rows } = await replayInProcess({ config: run.configPath, steps: "2", nats: run.nats.url });
    assert.equal(code, 0, lines.join("\n"));
    assert.equal(rows.length, 2);
    assert.ok(
      rows.every((r) => r.exact === true),
      lines.join("\n"),
    );
  } finally {
    await run.close();
  }
});
