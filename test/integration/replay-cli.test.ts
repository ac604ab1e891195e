// `rollstream replay` against the kernel backend a run recorded: bit-exact where it can match it (BLAS
// dispatch turned off for a run that trained on our own sgemm, even with OpenBLAS installed), an
// explanation and the largest relative difference where it cannot (dispatch unavailable, a library or
// device this machine lacks); --set shows recorded and replayed figures side by side; an exported
// bundle replays bit-exactly in a fresh folder with no NATS server. Two real runs (`rollstream train`
// with its own nats-server), one with OpenBLAS dispatch and one without, serve every case.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { cliMain, tinyConfig } from "../helpers/run-fixture.js";
import { writeSpreadEnv } from "../helpers/spread-env.js";
import { backendInfo } from "../../kernels/index.js";
import { testHooksEnv } from "../helpers/kernel-test-hooks.js";

const hasOpenBlas = !backendInfo("cpu").blas.startsWith("none");

interface Cli {
  status: number | null;
  stdout: string;
  stderr: string;
}

function cli(args: string[], env: NodeJS.ProcessEnv, cwd?: string): Cli {
  const r = spawnSync(process.execPath, [cliMain, ...args], { env, cwd, encoding: "utf8", timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const show = (r: Cli) => `exit ${r.status}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
const stepLines = (out: string) => out.split("\n").filter((l) => /^step \d+:/.test(l));

let dir: string;
let env: NodeJS.ProcessEnv;
const configs: Record<"on" | "off", string> = { on: "", off: "" };

/** A 5-step RL run trained by `rollstream train` with its own nats-server (stopped when it ends). */
function trainRun(run: string, extraEnv: NodeJS.ProcessEnv): string {
  const cfg = join(dir, `${run}.yaml`);
  writeFileSync(
    cfg,
    stringify(
      tinyConfig(run, dir, {
        environments: [{ id: "spread@^1" }],
        rl: {
          steps: 5,
          batchSize: 16,
          groupSize: 4,
          maxAsyncLevel: 1,
          maxOffPolicySteps: 2,
          sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 },
          optimizer: { lr: 0.003 },
        },
        checkpoint: { interval: 2, keepLast: 4, keepVersions: 2 },
      }),
    ),
  );
  const r = cli(["train", cfg, "--no-eval"], { ...env, ...extraEnv });
  assert.equal(r.status, 0, show(r));
  return cfg;
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), "rs-replay-cli-"));
  env = { ...process.env, ROLLSTREAM_ENV_PATH: writeSpreadEnv(dir) };
  delete env.NATS_URL; // train starts its own server; replay serves the stored streams itself
  delete env.ROLLSTREAM_BLAS;
  configs.off = trainRun("rpoff", { ROLLSTREAM_BLAS: "off" });
  // Measured routing, with our sgemm slowed down in the measurement (a test hook) so the learner's shape classes go to
  // OpenBLAS whatever this machine's speeds; the replays run without the hook, so they are bit-exact only if they pin
  // the routes the run recorded instead of measuring again.
  if (hasOpenBlas) configs.on = trainRun("rpon", testHooksEnv({ slowdownOwn: 50 }));
});

after(() => rmSync(dir, { recursive: true, force: true }));

test("a run trained on our own sgemm replays bit-exactly: dispatch is turned off even where OpenBLAS is installed", () => {
  const r = cli(["replay", "--config", configs.off, "--checkpoint", "2", "--steps", "3"], env);
  assert.equal(r.status, 0, show(r));
  assert.match(
    r.stdout,
    /the run's RL steps ran on: cpu, our own sgemm \(BLAS dispatch off\), AVX(2|-512) sgemm kernel, 1 thread \(the bits do not depend on the count\)/,
  );
  assert.match(r.stdout, /backend matched: BLAS dispatch off, as in the run/);
  const steps = stepLines(r.stdout);
  assert.deepEqual(
    steps.map((l) => /^step (\d+):.* bit-exact /.exec(l)?.[1]),
    ["3", "4", "5"],
    show(r),
  );
  assert.match(r.stdout, /3 steps replayed, 3 with a record: every recorded figure bit-exact/);
});

test("a run that dispatched to OpenBLAS: bit-exact on it; with dispatch unavailable the replay says why first, then the largest difference per step", {
  skip: hasOpenBlas ? false : "OpenBLAS is not installed",
}, () => {
  const same = cli(["replay", "--config", configs.on, "--steps", "3"], env);
  assert.equal(same.status, 0, show(same));
  assert.match(
    same.stdout,
    /backend matched: sgemm dispatched to the same library: openblas.*, routes pinned as recorded \(\d+ shape class(es)?, [1-9]\d* to BLAS; none differ here\)/,
  );
  assert.doesNotMatch(same.stdout, /[nt]{2}:\d+x\d+x\d+:1t=blas/, "the routes are counted, not listed");
  const verbose = cli(["replay", "--config", configs.on, "--steps", "1", "--verbose"], env);
  assert.equal(verbose.status, 0, show(verbose));
  assert.match(verbose.stdout, /^ {2}the run's sgemm routes: ([nt]{2}:\d+x\d+x\d+:1t=(blas|own),?)+$/m);
  assert.equal(stepLines(same.stdout).filter((l) => / bit-exact /.test(l)).length, 3, show(same));

  const off = cli(["replay", "--config", configs.on, "--steps", "3"], { ...env, ROLLSTREAM_BLAS: "off" });
  assert.equal(off.status, 0, `a different backend is not a failure\n${show(off)}`);
  const lines = off.stdout.split("\n");
  const why = lines.findIndex((l) => /^backend NOT matched, so steps cannot be bit-exact: the run dispatched sgemm to openblas/.test(l));
  assert.ok(why >= 0, show(off));
  assert.match(lines[why]!, /here BLAS dispatch is unavailable: none \(blas_mode off: never loaded\); unset ROLLSTREAM_BLAS to load it/);
  assert.ok(why < lines.findIndex((l) => /^step \d+:/.test(l)), "the explanation comes before the first step");
  const steps = stepLines(off.stdout);
  assert.equal(steps.length, 3);
  assert.ok(!off.stdout.includes("MISMATCH"), show(off));
  assert.ok(
    steps.some((l) => / differs on this backend: largest relative difference \d\.\d\de[-+]\d+ in [a-zA-Z ]+ \(absolute /.test(l)),
    show(off),
  );
  assert.match(off.stdout, /steps differ, on a backend other than the run's: largest relative difference/);

  const json = cli(["replay", "--config", configs.on, "--steps", "3", "--json"], { ...env, ROLLSTREAM_BLAS: "off" });
  assert.equal(json.status, 0, show(json));
  const rows = json.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { backendMatched: boolean; maxRelDiff: number; exact: boolean });
  assert.equal(rows.length, 3, "stdout holds one JSON object per step; the prose went to stderr");
  assert.ok(rows.every((x) => x.backendMatched === false));
  assert.ok(rows.some((x) => x.exact === false && x.maxRelDiff > 0));
  assert.match(json.stderr, /backend NOT matched/);
});

test("--set rl.loss.name=ppo_clip: recorded and replayed figures side by side; a bad setting is one line", () => {
  const r = cli(
    ["replay", "--config", configs.off, "--checkpoint", "2", "--steps", "3", "--set", "rl.loss.name=ppo_clip", "--set", "rl.loss.clipEps=0.1"],
    env,
  );
  assert.equal(r.status, 0, show(r));
  assert.match(r.stdout, /replaying with rl\.loss\.name=ppo_clip rl\.loss\.clipEps=0\.1:/);
  assert.match(
    r.stdout,
    /rl\.loss ppo_clip \(clipEps 0\.1, maskLow 0, maskHigh Infinity, klCoef 0, clipEpsHigh 0\.1\) \(the run: rl \(maskLow 0\.125, maskHigh 8, klCoef 0\)\)/,
  );
  assert.match(r.stdout, /loss +\| +grad norm +\| +masked fraction +\| +entropy/);
  assert.match(r.stdout, /step +recorded +replayed \| +recorded +replayed/);
  const rows = r.stdout
    .split("\n")
    .filter((l) => /^ +\d+ /.test(l))
    .map((l) =>
      l
        .trim()
        .split(/\s+\|?\s*/)
        .map(Number),
    );
  assert.deepEqual(
    rows.map((x) => x[0]),
    [3, 4, 5],
    show(r),
  );
  // [step, loss rec, loss rep, grad rec, grad rep, masked rec, masked rep, entropy rec, entropy rep]
  assert.ok(
    rows.every((x) => x.length === 9 && x.every(Number.isFinite)),
    show(r),
  );
  assert.ok(
    rows.some((x) => x[1] !== x[2]),
    `ppo_clip changes some step's loss\n${show(r)}`,
  );

  const json = cli(["replay", "--config", configs.off, "--checkpoint", "2", "--steps", "2", "--set", "rl.loss.name=ppo_clip", "--json"], env);
  assert.equal(json.status, 0, show(json));
  const objs = json.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { step: number; recorded: { loss: number }; replayed: { loss: number; entropy: number } });
  assert.deepEqual(
    objs.map((o) => o.step),
    [3, 4],
  );
  assert.equal(typeof objs[0]!.recorded.loss, "number");
  assert.equal(typeof objs[0]!.replayed.entropy, "number");

  for (const [set, message] of [
    ["rl.loss.clipEps=2", /^replay: --set rl\.loss\.clipEps=2: rl\.loss\.clipEps: unknown key \(loss rl takes name, maskLow, maskHigh, klCoef;/],
    ["rl.loss.name=bogus", /^replay: --set rl\.loss\.name=bogus: rl\.loss\.name: /],
    ["rl.optimizer.lr=1", /^replay: --set rl\.optimizer\.lr: only rl\.loss\.\* and the advantage settings/],
    ["rl.normalizeAdvantage=maybe", /^replay: --set rl\.normalizeAdvantage=maybe: rl\.normalizeAdvantage: /],
  ] as const) {
    const bad = cli(["replay", "--config", configs.off, "--set", set], env);
    assert.equal(bad.status, 2, show(bad));
    assert.match(bad.stderr, message);
    assert.equal(bad.stderr.trim().split("\n").length, 1, `one line, no stack\n${show(bad)}`);
  }
});

test("an exported bundle replays bit-exactly in a fresh folder with no NATS server; a backend it cannot provide is explained", () => {
  const bundle = join(dir, "bundle");
  const exp = cli(["replay", "--config", configs.off, "--checkpoint", "2", "--steps", "3", "--export", bundle], env);
  assert.equal(exp.status, 0, show(exp));
  assert.match(exp.stdout, /exported steps 3-5 of run rpoff from checkpoint step 2: \d+ Arrow batches/);
  const backend = JSON.parse(readFileSync(join(bundle, "backend.json"), "utf8"));
  assert.equal(backend.device, "cpu");
  assert.equal(backend.blasDispatch, false);
  assert.equal(backend.blas, "none (blas_mode off: never loaded)");
  assert.equal(backend.threads, 1);
  assert.equal(backend.threadIndependent, true);

  // Nothing of the run is left, no server is reachable and none could be started.
  const fresh = mkdtempSync(join(tmpdir(), "rs-replay-fresh-"));
  try {
    cpSync(bundle, join(fresh, "b"), { recursive: true });
    rmSync(dir, { recursive: true, force: true });
    const bare = { ...env, PATH: fresh, NATS_URL: "nats://127.0.0.1:1" };
    const r = cli(["replay", "--bundle", "b"], bare, fresh);
    assert.equal(r.status, 0, show(r));
    assert.match(r.stdout, /replaying bundle b: run rpoff, 3 of its 3 steps from checkpoint step 2/);
    assert.match(r.stdout, /backend matched: BLAS dispatch off, as in the run/);
    assert.equal(stepLines(r.stdout).filter((l) => / bit-exact /.test(l)).length, 3, show(r));

    // --set works on a bundle too: advantages recomputed from the recorded rewards, divided by the group std.
    const norm = cli(["replay", "--bundle", "b", "--json", "--set", "rl.normalizeAdvantage=true"], bare, fresh);
    assert.equal(norm.status, 0, show(norm));
    assert.match(norm.stderr, /rl\.normalizeAdvantage true \(the run: false\): advantages recomputed from the recorded rewards/);
    const normRows = norm.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { recorded: { loss: number }; replayed: { loss: number }; leftOut: number });
    assert.equal(normRows.length, 3);
    assert.ok(
      normRows.some((x) => x.replayed.loss !== x.recorded.loss && x.leftOut === 0),
      show(norm),
    );

    if (hasOpenBlas) {
      // Control: the run's record without its backend (as a run from before learner.backend) replays on
      // OpenBLAS here, and the steps no longer match: the matching above is what made them bit-exact.
      cpSync(join(fresh, "b"), join(fresh, "unrecorded"), { recursive: true });
      writeFileSync(join(fresh, "unrecorded", "backend.json"), "null\n");
      const trap = cli(["replay", "--bundle", "unrecorded"], bare, fresh);
      assert.equal(trap.status, 1, show(trap));
      assert.match(
        trap.stdout,
        /the run did not record one .*\n {2}if steps differ: a run trained on our own sgemm replays bit-exactly with ROLLSTREAM_BLAS=off/,
      );
      assert.ok(
        stepLines(trap.stdout).some((l) => / MISMATCH: largest relative difference /.test(l)),
        show(trap),
      );
    }

    // The same bundle, recorded as if on a library this machine does not have.
    const claimed = {
      ...backend,
      blasDispatch: true,
      blas: "openblas (libopenblas.so.0) OpenBLAS 0.3.99 DYNAMIC_ARCH Zen MAX_THREADS=64",
      threadIndependent: false,
    };
    writeFileSync(join(fresh, "b", "backend.json"), JSON.stringify(claimed));
    const other = cli(["replay", "--bundle", "b"], bare, fresh);
    assert.equal(other.status, 0, show(other));
    const lines = other.stdout.split("\n");
    const why = lines.findIndex((l) =>
      l.startsWith("backend NOT matched, so steps cannot be bit-exact: the run dispatched sgemm to openblas (libopenblas.so.0) OpenBLAS 0.3.99"),
    );
    assert.ok(why >= 0 && why < lines.findIndex((l) => /^step \d+:/.test(l)), show(other));
    assert.equal(stepLines(other.stdout).length, 3);
    assert.ok(!other.stdout.includes("MISMATCH"), show(other));
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
});
