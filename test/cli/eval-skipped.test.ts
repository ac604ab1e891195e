// Issue 43: a version the evaluator skipped (its weights gone) was printed in train's summary curve as "v2 0.000",
// a score it never had. Wherever train says the held-out results — the line per version as it arrives, eval.json,
// the curve, the before/after lines — a skipped version reads "skipped (why)", never a pass@1 figure. The positive
// control: the evaluated versions beside it do print their figures.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { EvalFeed, printSummary } from "../../cli/train/evals.js";
import { startTestNats } from "../helpers/nats.js";
import { tinyConfig } from "../helpers/run-fixture.js";
import { ensureTopology, RunState, StateKeys, type HeldOutResult } from "../../streams/index.js";

const config = parseRunConfig(
  tinyConfig("skipped", "/tmp", { rl: { ...(tinyConfig("skipped", "/tmp").rl as object), steps: 6 }, eval: { interval: 2, n: 4 } }),
);
const evaluated = (version: number, passAt1: number): HeldOutResult => ({ version, n: 4, passAt1, passAtK: {}, rewardMean: passAt1, byEnv: {}, seconds: 1 });
const gone = (version: number): HeldOutResult => ({
  version,
  n: 0,
  passAt1: 0,
  passAtK: {},
  rewardMean: 0,
  byEnv: {},
  seconds: 0,
  skipped: `weights gone: object v${version} is not in the object store (pruned, or never written)`,
});

function printed(fn: () => void): string {
  const out: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string) => {
    out.push(String(chunk));
    return true;
  }) as typeof process.stdout.write;
  try {
    fn();
  } finally {
    process.stdout.write = write;
  }
  return out.join("");
}

test("a skipped version prints as skipped (why) in every line train prints, never as a pass@1 number", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  const dir = mkdtempSync(join(tmpdir(), "rs-skipped-"));
  try {
    const state = new RunState((await ensureTopology(nc, "skipped")).kv);
    const results = { "0": evaluated(0, 0.25), "2": gone(2), "4": evaluated(4, 0.5), "6": gone(6) };
    await state.put(StateKeys.evalResults, results);

    const summary = printed(() => printSummary(config, results));
    const curve = summary.split("\n").find((l) => l.trimStart().startsWith("curve"))!;
    assert.equal(curve, "  curve     v0 0.250  v2 skipped (weights gone)  v4 0.500  v6 skipped (weights gone)");
    assert.doesNotMatch(summary, /v2 0\.000|v6 0\.000/);
    assert.match(summary, /^ {2}at start +pass@1 0\.250 /m, "the control: v0 prints its figure");
    assert.match(summary, /^ {2}after RL +skipped \(weights gone: object v6 is not in the object store/m);
    assert.doesNotMatch(summary, /RL changed pass@1/, "no change computed against a version that has no score");

    const lines: string[] = [];
    await new EvalFeed(state, dir, (l) => void lines.push(l)).show();
    assert.deepEqual(lines, [
      "held-out pass@1 at v0: 0.250 on 4 problems (1.0 s)",
      "held-out evaluation of v2: skipped (weights gone: object v2 is not in the object store (pruned, or never written))",
      "held-out pass@1 at v4: 0.500 on 4 problems (1.0 s)",
      "held-out evaluation of v6: skipped (weights gone: object v6 is not in the object store (pruned, or never written))",
    ]);
    const saved = JSON.parse(readFileSync(join(dir, "eval.json"), "utf8")) as Record<string, Record<string, unknown>>;
    assert.deepEqual(saved["2"], { version: 2, skipped: gone(2).skipped }, "eval.json keeps no figures for a skipped version");
    assert.equal(saved["4"]!["passAt1"], 0.5, "the control: an evaluated version keeps its figures");
  } finally {
    await nc.close();
    await srv.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
