// The learner drops samples staler than maxOffPolicySteps, counts them, and still steps on the rest.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { encodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutRow } from "../../streams/rollout-schema.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";
import { StepRecordSchema, type StepRecord } from "../../streams/index.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";

function rows(version: number, tag: string, reward: (i: number) => number): RolloutRow[] {
  return Array.from({ length: 4 }, (_, i) => ({
    taskId: `${tag}`,
    groupId: tag,
    env: "arithmetic@1.0.0",
    exampleId: `${tag}-${i}`,
    promptIds: Int32Array.from([257, 260, 49, 43, 50, 263, 261]),
    completionIds: Int32Array.from([51, 263]),
    completionMask: Uint8Array.from([1, 1]),
    samplerLogprobs: Float32Array.from([-5.6, -5.6]),
    policyVersionMin: version,
    policyVersionMax: version,
    versionSpans: [{ version, start: 0, end: 2 }],
    reward: reward(i),
    advantage: reward(i) - 0.5,
    rewardComponents: { correct: reward(i) },
    isTruncated: false,
    stopReason: "eos",
    numTurns: 1,
    generateMs: 1,
    scoreMs: 1,
    step: version,
    exampleIndex: i,
    turnOffsets: Int32Array.from([0]),
    metrics: {},
    envMs: 0,
    errors: [],
    stateJson: "{}",
    messages: [
      { role: "user", content: "1+2" },
      { role: "assistant", content: "3" },
    ],
  }));
}

test("stale samples are dropped and counted; dead-lettered batches do not stop the learner", async () => {
  const run = await startRun("stale", {
    rl: { steps: 3, batchSize: 4, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 0 },
    checkpoint: { interval: 1, keepLast: 2, keepVersions: 2 },
  });
  try {
    const events: StepRecord[] = [];
    const sub = run.nc.subscribe(run.topology.names.subjects.steps);
    (async () => {
      for await (const m of sub) events.push(decodeMsgpack(StepRecordSchema, m.data));
    })();
    const scored = run.topology.names.subjects.rolloutsScored;
    const pub = (r: RolloutRow[], id: string) =>
      run.js.publish(
        scored,
        encodeRolloutBatch(r, { run: "stale", schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: "test", createdAt: new Date().toISOString() }),
        {
          msgID: id,
          headers: makeHeaders({ contentType: ContentType.arrow }),
        },
      );
    await pub(
      rows(0, "a", (i) => i % 2),
      "a",
    ); // step 1: fresh
    await pub(
      rows(0, "b", (i) => i % 2),
      "b",
    ); // at version 1: stale by 1 > 0 -> dropped
    await run.js.publish(scored, new TextEncoder().encode("not arrow"), { msgID: "junk" }); // dead-lettered
    await pub(
      rows(1, "c", (i) => i % 2),
      "c",
    ); // step 2
    await pub(
      rows(2, "d", (i) => i % 2),
      "d",
    ); // step 3
    run.launcher.start({ name: "checkpoint", replica: 0 });
    run.launcher.start({ name: "learner", replica: 0 });
    await waitUntil("3 learner steps", () => events.length >= 3, 60_000, `${run.dir}/logs`);
    const steps = [...events].sort((a, b) => a.step - b.step);
    assert.deepEqual(
      steps.map((e) => e.step),
      [1, 2, 3],
    );
    assert.deepEqual(
      steps.map((e) => e.rows.droppedStale),
      [0, 4, 0],
    );
    assert.equal(steps[2]!.droppedStaleTotal, 4);
    assert.deepEqual(
      steps.map((e) => e.rows.trained),
      [4, 4, 4],
    );
    const dlq = await run.topology.jsm.streams.getMessage(run.topology.names.streams.events, { last_by_subj: run.topology.names.subjects.dlq });
    assert.ok(dlq);
    assert.equal(new TextDecoder().decode(dlq.data), "not arrow");
    assert.equal(await run.state.policyVersion(), 3);
    sub.unsubscribe();
  } finally {
    await run.close();
  }
});
