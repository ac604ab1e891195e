// Issue 43: damaged keys of a run's state KV — policy.version not JSON, run.status not one of its values, eval.results
// garbled — blocked a resume (train failed on the first read) and nothing rebuilt them. `doctor` names each damaged
// key; `doctor --repair` rebuilds them from the run's records (the weights announcements, the step records against
// rl.steps, the eval stream); `train` does the same when it resumes, said in one line. The controls: doctor without
// --repair changes nothing, and a sound key (learner.step) is left alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { cliMain, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology, RunChannels, RunState, StateKeys, stepRecordOf, type Topology } from "../../streams/index.js";

function cli(...args: string[]) {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["NATS_URL"];
  const r = spawnSync(process.execPath, [cliMain, ...args], { env, encoding: "utf8", timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A run that trained `trained` of 3 steps (weights announced, steps recorded, v0 evaluated), then had three keys overwritten by hand. */
async function damagedRun(nc: NatsConnection, run: string, trained: number): Promise<{ topology: Topology; state: RunState }> {
  const topology = await ensureTopology(nc, run);
  const channels = new RunChannels(topology.wire);
  const state = new RunState(topology.kv);
  for (let v = 0; v <= trained; v++) {
    await channels.weights.announcements.publish({ run, version: v, step: v, phase: "rl", object: `v${v}`, bytes: 0, sha256: "0".repeat(64) });
    if (v > 0) await channels.steps.publish(stepRecordOf(run, v, 3));
  }
  const result = { kind: "result" as const, run, version: 0, env: "arithmetic@1.0.0", n: 4, passAt1: 0.5, passAtK: {}, rewardMean: 0.5, rewardStd: 0.5 };
  await channels.eval.publish({ ...result, completionTokensMean: 2, stopReasons: { eos: 4 }, seconds: 1.5 });
  await state.put(StateKeys.learnerStep, trained);
  await topology.kv.put(StateKeys.policyVersion, "{oops");
  await topology.kv.put(StateKeys.runStatus, '"runnnig"');
  await topology.kv.put(StateKeys.evalResults, "[garbled");
  return { topology, state };
}

test("doctor names damaged run-state keys; doctor --repair rebuilds policy.version, run.status and eval.results from the run's records", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const dir = mkdtempSync(join(tmpdir(), "rs-repair-"));
  try {
    const { topology, state } = await damagedRun(nc, "repairme", 2);
    // The run's folder as train leaves it: doctor takes rl.steps from the config kept there.
    mkdirSync(join(dir, "repairme"));
    writeFileSync(join(dir, "repairme", "config.yaml"), stringify(tinyConfig("repairme", dir)));
    const checked = cli("doctor", "--run", "repairme", "--nats", nats.url, "--out-dir", dir, "--json");
    const before = JSON.parse(checked.out) as { problems: string[] };
    const stateProblems = before.problems.filter((p) => p.startsWith("run state:"));
    assert.equal(stateProblems.length, 3, checked.out + checked.err);
    assert.match(
      stateProblems.find((p) => p.includes("policy.version"))!,
      /^run state: KV rs-repairme-state policy\.version is not valid JSON \("\{oops"\): rollstream doctor --repair rebuilds it as 2 from the newest weights announcement$/,
    );
    assert.match(
      stateProblems.find((p) => p.includes("run.status"))!,
      /run\.status = "\\"runnnig\\"" does not match its schema .*rebuilds it as "running" from the step records \(step 2 of 3/,
    );
    const stored = async () => new TextDecoder().decode((await topology.kv.get(StateKeys.policyVersion))!.value);
    assert.equal(await stored(), "{oops", "the control: doctor alone changes nothing");

    const repaired = cli("doctor", "--run", "repairme", "--nats", nats.url, "--out-dir", dir, "--repair", "--json");
    const after = JSON.parse(repaired.out) as { problems: string[]; repaired: string[] };
    assert.deepEqual(
      after.problems.filter((p) => p.startsWith("run state:")),
      [],
      repaired.out + repaired.err,
    );
    assert.equal(after.repaired.length, 3, after.repaired.join("\n"));
    assert.equal(await state.get(StateKeys.policyVersion), 2);
    assert.equal(await state.get(StateKeys.runStatus), "running");
    assert.equal(await state.get(StateKeys.learnerStep), 2, "a sound key is left alone");
    const evals = (await state.get(StateKeys.evalResults))!;
    assert.deepEqual(Object.keys(evals), ["0"]);
    assert.deepEqual(
      { n: evals["0"]!.n, passAt1: evals["0"]!.passAt1, byEnv: evals["0"]!.byEnv },
      { n: 4, passAt1: 0.5, byEnv: { "arithmetic@1.0.0": { n: 4, passAt1: 0.5 } } },
    );

    const again = JSON.parse(cli("doctor", "--run", "repairme", "--nats", nats.url, "--out-dir", dir, "--json").out) as { problems: string[] };
    assert.deepEqual(
      again.problems.filter((p) => p.startsWith("run state:")),
      [],
    );
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("train resuming a run with garbage policy.version and run.status repairs them, says so in one line, and goes on", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const dir = mkdtempSync(join(tmpdir(), "rs-train-repair-"));
  try {
    // Trained to the end (3 of 3): the repaired status is done, and train reports the finished run as it would any.
    const { state } = await damagedRun(nc, "trainfix", 3);
    const cfg = join(dir, "trainfix.yaml");
    writeFileSync(cfg, stringify(tinyConfig("trainfix", dir)));
    const r = cli("train", cfg, "--nats", nats.url, "--no-dashboard", "--no-eval");
    assert.equal(r.code, 0, r.out + r.err);
    const said = r.out.split("\n").filter((l) => l.startsWith("run state"));
    assert.equal(said.length, 1, `one line: ${r.out}`);
    assert.match(said[0]!, /^run state repaired: policy\.version \(was "\{oops": not valid JSON\) = 3 from the newest weights announcement; /);
    assert.match(said[0]!, /run\.status \(was "\\"runnnig\\"": does not match its schema .*\) = "done" from the step records \(step 3 of 3/);
    assert.match(r.out, /^run trainfix already finished/m);
    assert.match(said[0]!, /; eval\.results \(was "\[garbled": not valid JSON\) = the evaluations of v0 from the result messages on the eval subject$/);
    assert.doesNotMatch(r.out + r.err, /NATS unreachable|\n\s+at .*:\d+:\d+\)?$/m, "no outage reported, no stack");
    assert.equal(await state.get(StateKeys.runStatus), "done");
    assert.equal(await state.get(StateKeys.policyVersion), 3);
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

const STEPS = 48;

test("a run stopped mid-way whose policy.version and run.status were then garbled resumes: train repairs them and finishes", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const dir = mkdtempSync(join(tmpdir(), "rs-resume-repair-"));
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["NATS_URL"];
  try {
    const cfg = join(dir, "resumefix.yaml");
    // Long enough that the Ctrl-C below lands mid-run: a drain lets the learner finish what it holds, and with
    // 16 steps a fast engine had trained them all before the first train exited (the repair then said "done").
    const rl = { ...(tinyConfig("resumefix", dir).rl as object), steps: STEPS };
    writeFileSync(cfg, stringify(tinyConfig("resumefix", dir, { rl, checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 } })));
    const args = [cliMain, "train", cfg, "--nats", nats.url, "--no-dashboard", "--no-eval"];
    let out = "";
    const first = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    first.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    first.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => first.once("exit", (code) => r(code)));
    const stepsFile = join(dir, "resumefix", "steps.jsonl");
    const checkpoints = join(dir, "resumefix", "checkpoints");
    await waitUntil(
      "a checkpoint and a few steps past it",
      () => existsSync(checkpoints) && existsSync(stepsFile) && /"step":([3-9]|1\d),/.test(readFileSync(stepsFile, "utf8")),
      60_000,
    );
    first.kill("SIGINT");
    assert.equal(await exited, 130, out);

    const topology = await ensureTopology(nc, "resumefix");
    await topology.kv.put(StateKeys.policyVersion, "{oops");
    await topology.kv.put(StateKeys.runStatus, '"runnnig"');
    const second = spawnSync(process.execPath, args, { env, encoding: "utf8", timeout: 120_000 });
    assert.equal(second.status, 0, second.stdout + second.stderr);
    const said = second.stdout.split("\n").filter((l) => l.startsWith("run state"));
    assert.equal(said.length, 1, second.stdout);
    assert.match(said[0]!, /^run state repaired: policy\.version \(was "\{oops": not valid JSON\) = \d+ from the newest weights announcement; /);
    assert.match(
      said[0]!,
      new RegExp(`run\\.status \\(was .*\\) = "running" from the step records \\(step \\d+ of ${STEPS}; no actor alive: train resumes it\\)$`),
    );
    assert.match(second.stdout, new RegExp(`^RL finished: ${STEPS} steps$`, "m"));
    assert.doesNotMatch(second.stdout + second.stderr, /NATS unreachable/);
    assert.match(readFileSync(join(dir, "resumefix", "logs", "learner-0.log"), "utf8"), /restored from checkpoint/);
    assert.equal(await new RunState(topology.kv).get(StateKeys.runStatus), "done");
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("eval.results garbled while the run goes on: train says it is the run's state, not a NATS outage, rebuilds it, and every evaluation lands", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const dir = mkdtempSync(join(tmpdir(), "rs-midrun-repair-"));
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["NATS_URL"];
  try {
    const cfg = join(dir, "midrun.yaml");
    const rl = { ...(tinyConfig("midrun", dir).rl as object), steps: 6 };
    writeFileSync(cfg, stringify(tinyConfig("midrun", dir, { rl, eval: { interval: 2, n: 4 } })));
    let out = "";
    const child = spawn(process.execPath, [cliMain, "train", cfg, "--nats", nats.url, "--no-dashboard"], { env, stdio: ["ignore", "pipe", "pipe"] });
    child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    await waitUntil("the actors started", () => /actors started/.test(out), 60_000);
    const topology = await ensureTopology(nc, "midrun");
    await topology.kv.put(StateKeys.evalResults, "[garbled");
    assert.equal(await exited, 0, out);
    const said = out.split("\n").filter((l) => l.includes("eval.results"));
    assert.equal(said.length, 1, out);
    assert.match(
      said[0]!,
      /^run state: KV rs-midrun-state eval\.results is not valid JSON \("\[garbled"\); rebuilt as (the evaluations of v0|no evaluation yet) from the result messages on the eval subject$/,
    );
    assert.doesNotMatch(out, /NATS unreachable/);
    const results = (await new RunState(topology.kv).get(StateKeys.evalResults))!;
    assert.deepEqual(Object.keys(results).sort(), ["0", "2", "4", "6"]);
    for (const r of Object.values(results)) assert.equal(r.skipped, undefined, `v${r.version} evaluated`);
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
