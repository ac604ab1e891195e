// A task is checked against the run's limits before any work: each limit refuses the first value past it
// with a reason naming the field and the limit, and (the controls) accepts the value at it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { checkTask, type TaskLimits } from "../../streams/task-limits.js";
import { isPoison } from "../../streams/dead-letter.js";
import { rejectReasonOf } from "../../streams/rollout-limits.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { loadRunEnvironments } from "../../actors/runtime/environments.js";
import { taskLimitsOf } from "../../actors/runtime/model-factory.js";
import { arithmeticTask, testSampling } from "../helpers/rollout-fixtures.js";
import type { Task } from "../../streams/index.js";

const limits: TaskLimits = {
  run: "r",
  groupSize: 4,
  maxTokens: 4,
  maxTemperature: 2,
  vocabSize: 288,
  steps: 3,
  envs: new Map([
    ["arithmetic", { id: "arithmetic@1.0.0", trainSize: Number.POSITIVE_INFINITY }],
    ["logic", { id: "logic@1.0.0", trainSize: 50 }],
  ]),
};
// A deep copy: the fixture's sampling object is shared.
const good = (): Task => structuredClone(arithmeticTask("r", 0, "0", 4));

function refused(edit: (t: Task) => void, reason: RegExp): void {
  const t = good();
  edit(t);
  assert.throws(
    () => checkTask(t, limits),
    (e: Error) => {
      assert.ok(isPoison(e), `${e.message} is poison (dead-lettered at once, never retried)`);
      assert.equal(rejectReasonOf(e.message), "task");
      assert.match(e.message, reason);
      return true;
    },
  );
}

test("a task of the run's own shape passes", () => {
  checkTask(good(), limits);
  checkTask({ ...good(), envKey: "logic", env: "logic@1.0.0", exampleIndex: 49, step: 2, round: 3, minPolicyVersion: 7 }, limits);
  checkTask({ ...good(), sampling: { ...testSampling, temperature: 2, topK: 288, maxTokens: 1, stop: ["</answer>"] } }, limits);
});

test("groupSize must be the run's rl.groupSize: a million, and one more than the config, are refused", () => {
  refused((t) => (t.groupSize = 1_000_000), /^task: task r:0:0 has groupSize 1000000, but the run's rl\.groupSize is 4$/);
  refused((t) => (t.groupSize = 5), /groupSize 5, but the run's rl\.groupSize is 4/);
  refused((t) => (t.groupSize = 3), /groupSize 3/);
});

test("sampling limits: maxTokens up to the config's, a finite temperature up to the bound, topK within the vocabulary, a few short stop strings", () => {
  refused((t) => (t.sampling.maxTokens = 1e9), /sampling\.maxTokens 1000000000, above the run's rl\.sampling\.maxTokens 4/);
  refused((t) => (t.sampling.maxTokens = 5), /sampling\.maxTokens 5, above/);
  refused((t) => (t.sampling.temperature = 2.5), /sampling\.temperature 2\.5, outside \[0, 2\]/);
  refused((t) => (t.sampling.temperature = Number.POSITIVE_INFINITY), /sampling\.temperature Infinity/);
  refused((t) => (t.sampling.topK = 289), /sampling\.topK 289, above the model's vocabulary of 288/);
  refused((t) => (t.sampling.stop = Array.from({ length: 17 }, (_, i) => `s${i}`)), /17 sampling\.stop strings, more than 16/);
  refused((t) => (t.sampling.stop = ["x".repeat(257)]), /sampling\.stop\[0\] of 257 characters, outside \[1, 256\]/);
});

test("run, environment key and id, example range and step", () => {
  refused((t) => (t.run = "other"), /task r:0:0 belongs to run other, not r/);
  refused((t) => (t.envKey = "nosuch"), /envKey "nosuch", which is not an environment of this run \(arithmetic, logic\)/);
  refused((t) => (t.env = "arithmetic@2.0.0"), /env arithmetic@2\.0\.0, but envKey arithmetic resolves to arithmetic@1\.0\.0/);
  refused((t) => Object.assign(t, { envKey: "logic", env: "logic@1.0.0", exampleIndex: 50 }), /exampleIndex 50, outside logic's train split \[0, 50\)/);
  refused((t) => (t.step = 3), /step 3, but the run's rl\.steps is 3/);
  // An endless dataset has no example range.
  checkTask({ ...good(), exampleIndex: 1e12 }, limits);
});

test("taskLimitsOf reads the limits from the run config and its environments", async () => {
  const config = parseRunConfig({
    run: "cfg",
    environments: [{ id: "arithmetic@^1" }, { id: "logic@^1" }],
    rl: { steps: 7, batchSize: 8, groupSize: 2, sampling: { temperature: 3, maxTokens: 12 } },
  });
  const envs = await loadRunEnvironments(config);
  const l = taskLimitsOf(config, envs);
  assert.deepEqual(
    { run: l.run, groupSize: l.groupSize, maxTokens: l.maxTokens, maxTemperature: l.maxTemperature, vocabSize: l.vocabSize, steps: l.steps },
    { run: "cfg", groupSize: 2, maxTokens: 12, maxTemperature: 3, vocabSize: 288, steps: 7 },
  );
  assert.deepEqual([...l.envs.keys()], ["arithmetic", "logic"]);
  for (const [key, e] of envs) assert.deepEqual(l.envs.get(key), { id: e.id, trainSize: e.env.dataset("train").size });
});
