// Reward consumes raw rollout groups, scores them with the environment's rubric (which may call the
// sandbox), computes group advantages and publishes the scored rows on rollouts.scored (batch id = task
// id); the raw message is acked only after that publish is stored. What the rubric scores is exactly the
// RolloutResult the environment returned in inference (state, tool names and all), so a rollout scores
// the same here as in `rollstream eval`.
import type { JsMsg } from "@nats-io/jetstream";
import type { Counter } from "prom-client";
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import { failpoint } from "../runtime/failpoints.js";
import { rolloutLimitsOf } from "../runtime/model-factory.js";
import {
  checkAdvantage,
  checkRolloutLimits,
  PoisonMessageError,
  RolloutRejectedError,
  toScoredRow,
  type DeadLetterChannel,
  type RawRolloutChannel,
  type RawRolloutGroup,
  type RunState,
  type ScoredChannel,
} from "../../streams/index.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import { groupAdvantages, isZeroVariance } from "../runtime/advantages.js";
import { advantageKindOf } from "../runtime/config.js";
import { LENGTH_PENALTY_METRIC, lengthPenalty, modelTokens } from "../runtime/length-penalty.js";

@injectable()
export class RewardActor implements Actor {
  private envs!: Map<string, LoadedEnvironment>;
  private overlong!: Counter;
  private filtered!: Counter;
  private capHits!: Counter;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Scored) private readonly scored: ScoredChannel,
    @inject(Tokens.DeadLetters) private readonly deadLetters: DeadLetterChannel,
    @inject(Tokens.Sandbox) private readonly sandbox: CodeSandbox,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.envs = await loadRunEnvironments(ctx.config);
    this.overlong = ctx.metrics.counter("rollouts_overlong_total", "rollouts longer than the context, left out of training");
    this.filtered = ctx.metrics.counter("groups_filtered_total", "zero-variance groups left out of training (rl.filter), by environment", ["env"]);
    this.capHits = ctx.metrics.counter("groups_refill_cap_total", "zero-variance groups trained on (zero advantage) past rl.filter.maxRefillRounds", ["env"]);
    await this.rawRollouts.consume((g, msg) => this.handleGroup(g, msg), consumeOptions(ctx, "rollout group", ctx.config.actors.reward.maxInFlight));
  }

  private async handleGroup(group: RawRolloutGroup, msg: JsMsg): Promise<void> {
    const { ctx } = this;
    const task = group.task;
    if (task.run !== ctx.config.run) throw new PoisonMessageError(`group belongs to run ${task.run}, not ${ctx.config.run}`);
    const loaded = this.envs.get(task.envKey);
    if (!loaded) throw new PoisonMessageError(`group names environment key ${task.envKey}, which this run's config does not have`);
    if (loaded.id !== task.env) throw new PoisonMessageError(`group was made with ${task.env} but this actor resolved ${loaded.id}`);
    if (group.rollouts.length !== task.groupSize) {
      throw new RolloutRejectedError("group", `task ${task.taskId} asked for ${task.groupSize} rollouts, the group has ${group.rollouts.length}`);
    }
    // Semantic checks before any scoring: what the learner could not train on never reaches it.
    const limits = rolloutLimitsOf(ctx.config, await this.state.policyVersion());
    // A rollout longer than the context cannot be trained on as sampled. Our own inference makes them
    // when a multi-turn transcript outgrows the window: they are left out (the rest of the group is
    // scored and trained on), counted, and the raw group is copied to the dead-letter subject with the
    // reason, so nothing is cut silently. Any other violation rejects the whole group.
    const overlong = new Map<number, string>();
    group.rollouts.forEach((r, i) => {
      try {
        checkRolloutLimits(r, limits, `rollout ${i} of task ${task.taskId}`);
      } catch (e) {
        if (!(e instanceof RolloutRejectedError && e.reason === "context")) throw e;
        overlong.set(i, e.message);
      }
    });
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    failpoint("reward.score", [task.taskId]);
    const t0 = Date.now();
    const scores = await ctx.health.work(`score ${task.taskId}`, () => loaded.env.scoreGroup(group.rollouts, row, { sandbox: this.sandbox }));
    const scoreMs = Date.now() - t0;
    if (scores.length !== group.rollouts.length)
      throw new Error(`rubric of ${task.env} returned ${scores.length} scores for ${group.rollouts.length} rollouts`);
    const kept = group.rollouts.map((r, i) => ({ r, score: scores[i]!, i })).filter((x) => !overlong.has(x.i));
    const rewards = scores.map((s) => (Number.isFinite(s.reward) ? s.reward : 0));
    // The zero-variance filter judges the rubric's rewards of what would be trained on: a group of all-wrong
    // (or all-right) completions is left out, and the orchestrator reads this group's metrics event and
    // dispatches a replacement. Past the last replacement round it is trained on, with advantages of exactly
    // zero: it is never passed off as informative, and the step is never starved.
    const filter = ctx.config.rl.filter;
    const round = task.round ?? 0;
    const uninformative =
      filter.zeroVariance &&
      isZeroVariance(
        kept.map((x) => rewards[x.i]!),
        filter.tolerance,
      );
    const filtered = uninformative && round < filter.maxRefillRounds;
    // rl.lengthPenalty shapes what the advantages see (never the rubric reward the filter judged).
    const lp = ctx.config.rl.lengthPenalty;
    const shaping = { coef: lp.coef, buffer: lp.buffer, maxTokens: lp.maxTokens ?? ctx.config.rl.sampling.maxTokens };
    const penalties = group.rollouts.map((r) => lengthPenalty(modelTokens(r.completionMask), shaping));
    // Advantages are relative to what is trained on.
    const adv = uninformative
      ? kept.map(() => 0)
      : groupAdvantages(
          kept.map((x) => rewards[x.i]! + penalties[x.i]!),
          advantageKindOf(ctx.config.rl),
        );
    adv.forEach((a, k) => {
      checkAdvantage(a, limits, `rollout ${kept[k]!.i} of task ${task.taskId}`);
    });
    if (overlong.size > 0) {
      this.overlong.inc(overlong.size);
      const first = [...overlong.values()][0]!.replace(/^context: /, "");
      await this.deadLetters.send(msg, `context: ${overlong.size} of ${group.rollouts.length} rollouts left out (${first})`, ctx.actor);
      ctx.log.warn({ task: task.taskId, overlong: overlong.size }, "rollouts longer than the context left out");
    }
    const rows = filtered
      ? []
      : kept.map((x, k) => {
          const score = lp.coef > 0 ? { ...x.score, metrics: { ...x.score.metrics, [LENGTH_PENALTY_METRIC]: penalties[x.i]! } } : x.score;
          return toScoredRow(x.r, { task, exampleId: row.id, score, reward: rewards[x.i]!, advantage: adv[k]!, scoreMs });
        });
    if (rows.length > 0) await this.scored.publish(rows, { batchId: task.taskId, step: task.step, env: task.env, producer: ctx.instance });
    if (filtered) {
      this.filtered.inc({ env: task.env });
      ctx.log.debug({ task: task.taskId, round, env: task.env }, "zero-variance group left out");
    } else if (uninformative) {
      this.capHits.inc({ env: task.env });
      ctx.log.warn(
        { task: task.taskId, round, env: task.env, maxRefillRounds: filter.maxRefillRounds },
        "refill cap hit: a zero-variance group is trained on with zero advantage",
      );
    }

    const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
    const values: Record<string, number> = {
      step: task.step,
      // The orchestrator's difficulty pools (rl.pool) keep a running pass rate per example from these.
      exampleIndex: task.exampleIndex,
      rewardMean: mean,
      passRate: rewards.filter((r) => r >= 1 - 1e-6).length / rewards.length,
      samples: rows.length,
      // The orchestrator replaces a group with filtered 1 (labels task and envKey name it).
      filtered: filtered ? 1 : 0,
      capHit: uninformative && !filtered ? 1 : 0,
      round,
      rewardSpread: kept.length ? Math.max(...kept.map((x) => rewards[x.i]!)) - Math.min(...kept.map((x) => rewards[x.i]!)) : 0,
      overlong: overlong.size,
      scoreMs,
      errors: scores.reduce((s, x) => s + x.errors.length, 0),
    };
    // Group means of every reward component and metric, so the training curves show them too.
    for (const [prefix, pick] of [
      ["reward_", (x: (typeof scores)[number]) => x.components],
      ["metric_", (x: (typeof scores)[number]) => x.metrics],
    ] as const) {
      const names = new Set(scores.flatMap((x) => Object.keys(pick(x))));
      for (const k of names) values[`${prefix}${k}`] = scores.reduce((s, x) => s + (pick(x)[k] ?? 0), 0) / scores.length;
    }
    await ctx.publishMetrics("group", values, task.step, { env: task.env, envKey: task.envKey, task: task.taskId });
  }
}
