// A restarted learner routes sgemm products as its earlier life measured them (the routes recorded in
// learner.backend), not as a fresh measurement would: the steps it recomputes after a restore then have the bits
// an uninterrupted run would have had, and replay finds one routing for the whole run.
// The two lives are steered apart with the dispatcher's test hook (rs_test_hooks' slowdown runs one kernel N times
// per timed run; handed to each learner process by test/helpers/kernel-test-hooks.ts): the first life sees our
// sgemm 50x slow and routes every class to OpenBLAS; the second sees OpenBLAS 50x slow, so measuring would route
// every class to ours (the flip itself is asserted in test/kernels/blas-dispatch.test.ts). Only pinning can leave
// the second life on OpenBLAS.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { backendInfo } from "../../kernels/index.js";
import { startRun, waitUntil } from "../helpers/run-fixture.js";
import { testHooksEnv } from "../helpers/kernel-test-hooks.js";
import { StateKeys } from "../../streams/index.js";

const STEPS = 40;
const skip = backendInfo("cpu").blas.startsWith("openblas") ? false : "OpenBLAS not installed";

function routeTable(routes: string | undefined): Map<string, string> {
  return new Map((routes ?? "").split(",").flatMap((r) => (r.includes("=") ? [r.split("=") as [string, string]] : [])));
}

test("a restarted learner keeps the sgemm routes its earlier life measured", { skip }, async () => {
  const run = await startRun("pin", {
    // 40 steps: with 10, a fast machine finished the run before the kill below reached the learner (ESRCH in CI).
    rl: { steps: STEPS, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 3, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    checkpoint: { interval: 4, keepLast: 3, keepVersions: 3 },
  });
  try {
    for (const name of ["checkpoint", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    run.launcher.start({ name: "learner", replica: 0, env: testHooksEnv({ slowdownOwn: 50 }) });
    // Past a checkpoint and between two, so the second life restores and recomputes steps.
    await waitUntil(
      "a step after the first checkpoint",
      async () => {
        const step = await run.state.learnerStep();
        return step >= 5 && step % 4 !== 0 && ((await run.state.get(StateKeys.checkpointLatest)) ?? -1) >= 4;
      },
      120_000,
      `${run.dir}/logs`,
    );
    const first = await run.state.get(StateKeys.learnerBackend);
    const firstRoutes = routeTable(first?.blasRoutes);
    assert.ok(firstRoutes.size > 0, `the first life measured some classes: ${first?.blasRoutes}`);
    assert.ok(
      [...firstRoutes.values()].every((r) => r === "blas"),
      `with our sgemm slowed 50x every class measured faster on OpenBLAS: ${first?.blasRoutes}`,
    );

    process.kill(run.launcher.pid("learner", 0)!, "SIGKILL");
    run.launcher.start({ name: "learner", replica: 1, env: testHooksEnv({ slowdownBlas: 50 }) });
    await waitUntil(`${STEPS} steps`, async () => (await run.state.learnerStep()) >= STEPS, 120_000, `${run.dir}/logs`);

    const log = readFileSync(join(run.dir, "logs", "learner-1.log"), "utf8");
    assert.match(log, /restored from checkpoint/, "the second life restored a checkpoint");
    const second = routeTable((await run.state.get(StateKeys.learnerBackend))?.blasRoutes);
    for (const [cls, route] of firstRoutes) assert.equal(second.get(cls), route, `class ${cls} kept its route`);
    // Classes the first life never met are measured afresh, under the second life's conditions.
    for (const [cls, route] of second) if (!firstRoutes.has(cls)) assert.equal(route, "own", `class ${cls}, new in the second life, measured`);
    assert.match(log, /sgemm routes pinned as the earlier learner measured them/);
  } finally {
    await run.close();
  }
});
