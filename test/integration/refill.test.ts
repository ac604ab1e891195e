// Samples dropped as stale never reach the learner; the orchestrator notices a starved learner with an
// idle pipeline and tops it up, so a run whose staleness bound is tighter than its async level still
// finishes instead of hanging on its last step.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";

test("a starved learner gets refill tasks and the run finishes; drops are counted", async () => {
  const run = await startRun("refill", {
    rl: { steps: 5, batchSize: 8, groupSize: 4, maxAsyncLevel: 2, maxOffPolicySteps: 0, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("all 5 steps", async () => (await run.state.learnerStep()) >= 5, 120_000, `${run.dir}/logs`);
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 20_000, `${run.dir}/logs`);
    const steps = await storedSteps(run);
    const dropped = Math.max(...steps.map((e) => e.droppedStaleTotal));
    assert.ok(dropped > 0, "with maxAsyncLevel 2 and maxOffPolicySteps 0 some samples must be stale");
    assert.ok(
      steps.every((e) => e.stalenessMax === 0),
      "no stale sample was trained on",
    );
    assert.ok(((await run.state.get(StateKeys.orchestratorRefills)) ?? 0) > 0, "the orchestrator refilled");
  } finally {
    await run.close();
  }
});
