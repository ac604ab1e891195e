// Issue 43: a policy.version that is not JSON (written by hand while the learner waits) made the reward actor fail
// every group on the KV read it checks rollouts' versions against; each was nak'd until max_deliver and dead-lettered
// (296 good rollouts), a fault of the KV blamed on the messages. Now it is reported as a fault of the run's state,
// naming the bucket and key, and the newest announced weights version stands in: every good group is scored. The
// positive control: a group that does claim a version from the future is still dead-lettered, against that version.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startRun, storedMessages, storedOutcomes, waitUntil } from "../helpers/run-fixture.js";
import { startInProcess } from "../helpers/in-process-actor.js";
import { arithmeticTask, validRollout } from "../helpers/rollout-fixtures.js";
import { RewardActor } from "../../actors/reward/reward.js";
import { Hdr, RunChannels, StateKeys } from "../../streams/index.js";

test("policy.version not JSON: reward scores every good group, dead-letters none of them, and names the key in a run-state error", async () => {
  const run = await startRun("rewardstate");
  const channels = new RunChannels(run.topology.wire);
  const reward = startInProcess("reward", RewardActor, { nc: run.nc, config: run.config, topology: run.topology });
  try {
    // The learner announced v3 and then wrote policy.version; a person then overwrote it by hand.
    await channels.weights.announcements.publish({ run: "rewardstate", version: 3, step: 3, phase: "rl", object: "v3", bytes: 0, sha256: "0".repeat(64) });
    await run.topology.kv.put(StateKeys.policyVersion, "{not json");
    const good = ["g0", "g1", "g2", "g3", "g4", "g5"];
    for (const label of good) {
      await channels.rawRollouts.publish({
        task: arithmeticTask("rewardstate", 0, label, 4),
        rollouts: [1, 2, 3, 4].map(() => validRollout()),
        producer: "test",
      });
    }
    // Sampled from v0 (not later than the announced v3), but for one rollout that claims a version from the future.
    // (No per-token version spans on it: an empty list says nothing, so only its range is checked.)
    const fromTheFuture = { ...validRollout({ policyVersionMax: 1_000_000 }), ...({ versionSpans: [] } as object) };
    const future = [validRollout(), validRollout(), fromTheFuture, validRollout()];
    await channels.rawRollouts.publish({ task: arithmeticTask("rewardstate", 0, "future", 4), rollouts: future, producer: "test" });

    const dlq = () => storedMessages(run.topology.jsm, run.topology.names.streams.events, run.topology.names.subjects.dlq);
    await waitUntil(
      "an outcome for every good group, and the future one dead-lettered",
      async () => (await storedOutcomes(run)).length >= good.length && (await dlq()).length >= 1,
      15_000,
    );
    const outcomes = await storedOutcomes(run);
    assert.deepEqual(outcomes.map((o) => o.taskId.split(":")[2]).sort(), good, "every good group scored, once");
    const dead = await dlq();
    assert.equal(dead.length, 1, `only the group from the future is dead-lettered: ${dead.map((m) => m.header.get(Hdr.error)).join(" | ")}`);
    assert.match(dead[0]!.header.get(Hdr.error), /^future_version: rollout 2 of task rewardstate:0:future claims policy version 1000000, but the newest is 3$/);

    const errors = reward.logs.filter((l) => l.level >= 50).map((l) => l.msg);
    const said = errors.filter((m) => m.startsWith("run state:"));
    assert.deepEqual(
      said,
      ['run state: KV rs-rewardstate-state policy.version is not valid JSON ("{not json"); using the newest announced weights version 3 instead'],
      "said once, naming the bucket and key",
    );
  } finally {
    await reward.stop();
    await run.close();
  }
});
