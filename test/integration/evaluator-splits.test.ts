// An environment that offers a held-out split besides eval (arithmetic's "hard", with digits >= 2) is
// evaluated on both: the version's summary keeps the eval split's figures where they always were (passAt1,
// byEnv: what train prints, the dashboard plots and earlier tests read) and adds the other split under its
// own name; on rs.<run>.eval the other split's result and samples carry its name and are stored once each.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { decodeMsgpack, EvalMessageSchema, StateKeys } from "../../streams/index.js";
import { testSampling } from "../helpers/rollout-fixtures.js";

test("the evaluator reports the hard split beside the eval split, under its own key", async () => {
  const run = await startRun("evalsplits", {
    environments: [{ id: "arithmetic@^1", args: { digits: 2, ops: ["+"], seed: 3 } }],
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
    eval: { interval: 0, n: 6, samples: 1 },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward", "evaluator"]) run.launcher.start({ name, replica: 0 });
    await waitUntil(
      "v0 and v2 evaluated",
      async () => {
        const r = (await run.state.get(StateKeys.evalResults)) ?? {};
        return r["0"] !== undefined && r["2"] !== undefined;
      },
      90_000,
      join(run.dir, "logs"),
    );
    const results = (await run.state.get(StateKeys.evalResults))!;
    for (const v of ["0", "2"]) {
      const r = results[v]!;
      assert.equal(r.n, 6, "the eval split's figures stay at the top level");
      assert.deepEqual(Object.keys(r.byEnv), ["arithmetic@1.0.0"]);
      assert.deepEqual(Object.keys(r.splits ?? {}), ["hard"]);
      const hard = r.splits!["hard"]!;
      assert.equal(hard.n, 6);
      assert.ok(hard.passAt1 >= 0 && hard.passAt1 <= 1);
      assert.deepEqual(Object.keys(hard.passAtK), ["pass@1"]);
      assert.deepEqual(Object.keys(hard.byEnv), ["arithmetic@1.0.0"]);
    }
    const messages = (await storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.eval)).map((m) =>
      decodeMsgpack(EvalMessageSchema, m.data),
    );
    for (const v of [0, 2]) {
      const mine = messages.filter((m) => m.version === v);
      const evalResults = mine.filter((m) => m.kind === "result" && m.split === undefined);
      const hardResults = mine.filter((m) => m.kind === "result" && m.split === "hard");
      assert.equal(evalResults.length, 1, `v${v}: one eval result, as before`);
      assert.equal(hardResults.length, 1, `v${v}: one hard result, stored once`);
      const hardSamples = mine.filter((m) => m.kind === "sample" && m.split === "hard");
      assert.equal(hardSamples.length, 6 * 2);
      assert.ok(hardSamples.every((s) => s.kind === "sample" && s.exampleId.startsWith("hard-")));
      assert.equal(mine.filter((m) => m.kind === "sample" && m.split === undefined).length, 6 * 2);
    }
  } finally {
    await run.close();
  }
});
