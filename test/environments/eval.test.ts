import { test, after } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadEnvironment } from "../../environments/arithmetic/index.js";
import { formatSummary, passAtK, runEval, type EvalRecord, type EvalMetadata } from "../../environments/eval/index.js";
import type { Environment } from "../../environments/api/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";

const tmp = mkdtempSync(join(tmpdir(), "rs-eval-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 16 };

/** Answers each distinct prompt right on its 1st and 3rd try, wrong on the 2nd and 4th: 2 of 4 pass. */
function halfRightPolicy() {
  const seen = new Map<string, number>();
  return new ScriptedModelClient(new ByteChatTokenizer(), (ctx) => {
    const q = /user\n(\d+)\+(\d+)/.exec(ctx)!;
    const k = seen.get(q[0]) ?? 0;
    seen.set(q[0], k + 1);
    const sum = Number(q[1]) + Number(q[2]);
    return String(k % 2 === 0 ? sum : sum + 1);
  });
}

const readRecords = (dir: string) =>
  readFileSync(join(dir, "results.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as EvalRecord);

test("pass@k: the unbiased estimator on known values", () => {
  assert.equal(passAtK(4, 2, 1), 0.5);
  assert.ok(Math.abs(passAtK(4, 2, 2) - 5 / 6) < 1e-12);
  assert.equal(passAtK(4, 0, 4), 0);
  assert.equal(passAtK(4, 4, 1), 1);
  assert.ok(Math.abs(passAtK(5, 1, 2) - 0.4) < 1e-12);
  assert.equal(passAtK(10, 3, 8), 1, "fewer failures than k");
  assert.throws(() => passAtK(3, 4, 1), /passAtK/);
});

test("runEval: report numbers, files, metrics and pass@k", async () => {
  const env = await loadEnvironment({ digits: 2 });
  const out = join(tmp, "full");
  const progress: number[] = [];
  const rep = await runEval({
    env,
    model: halfRightPolicy(),
    n: 5,
    rollouts: 4,
    concurrency: 3,
    sampling,
    outDir: out,
    onProgress: (p) => progress.push(p.done),
    info: { model: "scripted" },
  });
  const s = rep.summary;
  assert.deepEqual([s.examples, s.samples, s.rolloutsPerExample], [5, 20, 4]);
  assert.equal(s.reward.mean, 0.5);
  assert.equal(s.reward.std, 0.5);
  assert.equal(s.passAtK["pass@1"], 0.5);
  assert.ok(Math.abs(s.passAtK["pass@2"]! - 5 / 6) < 1e-12);
  assert.equal(s.passAtK["pass@4"], 1);
  assert.deepEqual(s.components, { correct: 0.5 });
  assert.deepEqual(s.metrics, { format: 1 });
  assert.deepEqual(s.stopReasons, { eos: 20 });
  assert.deepEqual(s.errors, {});
  assert.equal(progress.at(-1), 20);
  const recs = readRecords(out);
  assert.equal(recs.length, 20);
  assert.deepEqual(new Set(recs.map((r) => `${r.example}:${r.rollout}`)).size, 20);
  assert.equal(recs[0]!.completion[0]!.role, "assistant");
  const meta = JSON.parse(readFileSync(join(out, "metadata.json"), "utf8")) as EvalMetadata;
  assert.equal(meta.env, "arithmetic@1.0.0");
  assert.equal(meta.completed, true);
  assert.equal(meta.done, 20);
  assert.deepEqual(meta.info, { model: "scripted" });
  assert.ok(!existsSync(join(out, "pending.jsonl")));
  const text = formatSummary(s);
  assert.match(text, /arithmetic@1\.0\.0: 5 examples x 4 rollouts = 20 samples/);
  assert.match(text, /pass@1 0\.5000 {2}pass@2 0\.8333 {2}pass@4 1/);
  assert.match(text, /reward fn correct +0\.5/);
});

test("runEval: an interrupted eval resumes and skips finished (example, rollout) pairs", async () => {
  const env = await loadEnvironment({ digits: 2 });
  const out = join(tmp, "resume");
  const ac = new AbortController();
  const first = halfRightPolicy();
  const r1 = await runEval({
    env,
    model: first,
    n: 6,
    rollouts: 4,
    concurrency: 2,
    sampling,
    outDir: out,
    signal: ac.signal,
    onProgress: (p) => {
      if (p.done >= 9) ac.abort(new Error("interrupted"));
    },
  });
  assert.equal(r1.interrupted, true);
  const meta1 = JSON.parse(readFileSync(join(out, "metadata.json"), "utf8")) as EvalMetadata;
  assert.equal(meta1.completed, false);
  const donePairs =
    readRecords(out).length + (existsSync(join(out, "pending.jsonl")) ? readFileSync(join(out, "pending.jsonl"), "utf8").trim().split("\n").length : 0);
  assert.ok(donePairs >= 9 && donePairs < 24, `${donePairs} pairs kept`);
  appendFileSync(join(out, "results.jsonl"), '{"example": 5, "rollo'); // a torn line from a crash

  const second = halfRightPolicy();
  const r2 = await runEval({ env, model: second, n: 6, rollouts: 4, concurrency: 2, sampling, outDir: out });
  assert.equal(r2.interrupted, false);
  assert.equal(r2.resumed, donePairs);
  assert.equal(second.calls.length, 24 - donePairs, "only the missing pairs ran");
  const recs = readRecords(out);
  assert.equal(recs.length, 24);
  assert.equal(new Set(recs.map((r) => `${r.example}:${r.rollout}`)).size, 24);
  assert.equal((JSON.parse(readFileSync(join(out, "metadata.json"), "utf8")) as EvalMetadata).completed, true);
  assert.ok(!existsSync(join(out, "pending.jsonl")));

  await assert.rejects(
    runEval({ env, model: second, n: 6, rollouts: 2, concurrency: 2, sampling, outDir: out }),
    /holds an eval with other settings \(rolloutsPerExample: 4 there, 2 now\)/,
  );
  const more = await runEval({ env, model: halfRightPolicy(), n: 8, rollouts: 4, concurrency: 2, sampling, outDir: out });
  assert.equal(more.summary.samples, 32, "a larger n extends the same eval");
  const fresh = await runEval({ env, model: halfRightPolicy(), n: 2, rollouts: 4, concurrency: 2, sampling, outDir: out, overwrite: true });
  assert.equal(fresh.resumed, 0);
  assert.equal(readRecords(out).length, 8);
});

test("runEval: a rollout that throws is a failed sample, not a failed eval", async () => {
  const base = await loadEnvironment({});
  const flaky: Environment = {
    ...base,
    name: base.name,
    version: base.version,
    dataset: (s) => base.dataset(s),
    scoreGroup: (r, row, c) => base.scoreGroup(r, row, c),
    rollout: async (ctx, row) => {
      if (row.id === "eval-1") throw new Error("model server went away");
      return base.rollout(ctx, row);
    },
  };
  const badRow: Environment = {
    ...flaky,
    dataset: (s) => ({
      size: 3,
      row: (i) =>
        i === 2
          ? (() => {
              throw new Error('environment arithmetic@1.0.0: dataset "eval" row 2 is invalid: id: too short');
            })()
          : base.dataset(s).row(i),
    }),
  };
  const rep = await runEval({ env: flaky, model: halfRightPolicy(), n: 3, rollouts: 2, concurrency: 2, sampling, outDir: join(tmp, "flaky") });
  assert.equal(rep.summary.samples, 6);
  assert.deepEqual(rep.summary.errors, { "rollout failed: model server went away": 2 });
  assert.equal(rep.summary.stopReasons["error"], 2);
  assert.ok(Math.abs(rep.summary.errorRate - 1 / 3) < 1e-12);
  const rep2 = await runEval({ env: badRow, model: halfRightPolicy(), n: 3, rollouts: 2, concurrency: 2, sampling, outDir: join(tmp, "badrow") });
  assert.equal(rep2.summary.samples, 6);
  assert.equal(rep2.summary.errors['rollout failed: environment arithmetic@1.0.0: dataset "eval" row 2 is invalid: id: too short'], 2);
});
