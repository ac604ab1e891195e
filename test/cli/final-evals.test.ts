// After "RL finished", `train` waits for the held-out evaluations still missing: it says which ones every so
// often, and says so when its deadline passes without them (issue 43: it waited 10 minutes in silence). With
// every result in, it returns at once and says nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { finalEvals } from "../../cli/train/summary.js";
import { tinyConfig } from "../helpers/run-fixture.js";
import type { HeldOutResult } from "../../streams/index.js";

const config = parseRunConfig(tinyConfig("finalevals", "/tmp", { eval: { interval: 0, n: 4 } })); // schedule v0, v3
const result = (version: number): HeldOutResult => ({ version, n: 4, passAt1: 0.5, passAtK: {}, rewardMean: 0.5, byEnv: {}, seconds: 1 });

test("a final evaluation that never comes: the wait says what it waits for and gives up, saying so, at its deadline", async () => {
  const lines: string[] = [];
  const session = { config, interrupted: false, fatal: null, say: (l: string) => void lines.push(l) };
  const start = Date.now();
  const results = await finalEvals(session, { show: async () => ({ "0": result(0) }) }, { waitMs: 1_500, noteEveryMs: 500 });
  assert.ok(Date.now() - start < 3_000, "returned at its deadline");
  assert.deepEqual(Object.keys(results), ["0"]);
  assert.ok(
    lines.some((l) => /^waiting for the evaluator: v3 not evaluated yet/.test(l)),
    lines.join("\n"),
  );
  assert.match(lines.at(-1) ?? "", /^held-out evaluation of v3 not done after \d+ s: stopped waiting/);
});

test("every evaluation in: no wait and nothing said", async () => {
  const lines: string[] = [];
  const session = { config, interrupted: false, fatal: null, say: (l: string) => void lines.push(l) };
  const results = await finalEvals(session, { show: async () => ({ "0": result(0), "3": result(3) }) }, { waitMs: 1_500, noteEveryMs: 500 });
  assert.deepEqual(Object.keys(results).sort(), ["0", "3"]);
  assert.deepEqual(lines, []);
});
