// Issue 43: `nats kv put rs-<run>-state policy.version 1000000000` (valid for its schema) made the evaluator record
// every scheduled version not yet trained as "skipped: weights gone" within milliseconds — the run's evaluation record
// lost. A version beyond rl.steps, or one no weights announcement backs, is a fault of the run's state: reported as
// such (naming the bucket, key and value), and the evaluator waits on what the weights stream says. The positive
// controls: v0 and v2, whose weights exist, are evaluated before and after the bad values.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { startInProcess } from "../helpers/in-process-actor.js";
import { EvaluatorActor } from "../../actors/evaluator/evaluator.js";
import { modelConfigOf } from "../../actors/runtime/model-factory.js";
import { PolicyModel } from "../../kernels/index.js";
import { RunChannels, StateKeys } from "../../streams/index.js";

test("policy.version set by hand to 10^9 or to an unannounced version: nothing recorded as skipped, the run-state error said, real versions still evaluated", async () => {
  const run = await startRun("evalstate", { rl: { steps: 6, batchSize: 8, groupSize: 4, maxAsyncLevel: 1 }, eval: { interval: 2, n: 4 } });
  const model = PolicyModel.create(modelConfigOf(run.config), { seed: 1, threads: 1 });
  const channels = new RunChannels(run.topology.wire);
  const evaluator = startInProcess("evaluator", EvaluatorActor, { nc: run.nc, config: run.config, topology: run.topology });
  const errors = () => evaluator.logs.filter((l) => l.level >= 50).map((l) => l.msg);
  const results = async () => (await run.state.get(StateKeys.evalResults)) ?? {};
  try {
    await channels.weights.publish({ version: 0, step: 0, phase: "rl", bytes: model.toSafetensors() });
    await run.state.put(StateKeys.policyVersion, 0);
    await waitUntil("v0 evaluated (the control: real weights are evaluated)", async () => (await results())["0"] !== undefined, 30_000);
    assert.equal((await results())["0"]!.skipped, undefined);
    assert.equal((await results())["0"]!.n, 4);

    await run.state.put(StateKeys.policyVersion, 1_000_000_000);
    await sleep(1_500); // the evaluator on main recorded v2, v4 and v6 as skipped within 60 ms
    assert.deepEqual(Object.keys(await results()), ["0"], "nothing recorded for versions not yet trained");
    await waitUntil("the run-state error about 10^9", () => errors().some((m) => m.includes("policy.version is 1000000000")), 10_000);
    const said = errors().find((m) => m.includes("policy.version is 1000000000"))!;
    assert.match(
      said,
      /^run state: KV rs-evalstate-state policy\.version is 1000000000, beyond rl\.steps 6 .*using the newest announced weights version 0 instead/,
    );

    // Within rl.steps but never announced: the weights stream's word, not KV's, says what exists.
    await run.state.put(StateKeys.policyVersion, 4);
    await sleep(1_500);
    assert.deepEqual(Object.keys(await results()), ["0"]);
    await waitUntil("the run-state error about v4", () => errors().some((m) => m.includes("policy.version is 4,")), 10_000);
    assert.match(errors().find((m) => m.includes("policy.version is 4,"))!, /but the newest weights announced are v0 \(none for v2\): not trusted/);
    assert.ok(!errors().some((m) => /skipped/.test(m)), `no version skipped: ${errors().join(" | ")}`);

    // The learner goes on: v2 published and announced, KV right again, and v2 is evaluated for real.
    await channels.weights.publish({ version: 2, step: 2, phase: "rl", bytes: model.toSafetensors() });
    await run.state.put(StateKeys.policyVersion, 2);
    await waitUntil("v2 evaluated", async () => (await results())["2"] !== undefined, 30_000);
    const v2 = (await results())["2"]!;
    assert.equal(v2.skipped, undefined, `v2 evaluated, not skipped: ${v2.skipped}`);
    assert.equal(v2.n, 4);
    assert.deepEqual(Object.keys(await results()).sort(), ["0", "2"]);
  } finally {
    await evaluator.stop();
    model.dispose();
    await run.close();
  }
});
