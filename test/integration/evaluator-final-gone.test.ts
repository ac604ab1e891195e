// The final version's weights deleted before the evaluator reads them (issue 43: `train` then waited its whole
// 10 minutes in silence after "RL finished", the evaluator retrying a fetch that could never succeed): once the
// learner has published the final version, its weights missing are gone for good, and the evaluator records the
// version as skipped, with the reason, and exits. The control: while the final version is not published yet,
// the same missing weights only mean "not yet", and the evaluator waits without recording anything.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { RunChannels, StateKeys } from "../../streams/index.js";

test("the final version's weights missing after the learner published it: skipped with the reason within seconds, not retried forever", async () => {
  const run = await startRun("evalgone", { eval: { interval: 0, n: 4 } }); // rl.steps 3: the schedule is v0, v3
  const v0 = { version: 0, n: 4, passAt1: 0.25, passAtK: {}, rewardMean: 0.25, byEnv: {}, seconds: 1 };
  // What the learner announces with each version (the evaluator believes the weights stream, not KV, on what exists).
  const announce = (version: number) =>
    new RunChannels(run.topology.wire).weights.announcements.publish({
      run: "evalgone",
      version,
      step: version,
      phase: "rl",
      object: `v${version}`,
      bytes: 0,
      sha256: "0".repeat(64),
    });
  try {
    await run.state.put(StateKeys.evalResults, { "0": v0 });
    await announce(2);
    await run.state.put(StateKeys.policyVersion, 2);
    await run.state.put(StateKeys.learnerStep, 2);
    run.launcher.start({ name: "evaluator", replica: 0 });
    const logs = join(run.dir, "logs");
    const log = join(logs, "evaluator-0.log");
    await waitUntil(
      "the evaluator waiting for v3",
      () => existsSync(log) && readFileSync(log, "utf8").includes("evaluating these policy versions"),
      60_000,
      logs,
    );
    await sleep(3_000);
    assert.equal((await run.state.get(StateKeys.evalResults))?.["3"], undefined, "v3 not published yet: nothing recorded for it");

    // The learner's last step: v3 published (and then its weights deleted — here never written at all).
    await announce(3);
    await run.state.put(StateKeys.policyVersion, 3);
    await run.state.put(StateKeys.learnerStep, 3);
    const start = Date.now();
    await waitUntil("v3 recorded", async () => (await run.state.get(StateKeys.evalResults))?.["3"] !== undefined, 20_000, logs);
    const r = (await run.state.get(StateKeys.evalResults))!["3"]!;
    assert.match(r.skipped ?? "", /weights gone: object v3 is not in the object store/);
    assert.equal(r.n, 0);
    await run.launcher.waitExit("evaluator"); // nothing left to evaluate
    assert.ok(Date.now() - start < 20_000, `recorded and exited ${Date.now() - start} ms after v3 was published`);
  } finally {
    await run.close();
  }
});
