// New weights mid-generation, end to end (issue 44): the inference actor swaps them in at the next engine step
// without stopping its group, every token keeps the version it was sampled under, and the scored Arrow rows the
// reward actor publishes carry those per-token version spans. The inference actor's heartbeat and Prometheus
// gauges show its engine's scheduler figures.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import { startTestNats } from "../helpers/nats.js";
import { tinyConfig } from "../helpers/run-fixture.js";
import { parseRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { resolveActor } from "../../actors/runtime/lifecycle.js";
import { loadRunEnvironments } from "../../actors/runtime/environments.js";
import { ActorMetrics } from "../../actors/runtime/metrics.js";
import { Health } from "../../actors/runtime/heartbeat.js";
import type { ActorContext } from "../../actors/runtime/actor.js";
import { modelConfigOf } from "../../actors/runtime/model-factory.js";
import { InferenceActor } from "../../actors/inference/inference.js";
import { RewardActor } from "../../actors/reward/reward.js";
import { PolicyModel } from "../../kernels/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { ensureTopology, HealthBoard, RunChannels, RunState, StateKeys, type RolloutRow, type Task, type Topology } from "../../streams/index.js";

/**
 * Weights that never end a completion early: every layer's output is zero, so the logits are the last token's
 * (normalised) embedding against every embedding; each id's row points along one axis, and the stop ids' rows are
 * zero. A completion is then always maxTokens long, so the swap lands mid-generation.
 */
function endlessWeights(config: RunConfig): Uint8Array {
  const model = PolicyModel.create(modelConfigOf(config), { seed: 1, threads: 1 });
  const params = model.getParams();
  const stops = new Set(new ByteTokenizer().stopTokenIds());
  const D = config.model.hiddenSize;
  for (const t of model.tensors()) {
    const view = params.subarray(t.offset, t.offset + t.size);
    if (t.name.endsWith("norm.weight")) view.fill(1);
    else if (t.name === "model.embed_tokens.weight") {
      view.fill(0);
      for (let id = 0; id < t.shape[0]!; id++) if (!stops.has(id)) view[id * D + (id % D)] = 10;
    } else view.fill(0);
  }
  model.setParams(params);
  const bytes = model.toSafetensors();
  model.dispose();
  return bytes;
}

function contextOf(actor: string, config: RunConfig, nc: NatsConnection, topology: Topology, signal: AbortSignal): ActorContext {
  const metrics = new ActorMetrics(actor, config.run);
  return {
    actor,
    instance: "test",
    config,
    runDir: mkdtempSync(join(tmpdir(), `rs-inflight-${actor}-`)),
    nc,
    log: pino({ level: "silent" }),
    metrics,
    health: new Health({ actor, instance: "test", board: new HealthBoard(topology.wire.health), lastLog: () => null, metrics }),
    signal,
    publishMetrics: async () => undefined,
  };
}

async function readScored(channels: RunChannels, rows: number): Promise<RolloutRow[]> {
  const reader = channels.scored.reader(1, { actor: "test" });
  const out: RolloutRow[] = [];
  try {
    const deadline = Date.now() + 60_000;
    while (out.length < rows && Date.now() < deadline) out.push(...((await reader.next(500)) ?? []));
  } finally {
    await reader.close();
  }
  return out;
}

test("weights swapped mid-generation: the group goes on, later tokens carry the new version, and the scored rows keep the spans", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  const abort = new AbortController();
  const run = "inflight";
  const maxTokens = 480;
  const config = parseRunConfig(
    tinyConfig(run, mkdtempSync(join(tmpdir(), "rs-inflight-")), {
      model: {
        vocabSize: 288,
        hiddenSize: 64,
        intermediateSize: 64,
        numLayers: 2,
        numHeads: 2,
        numKvHeads: 1,
        maxPositionEmbeddings: 512,
        threads: 1,
        seed: 5,
      },
      rl: { steps: 3, batchSize: 8, groupSize: 8, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens } },
    }),
  );
  const running: Promise<void>[] = [];
  try {
    const topology = await ensureTopology(nc, run);
    const channels = new RunChannels(topology.wire);
    const state = new RunState(topology.kv);
    const weights = endlessWeights(config);
    await channels.weights.publish({ version: 0, step: 0, phase: "rl", bytes: weights });
    await state.put(StateKeys.policyVersion, 0);
    const infCtx = contextOf("inference", config, nc, topology, abort.signal);
    running.push(resolveActor(InferenceActor, { ctx: infCtx, topology, channels, state }).run());
    running.push(resolveActor(RewardActor, { ctx: contextOf("reward", config, nc, topology, abort.signal), topology, channels, state }).run());
    const [env] = [...(await loadRunEnvironments(config)).values()];
    const task: Task = {
      run,
      taskId: `${run}:0:0`,
      epoch: 0,
      index: 0,
      step: 0,
      env: env!.id,
      envKey: env!.key,
      exampleIndex: 0,
      groupSize: 8,
      sampling: config.rl.sampling,
      seed: 3,
    };
    await channels.tasks.publish(task, { msgId: task.taskId });

    // Once the group is decoding, the learner's next version arrives.
    let figures = infCtx.health.snapshot().engine;
    for (let i = 0; !(figures && figures.running === 8 && figures.decodeTokensPerSec > 0); i++) {
      assert.ok(i < 6000, `the group never started decoding: ${JSON.stringify(figures)}`);
      await new Promise((r) => setTimeout(r, 5));
      figures = infCtx.health.snapshot().engine;
    }
    assert.equal(figures.version, 0);
    assert.ok(figures.kvBlocksUsed > 0 && figures.prefixHitRate >= 7 / 8 - 1e-9, `heartbeat figures: ${JSON.stringify(figures)}`);
    await channels.weights.publish({ version: 1, step: 1, phase: "rl", bytes: weights });
    await state.put(StateKeys.policyVersion, 1);

    const rows = await readScored(channels, 8);
    assert.equal(rows.length, 8);
    const switchAt = rows[0]!.versionSpans[0]!.end;
    assert.ok(switchAt > 0 && switchAt < maxTokens, `the switch came mid-generation (token ${switchAt} of ${maxTokens})`);
    for (const r of rows) {
      assert.equal(r.completionIds.length, maxTokens);
      // One group, one engine step for all: every completion switches at the same token.
      assert.deepEqual(r.versionSpans, [
        { version: 0, start: 0, end: switchAt },
        { version: 1, start: switchAt, end: maxTokens },
      ]);
      assert.equal(r.policyVersionMin, 0);
      assert.equal(r.policyVersionMax, 1);
    }
    // The gauges follow the engine every second.
    const gauge = async (name: string) => (await infCtx.metrics.registry.getSingleMetric(`rollstream_engine_${name}`)?.get())?.values[0]?.value;
    for (let i = 0; (await gauge("weights_version")) !== 1; i++) {
      assert.ok(i < 300, `the engine's weights version never reached Prometheus: ${await gauge("weights_version")}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.ok(((await gauge("kv_blocks_free")) ?? 0) > 0);
    assert.ok(((await gauge("prefix_cache_hit_rate")) ?? 0) >= 7 / 8 - 1e-9);
  } finally {
    abort.abort();
    await Promise.allSettled(running);
    await nc.close();
    await srv.cleanup();
  }
});
