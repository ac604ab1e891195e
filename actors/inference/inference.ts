// Inference pulls prompt groups from the tasks work queue, runs the environment's rollout loop with
// the current policy (groupSize completions per prompt, batched in the policy engine), publishes the
// raw group with msg-id = task id, and only then acks the task: a killed inference actor loses no task
// and a redelivered one is deduplicated downstream.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { closeRunEnvironments, loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { startRemoteRuntime, type RemoteRuntime } from "../runtime/remote-envs.js";
import { createTokenizer, taskLimitsOf } from "../runtime/model-factory.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import { policyVersionsOf } from "../runtime/run-state-errors.js";
import {
  checkTask,
  RolloutRejectedError,
  StateKeys,
  toRawRollout,
  type RawRolloutChannel,
  type RunState,
  type Task,
  type TaskChannel,
  type PolicyVersions,
  type TaskLimits,
  type WeightsChannel,
} from "../../streams/index.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import { reportEngineFigures } from "../runtime/engine-meter.js";
import { type InferenceBackend, openBackend } from "./backend.js";

@injectable()
export class InferenceActor implements Actor {
  private engine!: InferenceBackend;
  private envs!: Map<string, LoadedEnvironment>;
  private limits!: TaskLimits;
  private versions!: PolicyVersions;
  private remote: RemoteRuntime | undefined;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Tasks) private readonly tasks: TaskChannel,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Sandbox) private readonly sandbox: CodeSandbox,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.envs = await loadRunEnvironments(ctx.config);
    try {
      this.remote = await startRemoteRuntime(ctx, this.envs.values());
      await this.serve();
    } finally {
      // Shut down here rather than at process exit: rollouts in flight are cancelled on their servers first.
      await this.remote?.close();
      await closeRunEnvironments(this.envs.values());
    }
  }

  private async serve(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    this.limits = taskLimitsOf(config, this.envs);
    const tokenizer = createTokenizer(config);
    this.versions = policyVersionsOf(ctx, state, this.weights);

    // Wait for the first policy (after SFT, or the learner's initial weights). A bad KV value is reported and the
    // newest announced version used instead (PolicyVersions); with neither, this keeps waiting.
    let version = -1;
    const firstPolicy = ctx.health.waiting("policy", { detail: "first version", idle: true });
    while (version < 0 && !ctx.signal.aborted) {
      version = (await this.versions.newest()) ?? -1;
      if (version < 0) await new Promise((r) => setTimeout(r, 250));
    }
    firstPolicy.end();
    if (ctx.signal.aborted) return;
    const bytes = await ctx.health.wait("weights", () => this.weights.fetch(version), { detail: `v${version}` });
    this.engine = await ctx.health.wait("weights", () => openBackend(ctx, tokenizer, version, bytes, this.weights), {
      detail: `${config.actors.inference.backend} backend at v${version}`,
    });
    log.info({ version }, "policy loaded");

    const versionGauge = ctx.metrics.gauge("policy_version", "policy version in use");
    versionGauge.set(version);
    const engine = this.engine;
    const stopFigures = engine.figures ? reportEngineFigures(ctx, () => engine.figures!()) : () => undefined;
    const follower = this.followPolicy(versionGauge);
    try {
      await this.tasks.consume((task) => this.handleTask(task), consumeOptions(ctx, "task", config.actors.inference.maxInFlight));
      await follower;
    } finally {
      stopFigures();
    }
  }

  /** The newest version handed to the engine: in use, or (local engine) to be applied at its next step boundary. */
  private get latestVersion(): number {
    return this.engine.latestVersion ?? this.engine.version;
  }

  /**
   * Keeps the engine on the newest policy version in KV. One loop fetches the latest wanted version at a
   * time; a fetch that fails or passes its deadline is retried with backoff, not dropped: when the learner
   * is starved no new version comes to trigger a retry, and rollouts from ever older weights would all be
   * dropped as stale (the run stalls). A KV value that is not JSON or beyond rl.steps is never wanted: it is
   * reported as a fault of the run's state and the newest announced version is wanted instead (PolicyVersions).
   */
  private async followPolicy(versionGauge: { set(v: number): void }): Promise<void> {
    const { ctx, state } = this;
    const { log } = ctx;
    let wanted = this.latestVersion;
    let wake: (() => void) | null = null;
    const reread = () =>
      this.versions
        .newest()
        .then((v) => {
          if (v !== null && v >= 0) wanted = v;
          wake?.();
        })
        .catch(() => undefined);
    await state.watch(
      StateKeys.policyVersion,
      (v) => {
        if (!this.versions.plausible(v)) return void reread();
        wanted = v;
        wake?.();
      },
      ctx.signal,
      () => void reread(),
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
      if (v === this.latestVersion) {
        await sleep(5_000);
        // Belt and braces next to the watch: read the current version now and then.
        const newest = await this.versions.newest().catch(() => null);
        if (newest !== null && newest >= 0) wanted = newest;
        continue;
      }
      // A lower version means the learner was restored from a checkpoint: follow it back.
      const rollback = v < this.latestVersion;
      if (rollback) log.warn({ from: this.latestVersion, to: v }, "policy rolled back by a restored learner");
      try {
        const bytes = await ctx.health.wait("weights", () => this.weights.fetch(v, ctx.config.actors.inference.weightsDeadlineMs), { detail: `v${v}` });
        await this.engine.swapWeights(v, bytes, rollback);
        versionGauge.set(v);
        log.debug({ version: v }, "weights swapped");
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
          const newest = await this.versions.newest().catch(() => null);
          if (newest !== null && newest < version) return;
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
    const endpoint = this.remote?.endpoint;
    const rollouts = await Promise.all(
      this.engine.rolloutClients(task).map((model, i) =>
        loaded.env
          .rollout({ model, sandbox: this.sandbox, sampling: task.sampling, signal: ctx.signal, endpoint, rolloutId: `${task.taskId}/${i}` }, row)
          .catch((e: unknown) => {
            // A remote server's trace that says other than our engine generated is the task's fault: dead-lettered with the reason.
            if (e instanceof Error && e.name === "TraceMismatchError")
              throw new RolloutRejectedError("trace", `rollout ${i} of task ${task.taskId}: ${e.message}`);
            throw e;
          }),
      ),
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
