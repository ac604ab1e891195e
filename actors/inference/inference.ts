// Inference pulls prompt groups from the tasks work queue, runs the environment's rollout loop with
// the current policy (groupSize completions per prompt, batched in the policy engine), publishes the
// raw group with msg-id = task id, and only then acks the task: a killed inference actor loses no task
// and a redelivered one is deduplicated downstream.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { engineOptionsOf, exitWedged, PolicyEngine } from "../runtime/policy-engine.js";
import { reportEngineFigures } from "../runtime/engine-meter.js";
import { createPolicyModel, createTokenizer, taskLimitsOf } from "../runtime/model-factory.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import {
  checkTask,
  StateKeys,
  toRawRollout,
  type RawRolloutChannel,
  type RunState,
  type Task,
  type TaskChannel,
  type TaskLimits,
  type WeightsChannel,
} from "../../streams/index.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";

@injectable()
export class InferenceActor implements Actor {
  private engine!: PolicyEngine;
  private envs!: Map<string, LoadedEnvironment>;
  private limits!: TaskLimits;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Tasks) private readonly tasks: TaskChannel,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Sandbox) private readonly sandbox: CodeSandbox,
  ) {}

  async run(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    this.envs = await loadRunEnvironments(config);
    this.limits = taskLimitsOf(config, this.envs);
    const tokenizer = createTokenizer(config);
    const model = createPolicyModel(config, { threads: config.actors.inference.threads, log: ctx.log });

    // Wait for the first policy (after SFT, or the learner's initial weights).
    let version = -1;
    const firstPolicy = ctx.health.waiting("policy", { detail: "first version", idle: true });
    while (version < 0 && !ctx.signal.aborted) {
      version = await state.policyVersion();
      if (version < 0) await new Promise((r) => setTimeout(r, 250));
    }
    firstPolicy.end();
    if (ctx.signal.aborted) return;
    model.loadSafetensors(await ctx.health.wait("weights", () => this.weights.fetch(version), { detail: `v${version}` }));
    const versionGauge = ctx.metrics.gauge("policy_version", "policy version in use");
    versionGauge.set(version);
    this.engine = new PolicyEngine(model, tokenizer, version, {
      ...engineOptionsOf(config),
      seed: config.rl.seed,
      onWedged: (e) => exitWedged(ctx, e),
      onWeightsApplied: (w) => {
        versionGauge.set(w.version);
        log.debug(w, "weights swapped");
      },
      onWeightsError: (e, v) => log.error({ version: v, err: e.message }, "new weights could not be loaded; keeping the current ones"),
    });
    log.info({ version, weightUpdate: config.actors.inference.weightUpdate }, "policy loaded");

    const stopFigures = reportEngineFigures(ctx, () => this.engine.figures());
    const follower = this.followPolicy();
    try {
      await this.tasks.consume((task) => this.handleTask(task), consumeOptions(ctx, "task", config.actors.inference.maxInFlight));
      await follower;
    } finally {
      stopFigures();
    }
  }

  /**
   * Keeps the engine on the newest policy version in KV. One loop fetches the latest wanted version at a
   * time; a fetch that fails or passes its deadline is retried with backoff, not dropped: when the learner
   * is starved no new version comes to trigger a retry, and rollouts from ever older weights would all be
   * dropped as stale (the run stalls).
   */
  private async followPolicy(): Promise<void> {
    const { ctx, state } = this;
    const { log } = ctx;
    let wanted = this.engine.latestVersion;
    let wake: (() => void) | null = null;
    await state.watch(
      StateKeys.policyVersion,
      (v) => {
        wanted = v;
        wake?.();
      },
      ctx.signal,
      (e) => log.warn({ err: e.message }, "invalid policy.version ignored"),
    );
    const failures = ctx.metrics.counter("weights_fetch_failures_total", "weight fetches that failed or passed their deadline");
    const sleep = (ms: number) =>
      new Promise<void>((r) => {
        wake = r;
        setTimeout(r, ms);
      }).finally(() => (wake = null));
    ctx.signal.addEventListener("abort", () => wake?.(), { once: true });
    let backoffMs = 500;
    while (!ctx.signal.aborted) {
      const v = wanted;
      // latestVersion: weights handed over and waiting for a step boundary are not fetched again.
      if (v === this.engine.latestVersion) {
        await sleep(5_000);
        // Belt and braces next to the watch: read the current version now and then.
        wanted = await state.policyVersion().catch(() => wanted);
        continue;
      }
      // A lower version means the learner was restored from a checkpoint: follow it back.
      const rollback = v < this.engine.latestVersion;
      if (rollback) log.warn({ from: this.engine.latestVersion, to: v }, "policy rolled back by a restored learner");
      try {
        const bytes = await ctx.health.wait("weights", () => this.weights.fetch(v, ctx.config.actors.inference.weightsDeadlineMs), { detail: `v${v}` });
        this.engine.swapWeights(v, bytes, rollback);
        backoffMs = 500;
      } catch (e) {
        failures.inc();
        log.warn({ version: v, err: (e as Error).message, retryInMs: backoffMs }, "could not fetch weights; keeping the current ones for now");
        await sleep(backoffMs);
        backoffMs = Math.min(10_000, backoffMs * 2);
      }
    }
  }

  /**
   * rl.staleness pace: a task carries the learner's version at dispatch, and the orchestrator's staleness gate
   * counts from it, so the task does not start on older weights: it waits for the policy follower to load them.
   * It goes ahead anyway when the run's version went back below it (a learner restored from a checkpoint) or
   * when the weights take longer than their deadline (the learner then counts any sample past the bound).
   */
  private async waitForVersion(version: number): Promise<void> {
    const { ctx } = this;
    const deadline = Date.now() + ctx.config.actors.inference.weightsDeadlineMs;
    await ctx.health.wait(
      "weights",
      async () => {
        while (this.engine.version < version && !ctx.signal.aborted && Date.now() < deadline) {
          if ((await this.state.policyVersion()) < version) return;
          await new Promise((r) => setTimeout(r, 50));
        }
      },
      { detail: `v${version} for a paced task` },
    );
    if (this.engine.version < version && !ctx.signal.aborted)
      ctx.log.warn({ want: version, have: this.engine.version }, "a paced task starts on older weights than it was dispatched for");
  }

  private async handleTask(task: Task): Promise<void> {
    const { ctx } = this;
    // Before any work: a task outside the run's limits (a group of a million, a billion tokens) is dead-lettered
    // at once with the reason, never started and never retried.
    checkTask(task, this.limits);
    const loaded = this.envs.get(task.envKey)!;
    if (task.minPolicyVersion !== undefined && this.engine.version < task.minPolicyVersion) await this.waitForVersion(task.minPolicyVersion);
    const started = Date.now();
    const tokensBefore = this.engine.generatedTokens;
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    const model = this.engine.client(task.seed);
    const rollouts = await Promise.all(
      Array.from({ length: task.groupSize }, () => loaded.env.rollout({ model, sandbox: this.sandbox, sampling: task.sampling, signal: ctx.signal }, row)),
    );
    const raw = rollouts.map(toRawRollout);
    const tokens = raw.reduce((s, r) => s + r.completionIds.length, 0);
    await this.rawRollouts.publish({ task, rollouts: raw, producer: ctx.instance });
    await ctx.publishMetrics(
      "task",
      {
        step: task.step,
        samples: raw.length,
        tokens,
        generatedTokens: this.engine.generatedTokens - tokensBefore,
        ms: Date.now() - started,
        policyVersion: this.engine.version,
      },
      task.step,
    );
  }
}
