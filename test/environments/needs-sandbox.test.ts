// Environments declare whether they run code in the sandbox; `rollstream train` starts the sandbox
// actor from that declaration, not from the environment's name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createEnvironment, listDataset, Rubric } from "../../environments/api/index.js";
import { resolveEnvironment } from "../../environments/registry.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { loadRunEnvironments } from "../../actors/runtime/environments.js";

test("built-ins: code needs the sandbox, arithmetic/math/logic/tool do not", async () => {
  const want: Record<string, boolean> = { code: true, arithmetic: false, math: false, logic: false, tool: false };
  for (const [name, needs] of Object.entries(want)) {
    const env = await resolveEnvironment(`${name}@^1`);
    assert.equal(env.needsSandbox, needs, name);
  }
});

test("createEnvironment: needsSandbox defaults to false and passes through", () => {
  const def = { name: "x", version: "1.0.0", dataset: () => listDataset([]), rubric: new Rubric() };
  assert.equal(createEnvironment(def).needsSandbox, false);
  assert.equal(createEnvironment({ ...def, needsSandbox: true }).needsSandbox, true);
});

test("actorPlan starts the sandbox actor only for environments that need it (or sandbox.enabled)", async () => {
  // Imported here: train.ts pulls in the whole CLI, which should not stop the tests above from running.
  const { actorPlan } = await import("../../cli/commands/train.js");
  const plan = async (raw: Record<string, unknown>) => {
    const config = parseRunConfig({ run: "r", ...raw });
    return actorPlan(config, await loadRunEnvironments(config)).map((s) => s.name);
  };
  assert.ok((await plan({ environments: [{ id: "arithmetic" }, { id: "code@^1" }] })).includes("sandbox"));
  assert.ok(!(await plan({ environments: [{ id: "arithmetic" }, { id: "tool" }] })).includes("sandbox"));
  assert.ok((await plan({ environments: [{ id: "arithmetic" }], sandbox: { enabled: true } })).includes("sandbox"));
});
