// The evaluator evaluates v0, every eval.interval versions and the final one during the run, publishing
// every completion and a result per environment on rs.<run>.eval; SIGKILLed mid-run and restarted, it
// loses no scheduled evaluation and stores none twice. Weight versions it has not evaluated yet are not
// pruned, however far the learner runs ahead (keepVersions 1 here).
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { decodeMsgpack, StateKeys } from "../../streams/index.js";
import { EvalMessageSchema } from "../../streams/messages.js";
import { testSampling } from "../helpers/rollout-fixtures.js";

test("the evaluator publishes results and samples at the interval; a SIGKILL loses and duplicates nothing", async () => {
  const run = await startRun("evals", {
    rl: { steps: 10, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
    eval: { interval: 3, n: 6, samples: 2 },
    checkpoint: { interval: 5, keepLast: 2, keepVersions: 1 },
  });
  const schedule = [0, 3, 6, 9, 10];
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward", "evaluator"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("first evaluation", async () => Object.keys((await run.state.get(StateKeys.evalResults)) ?? {}).length >= 1, 60_000, join(run.dir, "logs"));
    process.kill(run.launcher.pid("evaluator")!, "SIGKILL");
    await run.launcher.waitExit("evaluator");
    run.launcher.start({ name: "evaluator", replica: 0 });
    await waitUntil(
      "every scheduled version evaluated",
      async () => {
        const r = (await run.state.get(StateKeys.evalResults)) ?? {};
        return schedule.every((v) => r[String(v)] !== undefined);
      },
      120_000,
      join(run.dir, "logs"),
    );
    await run.launcher.waitExit("evaluator"); // it exits on its own once the final version is done

    const results = (await run.state.get(StateKeys.evalResults))!;
    assert.deepEqual(
      Object.keys(results)
        .map(Number)
        .sort((a, b) => a - b),
      schedule,
    );
    for (const v of schedule) {
      const r = results[String(v)]!;
      assert.equal(r.skipped, undefined, `v${v} was evaluated, not skipped (its weights were kept)`);
      assert.equal(r.n, 6);
      assert.ok(r.passAt1 >= 0 && r.passAt1 <= 1);
      assert.deepEqual(Object.keys(r.passAtK).sort(), ["pass@1", "pass@2"]);
    }
    const messages = (await storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.eval)).map((m) =>
      decodeMsgpack(EvalMessageSchema, m.data),
    );
    for (const v of schedule) {
      const mine = messages.filter((m) => m.version === v);
      const resultsOfV = mine.filter((m) => m.kind === "result");
      assert.equal(resultsOfV.length, 1, `v${v}: one result message (one environment), stored once`);
      const samples = mine.filter((m) => m.kind === "sample");
      assert.equal(samples.length, 6 * 3, `v${v}: a greedy and 2 sampled completions for each of 6 problems, stored once`);
      assert.equal(samples.filter((s) => s.kind === "sample" && s.greedy).length, 6);
      const s = samples[0]!;
      assert.ok(s.kind === "sample" && s.messages.some((m) => m.role === "assistant"), "a sample carries its transcript");
    }
  } finally {
    await run.close();
  }
});
