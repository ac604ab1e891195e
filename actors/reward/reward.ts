// Reward consumes raw rollout groups, scores them with the environment's rubric (which may call the
// sandbox), computes group advantages and publishes one Arrow batch per group on rollouts.scored with
// msg-id = task id; the raw message is acked only after that publish is stored.
import { inject, injectable } from "tsyringe";
import type { JsMsg } from "@nats-io/jetstream";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { connectSandbox } from "../runtime/sandbox-connect.js";
import { runConsumerLoop } from "../runtime/consumer-loop.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";
import { RawRolloutGroupSchema } from "../../streams/messages.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { inlineLimit, publishPayload, readPayload } from "../../streams/large-payload.js";
import { PoisonMessageError } from "../../streams/dead-letter.js";
import { encodeRolloutBatch } from "../../streams/arrow-codec.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutRow } from "../../streams/rollout-schema.js";
import { encodeChunked } from "../../streams/batch-split.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import type { RolloutResult } from "../../environments/api/index.js";
import { groupAdvantages } from "./advantages.js";

@injectable()
export class RewardActor implements Actor {
  private envs!: Map<string, LoadedEnvironment>;
  private sandbox: CodeSandbox | undefined;

  constructor(@inject(Tokens.Context) private readonly ctx: ActorContext) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.envs = await loadRunEnvironments(ctx.config);
    this.sandbox = connectSandbox(ctx);
    await runConsumerLoop(ctx, {
      stream: ctx.topology.names.streams.rollouts,
      durable: ctx.topology.names.consumers.reward,
      maxInFlight: ctx.config.actors.reward.maxInFlight,
      what: "rollout group",
    }, (m) => this.handleGroup(m));
  }

  private async handleGroup(msg: JsMsg): Promise<void> {
    const { ctx } = this;
    const group = decodeMsgpack(RawRolloutGroupSchema, await readPayload(msg, ctx.topology.blobs), "raw rollout group");
    const task = group.task;
    if (task.run !== ctx.config.run) throw new PoisonMessageError(`group belongs to run ${task.run}, not ${ctx.config.run}`);
    const loaded = this.envs.get(task.envKey);
    if (!loaded) throw new PoisonMessageError(`group names environment key ${task.envKey}, which this run's config does not have`);
    if (loaded.id !== task.env) throw new PoisonMessageError(`group was made with ${task.env} but this actor resolved ${loaded.id}`);
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    const results: RolloutResult[] = group.rollouts.map((r) => ({
      promptIds: r.promptIds,
      completionIds: r.completionIds,
      completionMask: r.completionMask,
      samplerLogprobs: r.samplerLogprobs,
      messages: r.messages,
      numTurns: r.numTurns,
      stopReason: r.stopReason,
      isTruncated: r.isTruncated,
      policyVersionMin: r.policyVersionMin,
      policyVersionMax: r.policyVersionMax,
      state: {},
      timings: { generateMs: r.generateMs, envMs: r.envMs },
    }));
    const t0 = Date.now();
    const scores = await loaded.env.scoreGroup(results, row, { sandbox: this.sandbox });
    const scoreMs = Date.now() - t0;
    if (scores.length !== results.length) throw new Error(`rubric of ${task.env} returned ${scores.length} scores for ${results.length} rollouts`);
    const rewards = scores.map((s) => (Number.isFinite(s.reward) ? s.reward : 0));
    const adv = groupAdvantages(rewards, ctx.config.rl.normalizeAdvantage);
    const rows: RolloutRow[] = group.rollouts.map((r, i) => ({
      taskId: task.taskId,
      groupId: task.taskId,
      env: task.env,
      exampleId: row.id,
      promptIds: Int32Array.from(r.promptIds),
      completionIds: Int32Array.from(r.completionIds),
      completionMask: Uint8Array.from(r.completionMask),
      samplerLogprobs: Float32Array.from(r.samplerLogprobs),
      policyVersionMin: r.policyVersionMin,
      policyVersionMax: r.policyVersionMax,
      reward: rewards[i]!,
      advantage: adv[i]!,
      rewardComponents: scores[i]!.components,
      isTruncated: r.isTruncated,
      stopReason: r.stopReason,
      numTurns: r.numTurns,
      generateMs: r.generateMs,
      scoreMs,
      step: task.step,
    }));
    const meta = { run: ctx.config.run, schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: ctx.instance, createdAt: new Date().toISOString() };
    const maxPayload = ctx.nc.info?.max_payload ?? 1024 * 1024;
    // Complete Arrow batches that fit in a message each; a single row too large for any message is
    // carried on its own through the blob bucket by publishPayload. Nothing is dropped.
    const chunks = encodeChunked(
      rows,
      inlineLimit(maxPayload),
      (part, { chunk, chunks }) => encodeRolloutBatch(part, { ...meta, batchId: task.taskId, chunk, chunks }),
      { allowOversizedRows: true },
    );
    for (const c of chunks) {
      const h = makeHeaders({
        contentType: ContentType.arrow,
        run: task.run,
        step: task.step,
        env: task.env,
        policyVersion: Math.min(...c.rows.map((r) => r.policyVersionMin)),
        rows: c.rows.length,
        tokens: c.rows.reduce((s, r) => s + r.completionIds.length, 0),
        schema: ROLLOUT_SCHEMA_VERSION,
        chunk: `${c.chunk + 1}/${c.chunks}`,
        kind: "rollouts.scored",
      });
      // align: the learner then decodes the batch in place instead of copying it first.
      await publishPayload(ctx.js, ctx.topology.blobs, ctx.topology.names.subjects.rolloutsScored, c.bytes, {
        headers: h,
        msgId: `scored:${task.taskId}:${c.chunk}`,
        maxPayload,
        align: true,
      });
    }
    const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
    const values: Record<string, number> = {
      step: task.step,
      rewardMean: mean,
      passRate: rewards.filter((r) => r >= 1 - 1e-6).length / rewards.length,
      samples: rows.length,
      scoreMs,
      errors: scores.reduce((s, x) => s + x.errors.length, 0),
    };
    for (const [k, v] of Object.entries(scores[0]?.components ?? {})) {
      values[`reward_${k}`] = scores.reduce((s, x) => s + (x.components[k] ?? 0), 0) / scores.length;
    }
    await ctx.publishMetrics("group", values, task.step, { env: task.env });
  }
}
