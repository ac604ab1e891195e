// Inference pulls prompt groups from the tasks work queue, runs the environment's rollout loop with
// the current policy (groupSize completions per prompt, batched in the policy engine), publishes the
// raw group with msg-id = task id, and only then acks the task: a killed inference actor loses no task
// and a redelivered one is deduplicated downstream.
import { inject, injectable } from "tsyringe";
import type { JsMsg } from "@nats-io/jetstream";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { PolicyEngine } from "../runtime/policy-engine.js";
import { createPolicyModel, createTokenizer } from "../runtime/model-factory.js";
import { getWeights } from "../runtime/weights.js";
import { runConsumerLoop } from "../runtime/consumer-loop.js";
import { decodeMsgpack, encodeMsgpack } from "../../streams/msgpack-codec.js";
import { RawRolloutGroupSchema, TaskSchema, type RawRollout, type Task } from "../../streams/messages.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { publishPayload } from "../../streams/large-payload.js";
import { StateKeys } from "../../streams/subjects.js";
import { PoisonMessageError } from "../../streams/dead-letter.js";
import { connectSandbox } from "../runtime/sandbox-connect.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";

@injectable()
export class InferenceActor implements Actor {
  private engine!: PolicyEngine;
  private envs!: Map<string, LoadedEnvironment>;
  private sandbox: CodeSandbox | undefined;

  constructor(@inject(Tokens.Context) private readonly ctx: ActorContext) {}

  async run(): Promise<void> {
    const { ctx } = this;
    const { config, state, log } = ctx;
    this.envs = await loadRunEnvironments(config);
    this.sandbox = connectSandbox(ctx);
    const tokenizer = createTokenizer(config);
    const model = createPolicyModel(config, { threads: config.actors.inference.threads });

    // Wait for the first policy (after SFT, or the learner's initial weights).
    let version = -1;
    while (version < 0 && !ctx.signal.aborted) {
      version = await state.policyVersion();
      if (version < 0) await new Promise((r) => setTimeout(r, 250));
    }
    if (ctx.signal.aborted) return;
    model.loadSafetensors(await getWeights(ctx.topology.objects, version));
    this.engine = new PolicyEngine(model, tokenizer, version, { seed: config.rl.seed });
    log.info({ version }, "policy loaded");

    const versionGauge = ctx.metrics.gauge("policy_version", "policy version in use");
    versionGauge.set(version);
    let fetching = Promise.resolve();
    await state.watchNumber(StateKeys.policyVersion, (v) => {
      if (v === this.engine.version) return;
      fetching = fetching.then(async () => {
        if (v === this.engine.version) return;
        // A lower version means the learner was restored from a checkpoint: follow it back.
        const rollback = v < this.engine.version;
        if (rollback) log.warn({ from: this.engine.version, to: v }, "policy rolled back by a restored learner");
        try {
          this.engine.swapWeights(v, await getWeights(ctx.topology.objects, v), rollback);
          versionGauge.set(v);
          log.debug({ version: v }, "weights swapped");
        } catch (e) {
          log.warn({ version: v, err: (e as Error).message }, "could not fetch weights; keeping the current ones");
        }
      });
    }, ctx.signal);

    await runConsumerLoop(ctx, {
      stream: ctx.topology.names.streams.tasks,
      durable: ctx.topology.names.consumers.inference,
      maxInFlight: config.actors.inference.maxTasksInFlight,
      what: "task",
    }, (m) => this.handleTask(m));
  }

  private async handleTask(msg: JsMsg): Promise<void> {
    const { ctx } = this;
    const task = decodeMsgpack(TaskSchema, msg.data, "task");
    if (task.run !== ctx.config.run) throw new PoisonMessageError(`task belongs to run ${task.run}, not ${ctx.config.run}`);
    const loaded = this.envs.get(task.envKey);
    if (!loaded) throw new PoisonMessageError(`task names environment key ${task.envKey}, which this run's config does not have`);
    if (loaded.id !== task.env) throw new PoisonMessageError(`task wants ${task.env} but this actor resolved ${loaded.id}`);
    const started = Date.now();
    const tokensBefore = this.engine.generatedTokens;
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    const model = this.engine.client(task.seed);
    const rollouts = await Promise.all(
      Array.from({ length: task.groupSize }, () =>
        loaded.env.rollout({ model, sandbox: this.sandbox, sampling: task.sampling, signal: ctx.signal }, row),
      ),
    );
    const raw: RawRollout[] = rollouts.map((r) => ({
      promptIds: r.promptIds,
      completionIds: r.completionIds,
      completionMask: r.completionMask.map((m) => (m ? 1 : 0)) as (0 | 1)[],
      samplerLogprobs: r.samplerLogprobs,
      messages: r.messages.map((m) => ({ role: m.role, content: m.content })),
      numTurns: r.numTurns,
      stopReason: r.stopReason,
      isTruncated: r.isTruncated,
      policyVersionMin: r.policyVersionMin,
      policyVersionMax: r.policyVersionMax,
      generateMs: r.timings.generateMs,
      envMs: r.timings.envMs,
    }));
    const tokens = raw.reduce((s, r) => s + r.completionIds.length, 0);
    // Long multi-turn groups can outgrow max_payload: publishPayload then carries them via the blob bucket.
    const payload = encodeMsgpack(RawRolloutGroupSchema, { task, rollouts: raw, producer: ctx.instance });
    await publishPayload(ctx.js, ctx.topology.blobs, ctx.topology.names.subjects.rolloutsRaw, payload, {
      msgId: `raw:${task.taskId}`,
      maxPayload: ctx.nc.info?.max_payload ?? 1024 * 1024,
      headers: makeHeaders({
        contentType: ContentType.msgpack,
        run: task.run,
        step: task.step,
        env: task.env,
        policyVersion: Math.min(...raw.map((r) => r.policyVersionMin)),
        rows: raw.length,
        tokens,
        kind: "rollouts.raw",
      }),
    });
    const ms = Date.now() - started;
    await ctx.publishMetrics("task", {
      step: task.step,
      samples: raw.length,
      tokens,
      generatedTokens: this.engine.generatedTokens - tokensBefore,
      ms,
      policyVersion: this.engine.version,
    }, task.step);
  }
}
