// Two checks at the edges of a live run (issue 43):
// - a task the run's orchestrator could not have published (a group of a million, a billion tokens, an unknown
//   environment, an example past a finite dataset, a group one larger than the config's) is dead-lettered by
//   inference at once with a reason naming the field and the limit, never started nor retried, while good tasks
//   next to them are rolled out. Before the check the first held inference for 24 minutes and the second was
//   retried as transient for 90 s and more;
// - a raw group whose assistant text contradicts its token ids is dead-lettered by reward before it is scored,
//   so nothing of it is trained; the same group with consistent text is scored (the positive control).
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, waitUntil, type RunFixture } from "../helpers/run-fixture.js";
import { arithmeticTask, testSampling, validRollout } from "../helpers/rollout-fixtures.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { Hdr, RunChannels, type Task } from "../../streams/index.js";

const run = "edges";

async function deadLetters(r: RunFixture): Promise<Array<{ reason: string; actor: string; subject: string }>> {
  const names = r.topology.names;
  return (await storedMessages(r.topology.jsm, names.streams.events, names.subjects.dlq)).map((m) => ({
    reason: m.header?.get(Hdr.error) ?? "",
    actor: m.header?.get(Hdr.actor) ?? "",
    subject: m.header?.get(Hdr.originalSubject) ?? "",
  }));
}

async function rawTaskIds(r: RunFixture, channels: RunChannels): Promise<string[]> {
  const names = r.topology.names;
  const raw = await storedMessages(r.topology.jsm, names.streams.rollouts, names.subjects.rolloutsRaw);
  return Promise.all(raw.map(async (m) => (await channels.rawRollouts.decodeMessage(m)).task.taskId));
}

async function scoredTaskIds(r: RunFixture): Promise<string[]> {
  const names = r.topology.names;
  const scored = await storedMessages(r.topology.jsm, names.streams.rollouts, names.subjects.rolloutsScored);
  return scored.flatMap((m) => decodeRolloutBatch(m.data).rows.map((row) => row.taskId));
}

test("tasks outside the run's limits are dead-lettered by inference within seconds; good tasks next to them are rolled out", async () => {
  const r = await startRun(run, {
    // math has a finite train split (36 problems); its prompts need more than the tiny model's 48 tokens.
    model: { vocabSize: 288, hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, maxPositionEmbeddings: 192, threads: 1, seed: 5 },
    environments: [{ id: "arithmetic@^1", args: { digits: 1, ops: ["+"], seed: 3 } }, { id: "math@^1" }],
    rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling },
  });
  try {
    const channels = new RunChannels(r.topology.wire);
    // No orchestrator: the only tasks are this test's.
    for (const name of ["checkpoint", "learner", "inference", "reward"]) r.launcher.start({ name, replica: 0 });
    await waitUntil("policy v0", async () => (await r.state.policyVersion()) >= 0, 30_000, `${r.dir}/logs`);
    const task = (label: string, edit: Partial<Task> = {}): Task => ({ ...structuredClone(arithmeticTask(run, 9, label, 4)), ...edit });
    const math = { env: "math@1.0.0", envKey: "math" };
    const bad: Array<[Task, RegExp]> = [
      [task("huge-group", { groupSize: 1_000_000 }), /^task: task edges:9:huge-group has groupSize 1000000, but the run's rl\.groupSize is 4$/],
      // The positive control: one more than the config is as wrong as a million, and would roll out if unchecked.
      [task("group-plus-one", { groupSize: 5 }), /^task: task edges:9:group-plus-one has groupSize 5, but the run's rl\.groupSize is 4$/],
      [
        task("huge-tokens", { sampling: { ...testSampling, maxTokens: 1e9 } }),
        /^task: task edges:9:huge-tokens has sampling\.maxTokens 1000000000, above the run's rl\.sampling\.maxTokens 4$/,
      ],
      [
        task("no-env", { envKey: "nosuchenv" }),
        /^task: task edges:9:no-env has envKey "nosuchenv", which is not an environment of this run \(arithmetic, math\)$/,
      ],
      [task("past-end", { ...math, exampleIndex: 36 }), /^task: task edges:9:past-end has exampleIndex 36, outside math's train split \[0, 36\)$/],
    ];
    const good = [task("good-arith", { exampleIndex: 5 }), task("good-math", { ...math, exampleIndex: 35 })];
    const t0 = Date.now();
    // Interleaved, so a bad task that held inference up would hold the good ones up too.
    for (const [i, [t]] of bad.entries()) {
      await channels.tasks.publish(t);
      if (good[i]) await channels.tasks.publish(good[i]!);
    }
    await waitUntil("every bad task dead-lettered", async () => (await deadLetters(r)).length >= bad.length, 20_000, `${r.dir}/logs`);
    const seconds = (Date.now() - t0) / 1000;
    await waitUntil(
      "the good tasks rolled out",
      async () => {
        const ids = await rawTaskIds(r, channels);
        return good.every((t) => ids.includes(t.taskId));
      },
      30_000,
      `${r.dir}/logs`,
    );

    const dead = await deadLetters(r);
    for (const [t, reason] of bad) {
      const hit = dead.filter((d) => reason.test(d.reason));
      assert.equal(hit.length, 1, `${t.taskId} dead-lettered once with ${reason}; dead letters:\n${dead.map((d) => d.reason).join("\n")}`);
      assert.equal(hit[0]!.actor, "inference");
      assert.equal(hit[0]!.subject, r.topology.names.subjects.tasks);
    }
    assert.equal(dead.length, bad.length, dead.map((d) => d.reason).join("\n"));
    assert.ok(seconds < 20, `dead-lettered within ${seconds.toFixed(1)} s (a retried task takes 90 s and more)`);
    // Nothing of a bad task was rolled out, and the tasks stream (a work queue) holds none of them any more.
    const rolled = await rawTaskIds(r, channels);
    for (const [t] of bad) assert.ok(!rolled.includes(t.taskId), `${t.taskId} was never rolled out`);
    assert.equal((await r.topology.jsm.streams.info(r.topology.names.streams.tasks)).state.messages, 0, "no task left to redeliver");
  } finally {
    await r.close();
  }
});

test("a raw group whose text contradicts its ids is dead-lettered by reward and never scored; the same group with consistent text is scored", async () => {
  const r = await startRun(run, { rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: testSampling } });
  try {
    const channels = new RunChannels(r.topology.wire);
    for (const name of ["checkpoint", "learner", "reward"]) r.launcher.start({ name, replica: 0 });
    await waitUntil("policy v0", async () => (await r.state.policyVersion()) >= 0, 30_000, `${r.dir}/logs`);
    // Example 0 is "1+2" (answer 3). Rollout 2's ids say 4, its text says 3: scored on the text it would be right,
    // trained on the ids it would teach 1+2=4 at a positive advantage.
    const lying = validRollout({ completionIds: [52, 263] });
    const wrong = validRollout({
      completionIds: [52, 263],
      messages: [
        { role: "user", content: "1+2" },
        { role: "assistant", content: "4" },
      ],
    });
    const contradicting = arithmeticTask(run, 9, "contradicting", 4);
    const consistent = arithmeticTask(run, 9, "consistent", 4);
    await channels.rawRollouts.publish({ task: contradicting, rollouts: [validRollout(), validRollout(), lying, validRollout()], producer: "test" });
    await channels.rawRollouts.publish({ task: consistent, rollouts: [validRollout(), validRollout(), wrong, validRollout()], producer: "test" });
    // A group that never went through inference, for a task this run would not send (3 rollouts, the run's
    // groupSize is 4): its size matches its own task, so only the task check catches it.
    const forged = arithmeticTask(run, 9, "forged", 3);
    await channels.rawRollouts.publish({ task: forged, rollouts: [validRollout(), validRollout(), validRollout()], producer: "test" });

    await waitUntil("the consistent group scored", async () => (await scoredTaskIds(r)).includes(consistent.taskId), 30_000, `${r.dir}/logs`);
    await waitUntil("the bad groups dead-lettered", async () => (await deadLetters(r)).length >= 2, 20_000, `${r.dir}/logs`);
    const dead = (await deadLetters(r)).sort((a, b) => a.reason.localeCompare(b.reason));
    assert.equal(dead.length, 2, dead.map((d) => d.reason).join("\n"));
    assert.match(dead[0]!.reason, /^task: task edges:9:forged has groupSize 3, but the run's rl\.groupSize is 4$/);
    assert.match(
      dead[1]!.reason,
      /^text: rollout 2 of task edges:9:contradicting turn 0 text does not decode from its ids \(at character 0: text "3" vs ids "4"\)$/,
    );
    for (const d of dead) {
      assert.equal(d.actor, "reward");
      assert.equal(d.subject, r.topology.names.subjects.rolloutsRaw);
    }
    const scored = await scoredTaskIds(r);
    assert.ok(!scored.includes(contradicting.taskId), "no row of the contradicting group reached rollouts.scored");
    assert.ok(!scored.includes(forged.taskId), "no row of the forged group reached rollouts.scored");
    assert.equal(scored.filter((id) => id === consistent.taskId).length, 4, "every row of the consistent group was scored");
  } finally {
    await r.close();
  }
});
