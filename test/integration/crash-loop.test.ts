// No message can crash-loop an actor. Two ways a message beats the checks at the edge:
// - it kills the actor that handles it (a native crash, the OOM killer: here a failpoint SIGKILLs the
//   process on one task). Reward (a work-queue consumer) and the learner (an ordered reader) each die on
//   their message a few times, then set it aside to the dead-letter subject, and the run finishes;
// - it passes every check but breaks the training step (its loss overflows): the learner tries each batch
//   of the step alone, dead-letters the one that fails, tops the step up and trains, without exiting.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { cliMain, startRun, storedMessages, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { ActorLauncher } from "../../deploy/local/launcher.js";
import { encodeRolloutBatch, decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { ROLLOUT_SCHEMA_VERSION } from "../../streams/rollout-schema.js";
import { Hdr, StateKeys } from "../../streams/index.js";
import { testSampling, validRow } from "../helpers/rollout-fixtures.js";
import type { RunFixture } from "../helpers/run-fixture.js";

const learnerSteps = storedSteps;

async function deadLetters(run: RunFixture) {
  return (await storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.dlq)).map((m) => ({
    reason: m.header?.get(Hdr.error) ?? "",
    actor: m.header?.get(Hdr.actor) ?? "",
    subject: m.header?.get(Hdr.originalSubject) ?? "",
    data: m.data,
  }));
}

test("a message that kills its actor every time is set aside after a few deaths; the run finishes", async () => {
  const run = await startRun(
    "crashloop",
    {
      rl: { steps: 6, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
      nats: { taskAckWaitMs: 2000 },
      checkpoint: { interval: 2, keepLast: 2, keepVersions: 3 },
    },
    // The launcher's default: three restarts in a row. Without the guard, either poison would use them up.
    { maxRestarts: 3 },
  );
  const rewardPoison = "crashloop:0:2";
  const learnerPoison = "crashloop:0:5";
  try {
    for (const name of ["checkpoint", "orchestrator", "inference"]) run.launcher.start({ name, replica: 0 });
    run.launcher.start({ name: "reward", replica: 0, env: { ROLLSTREAM_FAILPOINTS: `reward.score=${rewardPoison}` } });
    run.launcher.start({ name: "learner", replica: 0, env: { ROLLSTREAM_FAILPOINTS: `learner.train=${learnerPoison}` } });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 150_000, join(run.dir, "logs"));

    // Positive control: both failpoints really killed their actor more than once.
    const hits = (actor: string, point: string) => readFileSync(join(run.dir, "logs", `${actor}-0.log`), "utf8").split(`failpoint ${point} hit`).length - 1;
    assert.ok(hits("reward", "reward.score") >= 2, `reward died on ${rewardPoison} ${hits("reward", "reward.score")} times`);
    assert.ok(hits("learner", "learner.train") >= 2, `learner died on ${learnerPoison} ${hits("learner", "learner.train")} times`);

    const dead = await deadLetters(run);
    const rewardSetAside = dead.filter((d) => d.actor === "reward" && /^crash_loop: reward died or hung \d+ times/.test(d.reason));
    assert.equal(rewardSetAside.length, 1, dead.map((d) => `${d.actor}: ${d.reason}`).join("\n"));
    assert.equal(rewardSetAside[0]!.subject, run.topology.names.subjects.rolloutsRaw);
    const learnerSetAside = dead.filter((d) => d.actor === "learner" && /^crash_loop: the learner died \d+ times training step \d+/.test(d.reason));
    assert.ok(learnerSetAside.length >= 1, dead.map((d) => `${d.actor}: ${d.reason}`).join("\n"));
    const setAsideTasks = learnerSetAside.flatMap((d) => decodeRolloutBatch(d.data).rows.map((r) => r.taskId));
    assert.ok(setAsideTasks.includes(learnerPoison), `the learner's poison batch is among those set aside: ${setAsideTasks.join(", ")}`);

    // The reward poison was never scored; every step trained on a full batch; nothing was scored twice.
    const scored = (await storedMessages(run.topology.jsm, run.topology.names.streams.rollouts, run.topology.names.subjects.rolloutsScored)).map(
      (m) => decodeRolloutBatch(m.data).rows[0]!.taskId,
    );
    assert.ok(!scored.includes(rewardPoison), "the group that killed reward was never scored");
    assert.equal(new Set(scored).size, scored.length, "no task scored twice");
    const steps = await learnerSteps(run);
    assert.deepEqual(
      [...new Set(steps.map((s) => s.step))].sort((a, b) => a! - b!),
      [1, 2, 3, 4, 5, 6],
    );
    for (const s of steps) assert.ok(s.rows.trained >= 8, `step ${s.step}: ${s.rows.trained} samples`);
  } finally {
    await run.close();
  }
});

test("a run whose learner died on a batch resumes: the restarted learner sets the batch aside and finishes", async () => {
  // maxRestarts 0: the first death ends the learner, as a launcher that gave up would. Then the run is
  // resumed as `rollstream train` resumes it: the same actors started again over the same streams and KV.
  const run = await startRun("resumecrash", {
    rl: { steps: 4, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 3 },
  });
  const poison = "resumecrash:0:3";
  const learner = { name: "learner", replica: 0, env: { ROLLSTREAM_FAILPOINTS: `learner.train=${poison}` } };
  try {
    for (const name of ["checkpoint", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    run.launcher.start(learner);
    await run.launcher.waitExit("learner");
    assert.notEqual(await run.state.get(StateKeys.runStatus), "done", "the run stopped when its learner died");
    const resumed = new ActorLauncher({ binPath: cliMain, configPath: run.configPath, natsUrl: run.nats.url, logDir: join(run.dir, "logs"), maxRestarts: 3 });
    try {
      resumed.start(learner);
      await waitUntil("resumed run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 90_000, join(run.dir, "logs"));
    } finally {
      await resumed.stopAll(5000);
    }
    const dead = await deadLetters(run);
    const setAside = dead.filter((d) => d.actor === "learner" && d.reason.startsWith("crash_loop: "));
    assert.ok(
      setAside.some((d) => decodeRolloutBatch(d.data).rows.some((r) => r.taskId === poison)),
      dead.map((d) => d.reason).join("\n"),
    );
    assert.deepEqual(
      [...new Set((await learnerSteps(run)).map((s) => s.step))].sort((a, b) => a! - b!),
      [1, 2, 3, 4],
    );
  } finally {
    await run.close();
  }
});

test("a batch that breaks the training step is tried alone, dead-lettered, and the step is trained without it", async () => {
  // No masking of importance ratios: a sampler logprob of -1000 passes every check at the edge (finite,
  // ids in the vocabulary) but its ratio exp(logp + 1000) overflows the loss of any step it is part of.
  const run = await startRun("kernelpath", {
    rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling, loss: { name: "rl", maskHigh: Infinity } },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("policy v0", async () => (await run.state.policyVersion()) >= 0, 30_000, join(run.dir, "logs"));
    const meta = { run: "kernelpath", schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: "test", createdAt: new Date().toISOString() };
    const rows = [0, 1, 2, 3].map((i) => validRow("s-overflow", i, i === 2 ? { samplerLogprobs: Float32Array.from([-1000, -1000]), advantage: 1 } : {}));
    await run.js.publish(run.topology.names.subjects.rolloutsScored, encodeRolloutBatch(rows, meta), {
      msgID: "s-overflow",
      headers: makeHeaders({ contentType: ContentType.arrow }),
    });
    // maxRestarts is 0: had the learner exited, the run would not finish.
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 90_000, join(run.dir, "logs"));
    const dead = await deadLetters(run);
    assert.equal(dead.length, 1, dead.map((d) => d.reason).join("\n"));
    assert.match(dead[0]!.reason, /^kernel: step \d+ failed on this batch \(4 rows, task s-overflow\): its loss is -?Infinity|NaN/);
    assert.equal(dead[0]!.actor, "learner");
    const steps = await learnerSteps(run);
    assert.equal(steps.length, 3);
    for (const s of steps) {
      assert.ok(s.rows.trained >= 8, `step ${s.step} trained on a full batch`);
      assert.ok(Number.isFinite(s.loss), `step ${s.step} loss ${s.loss} is finite`);
    }
  } finally {
    await run.close();
  }
});
