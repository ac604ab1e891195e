// One rollout record from the environment to the learner: what the environment returned is what the
// reward actor scores and what the scored Arrow row keeps (transcript with tool names, state, turn
// offsets, every reward and metric), and it scores exactly as `rollstream eval` scores it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { pino } from "pino";
import { startTestNats } from "../helpers/nats.js";
import { startRun, tinyConfig, waitUntil } from "../helpers/run-fixture.js";
import { writeMultiTurnEnv } from "../helpers/multi-turn-env.js";
import { parseRunConfig } from "../../actors/runtime/config.js";
import { loadRunEnvironments } from "../../actors/runtime/environments.js";
import { resolveActor } from "../../actors/runtime/lifecycle.js";
import { ActorMetrics } from "../../actors/runtime/metrics.js";
import { Health } from "../../actors/runtime/heartbeat.js";
import type { ActorContext } from "../../actors/runtime/actor.js";
import { RewardActor } from "../../actors/reward/reward.js";
import { ensureTopology, HealthBoard, RunChannels, RunState, StateKeys, toRawRollout, type RolloutRow, type Task } from "../../streams/index.js";
import { ByteChatTokenizer } from "../../environments/testing/byte-tokenizer.js";
import { ScriptedModelClient } from "../../environments/testing/scripted-model.js";
import type { RolloutResult } from "../../environments/api/index.js";

async function readScored(channels: RunChannels, rows: number): Promise<RolloutRow[]> {
  const reader = channels.scored.reader(1, { actor: "test" });
  const out: RolloutRow[] = [];
  try {
    const deadline = Date.now() + 20_000;
    while (out.length < rows && Date.now() < deadline) out.push(...((await reader.next(500)) ?? []));
  } finally {
    await reader.close();
  }
  return out;
}

test("the reward actor scores the tool env's rollouts exactly as eval does, and the scored rows keep tool names, state and metrics", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  const abort = new AbortController();
  try {
    const run = "record";
    const config = parseRunConfig(
      tinyConfig(run, mkdtempSync(join(tmpdir(), "rs-record-")), {
        environments: [{ id: "tool@^1" }],
        // Groups of two (the careful and the guessing policy), and room for their 200-token turns: reward checks
        // the task it scores against these limits.
        rl: { steps: 3, batchSize: 8, groupSize: 2, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 200 } },
        // Room for the tool instructions and four turns: a longer rollout would be left out of training.
        model: {
          vocabSize: 288,
          hiddenSize: 32,
          intermediateSize: 64,
          numLayers: 1,
          numHeads: 2,
          numKvHeads: 1,
          maxPositionEmbeddings: 2048,
          threads: 1,
          seed: 5,
        },
      }),
    );
    const [loaded] = [...(await loadRunEnvironments(config)).values()];
    const row = loaded!.env.dataset("train").row(3);
    const table = row.info["table"] as Record<string, number>;
    const needed = row.info["needed"] as string[];
    // Two scripted policies: one looks every city up and answers right, one guesses.
    const lookups = needed.map((city) => `<tool>{"name": "lookup", "args": {"city": "${city}"}}</tool>`);
    const tok = new ByteChatTokenizer();
    const careful = new ScriptedModelClient(tok, [...lookups, `<answer>${row.answer}</answer>`]);
    const guesser = new ScriptedModelClient(tok, ["<answer>12</answer>"]);
    const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 200 };
    const results: RolloutResult[] = [
      await loaded!.env.rollout({ model: careful, sampling }, row),
      await loaded!.env.rollout({ model: guesser, sampling }, row),
    ];
    // What `rollstream eval` does with a rollout: score it in the process that made it.
    const expected = await loaded!.env.scoreGroup(results, row, {});
    assert.ok(
      results[0]!.messages.some((m) => m.role === "tool" && m.name === "lookup"),
      "the careful policy called the lookup tool",
    );
    assert.ok(expected[0]!.metrics["looked_up"]! > 0, `looked_up is ${expected[0]!.metrics["looked_up"]} in eval (positive control)`);
    assert.ok(Object.keys(table).length > 0);

    // The same rollouts through the wire, scored by a reward actor bound to this test's server.
    const topology = await ensureTopology(nc, run);
    const channels = new RunChannels(topology.wire);
    const task: Task = {
      run,
      taskId: `${run}:0:0`,
      epoch: 0,
      index: 0,
      step: 0,
      env: loaded!.id,
      envKey: loaded!.key,
      exampleIndex: 3,
      groupSize: 2,
      sampling,
      seed: 1,
    };
    await channels.rawRollouts.publish({ task, rollouts: results.map(toRawRollout), producer: "test" });
    const ctx: ActorContext = {
      actor: "reward",
      instance: "test",
      config,
      runDir: mkdtempSync(join(tmpdir(), "rs-record-run-")),
      nc,
      log: pino({ level: "silent" }),
      metrics: new ActorMetrics("reward", run),
      health: new Health({ actor: "reward", instance: "test", board: new HealthBoard(topology.wire.health), lastLog: () => null }),
      signal: abort.signal,
      publishMetrics: async () => undefined,
    };
    const state = new RunState(topology.kv);
    await state.put(StateKeys.policyVersion, 0); // the version the scripted policy reports (as a learner would have)
    const actor = resolveActor(RewardActor, { ctx, topology, channels, state });
    const running = actor.run();
    const rows = await readScored(channels, 2);
    abort.abort();
    await running;

    assert.equal(rows.length, 2);
    for (let i = 0; i < 2; i++) {
      const r = rows[i]!,
        e = expected[i]!,
        src = results[i]!;
      assert.equal(r.reward, Math.fround(e.reward), `row ${i}: reward`);
      assert.deepEqual(r.rewardComponents, Object.fromEntries(Object.entries(e.components).map(([k, v]) => [k, Math.fround(v)])), `row ${i}: components`);
      assert.deepEqual(r.metrics, e.metrics, `row ${i}: metrics (zero-weight functions and state.metrics)`);
      assert.deepEqual(r.errors, e.errors, `row ${i}: errors`);
      assert.deepEqual(r.messages, src.messages, `row ${i}: the transcript, tool names included`);
      assert.deepEqual(JSON.parse(r.stateJson), JSON.parse(JSON.stringify(src.state)), `row ${i}: state`);
      assert.deepEqual(Array.from(r.turnOffsets), src.turnOffsets, `row ${i}: turn offsets`);
      assert.equal(r.numTurns, src.numTurns);
      assert.equal(r.exampleId, row.id);
    }
    assert.ok(rows[0]!.metrics["looked_up"]! > 0, "looked_up survives the wire");
    assert.equal(rows[0]!.turnOffsets.length, needed.length + 1, "one offset per model turn");
  } finally {
    abort.abort();
    await nc.close();
    await srv.cleanup();
  }
});

test("the tool env and a third-party multi-turn env run through every actor; scored rows keep state, turns and metrics", async () => {
  const envDir = writeMultiTurnEnv(mkdtempSync(join(tmpdir(), "rs-envs-")));
  const before = process.env["ROLLSTREAM_ENV_PATH"];
  process.env["ROLLSTREAM_ENV_PATH"] = envDir;
  const run = await startRun("multiturn", {
    environments: [{ id: "tool@^1", args: { maxTurns: 2 } }, { id: "echo-turns@^2" }],
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
    model: { vocabSize: 288, hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, maxPositionEmbeddings: 1024, threads: 1, seed: 5 },
  });
  try {
    run.launcher.start({ name: "checkpoint", replica: 0 });
    run.launcher.start({ name: "learner", replica: 0 });
    run.launcher.start({ name: "orchestrator", replica: 0 });
    run.launcher.start({ name: "inference", replica: 0 });
    run.launcher.start({ name: "reward", replica: 0 });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 90_000, `${run.dir}/logs`);
    const rows = await readScored(new RunChannels(run.topology.wire), 16);
    const echo = rows.filter((r) => r.env === "echo-turns@2.1.0");
    const tool = rows.filter((r) => r.env.startsWith("tool@"));
    assert.ok(echo.length > 0 && tool.length > 0, `both environments were trained on (${echo.length} echo, ${tool.length} tool rows)`);
    for (const r of echo) {
      const state = JSON.parse(r.stateJson) as { seen: string[]; metrics: { env_turns: number } };
      assert.ok(r.numTurns >= 1 && r.turnOffsets.length === r.numTurns, "one turn offset per model turn");
      assert.equal(state.seen.length, state.metrics.env_turns, "the env's own state arrived whole");
      assert.equal(r.metrics["env_turns"], state.metrics.env_turns, "state.metrics became row metrics");
      assert.equal(
        r.metrics["seen_chars"],
        state.seen.reduce((n, s) => n + s.length, 0),
        "zero-weight metric computed from the state",
      );
      assert.equal(r.rewardComponents["turns"], Math.fround(Math.min(1, state.seen.length / 3)), "reward computed from the state");
      assert.ok(r.messages.filter((m) => m.content === "again").length >= state.seen.length - 1, "env messages are in the transcript");
    }
    for (const r of tool) {
      assert.ok("format" in r.metrics && "looked_up" in r.metrics, `tool metrics present: ${JSON.stringify(r.metrics)}`);
      assert.equal(typeof JSON.parse(r.stateJson).promptLength, "number");
    }
  } finally {
    if (before === undefined) delete process.env["ROLLSTREAM_ENV_PATH"];
    else process.env["ROLLSTREAM_ENV_PATH"] = before;
    await run.close();
  }
});
