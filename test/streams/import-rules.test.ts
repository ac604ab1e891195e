// The layering rules hold on the real tree, and the checker catches each kind of violation.
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// dist*/test/streams/ -> the repo root, where the sources and scripts/ live.
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
type Rules = {
  checkTree(root: string): string[];
  metricsReads(rel: string, text: string): string[];
  checkFile(rel: string, imports: string[]): string[];
  importsOf(root: string, file: string, text: string): string[];
};
const rules = (await import(pathToFileURL(join(root, "scripts", "import-rules.mjs")).href)) as Rules;

test("actors and cli/ import the wire only through streams/index.ts, no actor imports another, rl/ imports rl/ only, and no control code reads a metrics event", () => {
  assert.deepEqual(rules.checkTree(root), []);
});

test("the checker flags every kind of violation (positive controls)", () => {
  const text = [
    `import { x } from "../../streams/headers.js";`,
    `import type { Y } from "../reward/advantages.js";`,
    `const m = await import("../../streams/arrow-codec.js");`,
    `import { ok } from "../../streams/index.js";`,
    `import { rt } from "../runtime/actor.js";`,
  ].join("\n");
  const imports = rules.importsOf(root, join(root, "actors", "learner", "fake.ts"), text);
  assert.deepEqual(imports, ["streams/headers.ts", "actors/reward/advantages.ts", "streams/arrow-codec.ts", "streams/index.ts", "actors/runtime/actor.ts"]);
  const problems = rules.checkFile("actors/learner/fake.ts", imports);
  assert.equal(problems.length, 3, problems.join("\n"));
  assert.match(problems.join("\n"), /streams\/headers\.ts \(use the streams\/ facade/);
  assert.match(problems.join("\n"), /actors\/reward\/advantages\.ts \(an actor never imports another actor\)/);
  assert.match(rules.checkFile("cli/commands/x.ts", ["actors/learner/learner.ts"])[0] ?? "", /cli\/ may use actors\/runtime\//);
  assert.deepEqual(rules.checkFile("cli/commands/x.ts", ["actors/runtime/config.ts", "actors/registry.ts", "streams/index.ts"]), []);
  assert.match(rules.checkFile("actors/runtime/x.ts", ["actors/learner/learner.ts"])[0] ?? "", /imports none/);
});

test("rl/ imports nothing outside rl/ (positive control)", () => {
  assert.deepEqual(rules.checkFile("rl/pace.ts", ["rl/mixing.ts"]), []);
  assert.match(rules.checkFile("rl/pace.ts", ["streams/index.ts"])[0] ?? "", /rl\/ is the algorithm as pure functions/);
  assert.match(rules.checkFile("rl/pace.ts", ["actors/runtime/config.ts"])[0] ?? "", /imports rl\/ only/);
});

test("a planted read of a metrics event in control code is caught; display code may read them (positive controls)", () => {
  const planted = [
    `const filtered = e.values["filtered"] === 1;`,
    `const task = m.value.labels?.["task"];`,
    `const loss = e.values.loss;`,
    `const seqs = e.labels!["seqs"];`,
  ];
  for (const line of planted) {
    assert.equal(rules.metricsReads("actors/orchestrator/orchestrator.ts", line).length, 1, line);
    assert.equal(rules.metricsReads("cli/commands/replay.ts", line).length, 1, line);
    assert.deepEqual(rules.metricsReads("cli/dashboard/run-data.ts", line), [], `display code: ${line}`);
  }
  // Not metrics reads: a local record being filled, a Map's or Object's values.
  for (const line of [`values[k] = v;`, `for (const x of Object.values(stats)) n++;`, `const all = [...this.deadlines.values()];`])
    assert.deepEqual(rules.metricsReads("actors/learner/learner.ts", line), [], line);
});
