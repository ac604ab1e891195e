// Well-formed messages with wrong values (a token past the vocabulary, a rollout past the context, a
// policy version from the future, an absurd advantage, a group that does not match its task) are
// dead-lettered with a reason that names what is wrong, and the run goes on and finishes: no actor
// exits, the learner trains only on clean rows. On the main before this check, the first one ended
// the run (the learner's kernels threw, it restarted onto the same batch, and gave up).
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { encodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutRow } from "../../streams/rollout-schema.js";
import { Hdr, RunChannels, StateKeys, type RawRollout } from "../../streams/index.js";
import { arithmeticTask, testSampling, validRollout, validRow } from "../helpers/rollout-fixtures.js";

const sampling = testSampling;

test("wrong-but-well-formed raw groups and scored batches are dead-lettered with their reason; the run finishes", async () => {
  const run = await startRun("semantic", {
    rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, maxAbsAdvantage: 10, sampling },
  });
  try {
    const channels = new RunChannels(run.topology.wire);
    const task = (label: string) => arithmeticTask("semantic", 9, label, 4);
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    // Into the live run, once the first policy exists (a group cannot honestly predate it).
    await waitUntil("policy v0", async () => (await run.state.policyVersion()) >= 0, 30_000, `${run.dir}/logs`);
    const four = (bad: RawRollout) => [validRollout(), validRollout(), bad, validRollout()];
    await channels.rawRollouts.publish({
      task: task("vocab"),
      rollouts: four(validRollout({ completionIds: [51, 300], completionMask: [1, 1], samplerLogprobs: [-1, -1] })),
      producer: "test",
    });
    const long = Array.from({ length: 150_000 }, () => 50);
    await channels.rawRollouts.publish({ task: task("context"), rollouts: four(validRollout({ promptIds: long })), producer: "test" });
    const future = [
      { version: 0, start: 0, end: 1 },
      { version: 1_000_000, start: 1, end: 2 },
    ];
    await channels.rawRollouts.publish({
      task: task("future"),
      rollouts: four(validRollout({ policyVersionMax: 1_000_000, versionSpans: future })),
      producer: "test",
    });
    await channels.rawRollouts.publish({ task: task("group"), rollouts: [validRollout(), validRollout()], producer: "test" });
    // Scored batches published straight onto the learner's subject (as a buggy or hostile producer would).
    const meta = { run: "semantic", schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: "test", createdAt: new Date().toISOString() };
    const pub = (rows: RolloutRow[], id: string) =>
      run.js.publish(run.topology.names.subjects.rolloutsScored, encodeRolloutBatch(rows, meta), {
        msgID: id,
        headers: makeHeaders({ contentType: ContentType.arrow }),
      });
    await pub(
      [0, 1, 2, 3].map((i) => validRow("s-vocab", i, i === 1 ? { completionIds: Int32Array.from([51, 300]) } : {})),
      "s-vocab",
    );
    await pub(
      [0, 1, 2, 3].map((i) => validRow("s-future", i, { policyVersionMin: 1_000_000, policyVersionMax: 1_000_000 })),
      "s-future",
    );
    await pub(
      [0, 1, 2, 3].map((i) => validRow("s-adv", i, i === 0 ? { advantage: 1e30 } : {})),
      "s-adv",
    );

    // maxRestarts is 0: an actor that exits would leave the run unfinished and fail this wait.
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 60_000, `${run.dir}/logs`);

    const dead = await storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.dlq);
    const reasons = dead.map((m) => m.header?.get(Hdr.error) ?? "");
    const expect: Array<[RegExp, string]> = [
      [/^vocab: rollout 2 of task semantic:9:vocab has token id 300, outside the model's vocabulary \[0, 288\)/, "raw vocab"],
      [
        /^context: 1 of 4 rollouts left out \(rollout 2 of task semantic:9:context has 150002 tokens \(150000 prompt \+ 2 completion\), more than the 48-token context/,
        "raw context",
      ],
      [/^future_version: rollout 2 of task semantic:9:future claims policy version 1000000, but the newest is \d+/, "raw future"],
      [/^group: task semantic:9:group asked for 4 rollouts, the group has 2/, "raw group"],
      [/^vocab: row 1 \(task s-vocab\) has token id 300/, "scored vocab"],
      [/^future_version: row 0 \(task s-future\) claims policy version 1000000/, "scored future"],
      [/^advantage: row 0 \(task s-adv\) has advantage 1\.0000000150474662e\+30, beyond rl.maxAbsAdvantage 10/, "scored advantage"],
    ];
    for (const [pattern, what] of expect)
      assert.ok(
        reasons.some((r) => pattern.test(r)),
        `${what} dead-lettered: ${pattern} not in\n${reasons.join("\n")}`,
      );
    assert.equal(dead.length, expect.length, reasons.join("\n"));
    // The learner trained every step on clean rows only: each step's samples are exactly the batch size.
    const steps = await storedSteps(run);
    assert.equal(steps.length, 3);
    for (const e of steps) assert.ok(e.rows.trained >= 8, `step ${e.step} trained on a full batch of clean rows`);
  } finally {
    await run.close();
  }
});
