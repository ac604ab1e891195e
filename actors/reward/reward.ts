// Reward consumes raw rollout groups, scores them with the environment's rubric (which may call the
// sandbox), computes group advantages and publishes the scored rows on rollouts.scored (batch id = task
// id); the raw message is acked only after that publish is stored. What the rubric scores is exactly the
// RolloutResult the environment returned in inference (state, tool names and all), so a rollout scores
// the same here as in `rollstream eval`. What became of each group (scored, left out by the zero-variance
// filter, trained past the refill cap) goes out as a GroupOutcome on rs.<run>.groups, which the orchestrator
// reads; the metrics event beside it is for the curves only.
import type { JsMsg } from "@nats-io/jetstream";
import type { Counter } from "prom-client";
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import { failpoint } from "../runtime/failpoints.js";
import { createTokenizer, rolloutLimitsOf, taskLimitsOf } from "../runtime/model-factory.js";
import { policyVersionsOf } from "../runtime/run-state-errors.js";
import {
  checkAdvantage,
  checkRolloutLimits,
  checkTask,
  checkTurnText,
  PoisonMessageError,
  RolloutRejectedError,
  toScoredRow,
  type DeadLetterChannel,
  type GroupChannel,
  type GroupOutcome,
  type PolicyVersions,
  type RawRolloutChannel,
  type RawRolloutGroup,
  type TaskLimits,
  type RolloutLimits,
  type RunState,
  type ScoredChannel,
  type WeightsChannel,
} from "../../streams/index.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import { completionMessages, type ScoreResult, type TokenizerLike } from "../../environments/api/index.js";
import { advantageKindOf } from "../runtime/config.js";
import { advantagesFor, judgeGroup, passRate, type GroupVerdict } from "../../rl/group-filter.js";
import { LENGTH_PENALTY_METRIC, lengthPenalty, modelTokens } from "../../rl/length-penalty.js";

@injectable()
export class RewardActor implements Actor {
  private envs!: Map<string, LoadedEnvironment>;
  private tokenizer!: TokenizerLike;
  private taskLimits!: TaskLimits;
  private overlong!: Counter;
  private filtered!: Counter;
  private capHits!: Counter;
  private versions!: PolicyVersions;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Scored) private readonly scored: ScoredChannel,
    @inject(Tokens.DeadLetters) private readonly deadLetters: DeadLetterChannel,
    @inject(Tokens.Groups) private readonly groups: GroupChannel,
    @inject(Tokens.Sandbox) private readonly sandbox: CodeSandbox,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.envs = await loadRunEnvironments(ctx.config);
    this.tokenizer = createTokenizer(ctx.config);
    this.taskLimits = taskLimitsOf(ctx.config, this.envs);
    this.versions = policyVersionsOf(ctx, this.state, this.weights);
    this.overlong = ctx.metrics.counter("rollouts_overlong_total", "rollouts longer than the context, left out of training");
    this.filtered = ctx.metrics.counter("groups_filtered_total", "zero-variance groups left out of training (rl.filter), by environment", ["env"]);
    this.capHits = ctx.metrics.counter("groups_refill_cap_total", "zero-variance groups trained on (zero advantage) past rl.filter.maxRefillRounds", ["env"]);
    await this.rawRollouts.consume((g, msg) => this.handleGroup(g, msg), consumeOptions(ctx, "rollout group", ctx.config.actors.reward.maxInFlight));
  }

  private async handleGroup(group: RawRolloutGroup, msg: JsMsg): Promise<void> {
    const { ctx } = this;
    const task = group.task;
    const loaded = this.checkGroup(group);
    // Semantic checks before any scoring: what the learner could not train on never reaches it.
    const limits = rolloutLimitsOf(ctx.config, await this.newestVersion(group));
    const overlong = this.overlongRollouts(group, limits);
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    // The rubric scores the text, the learner trains the ids: a group whose text says other than its ids is
    // dead-lettered before it is scored (streams/turn-text.ts says what exactly is compared).
    group.rollouts.forEach((r, i) => {
      checkTurnText(r, completionMessages(r, row), this.tokenizer, task.sampling.stop ?? [], `rollout ${i} of task ${task.taskId}`);
    });
    failpoint("reward.score", [task.taskId]);
    const t0 = Date.now();
    const scores = await ctx.health.work(`score ${task.taskId}`, () => loaded.env.scoreGroup(group.rollouts, row, { sandbox: this.sandbox }));
    const scoreMs = Date.now() - t0;
    if (scores.length !== group.rollouts.length)
      throw new Error(`rubric of ${task.env} returned ${scores.length} scores for ${group.rollouts.length} rollouts`);
    const scored = this.judge(group, scores, overlong, limits);
    if (overlong.size > 0) await this.reportOverlong(msg, group, overlong);
    const rows =
      scored.verdict === "filtered"
        ? []
        : scored.kept.map((i, k) =>
            toScoredRow(group.rollouts[i]!, {
              task,
              exampleId: row.id,
              score: scored.scores[i]!,
              reward: scored.rewards[i]!,
              advantage: scored.advantages[k]!,
              scoreMs,
            }),
          );
    if (rows.length > 0) await this.scored.publish(rows, { batchId: task.taskId, step: task.step, env: task.env, producer: ctx.instance });
    // The outcome goes out after the rows are stored and before the raw group is acked: a redelivered group
    // publishes it again under the same msg-id.
    await this.groups.publish(outcomeOf(group, scored, rows.length, overlong.size, scoreMs));
    this.countVerdict(task, scored.verdict);
    await this.publishDisplay(group, scored, rows.length, overlong.size, scoreMs);
  }

  /**
   * The newest policy version a rollout may claim (the future_version check). KV policy.version is read through
   * PolicyVersions: a value that is not JSON or beyond rl.steps is a fault of the run's state, reported, and the
   * newest announced weights version stands in. A group claiming a later version than that is checked against the
   * weights stream as well (a rollout from a version the learner announced is not from the future, whatever KV
   * says). With nothing to trust at all the group is held (nak with delay), never dead-lettered for the KV's fault.
   */
  private async newestVersion(group: RawRolloutGroup): Promise<number> {
    const newest = await this.versions.newest();
    const claimed = Math.max(...group.rollouts.map((r) => r.policyVersionMax));
    if (newest !== null && claimed <= newest) return newest;
    const announced = await this.versions.lastAnnounced();
    if (newest === null && announced === null) {
      throw new Error(
        `run state: no trustworthy policy version (KV policy.version is bad and no weights are announced): group ${group.task.taskId} held until there is one`,
      );
    }
    return Math.max(newest ?? -1, announced ?? -1);
  }

  /** The group belongs to this run and names an environment this actor resolved the same way. */
  private checkGroup(group: RawRolloutGroup): LoadedEnvironment {
    const { config } = this.ctx;
    const task = group.task;
    // The task a group answers is checked as inference checks it: a group that skipped inference (forged, or
    // from a producer with another config) must not be scored for a task this run would never have sent.
    checkTask(task, this.taskLimits);
    if (task.run !== config.run) throw new PoisonMessageError(`group belongs to run ${task.run}, not ${config.run}`);
    const loaded = this.envs.get(task.envKey);
    if (!loaded) throw new PoisonMessageError(`group names environment key ${task.envKey}, which this run's config does not have`);
    if (loaded.id !== task.env) throw new PoisonMessageError(`group was made with ${task.env} but this actor resolved ${loaded.id}`);
    if (group.rollouts.length !== task.groupSize) {
      throw new RolloutRejectedError("group", `task ${task.taskId} asked for ${task.groupSize} rollouts, the group has ${group.rollouts.length}`);
    }
    return loaded;
  }

  /**
   * A rollout longer than the context cannot be trained on as sampled. Our own inference makes them when a
   * multi-turn transcript outgrows the window: they are left out (the rest of the group is scored and trained
   * on), counted, and the raw group is copied to the dead-letter subject with the reason, so nothing is cut
   * silently. Any other violation rejects the whole group.
   */
  private overlongRollouts(group: RawRolloutGroup, limits: RolloutLimits): Map<number, string> {
    const overlong = new Map<number, string>();
    group.rollouts.forEach((r, i) => {
      try {
        checkRolloutLimits(r, limits, `rollout ${i} of task ${group.task.taskId}`);
      } catch (e) {
        if (!(e instanceof RolloutRejectedError && e.reason === "context")) throw e;
        overlong.set(i, e.message);
      }
    });
    return overlong;
  }

  /** The filter's verdict and the advantages of what is trained on (rl/: filter, length shaping, estimator). */
  private judge(group: RawRolloutGroup, scores: ScoreResult[], overlong: Map<number, string>, limits: RolloutLimits): ScoredGroup {
    const rl = this.ctx.config.rl;
    const kept = group.rollouts.map((_, i) => i).filter((i) => !overlong.has(i));
    const rewards = scores.map((s) => (Number.isFinite(s.reward) ? s.reward : 0));
    const verdict = judgeGroup(
      kept.map((i) => rewards[i]!),
      group.task.round ?? 0,
      rl.filter,
    );
    const lp = rl.lengthPenalty;
    const shaping = { coef: lp.coef, buffer: lp.buffer, maxTokens: lp.maxTokens ?? rl.sampling.maxTokens };
    const penalties = group.rollouts.map((r) => lengthPenalty(modelTokens(r.completionMask), shaping));
    const advantages = advantagesFor(
      verdict,
      kept.map((i) => rewards[i]! + penalties[i]!),
      advantageKindOf(rl),
    );
    advantages.forEach((a, k) => {
      checkAdvantage(a, limits, `rollout ${kept[k]!} of task ${group.task.taskId}`);
    });
    // Each row records its penalty, so replay recomputes the same advantages.
    const withPenalty = lp.coef > 0 ? scores.map((s, i) => ({ ...s, metrics: { ...s.metrics, [LENGTH_PENALTY_METRIC]: penalties[i]! } })) : scores;
    return { verdict, kept, rewards, advantages, scores: withPenalty };
  }

  private async reportOverlong(msg: JsMsg, group: RawRolloutGroup, overlong: Map<number, string>): Promise<void> {
    const { ctx } = this;
    this.overlong.inc(overlong.size);
    const first = [...overlong.values()][0]!.replace(/^context: /, "");
    await this.deadLetters.send(msg, `context: ${overlong.size} of ${group.rollouts.length} rollouts left out (${first})`, ctx.actor);
    ctx.log.warn({ task: group.task.taskId, overlong: overlong.size }, "rollouts longer than the context left out");
  }

  private countVerdict(task: RawRolloutGroup["task"], verdict: GroupVerdict): void {
    const round = task.round ?? 0;
    if (verdict === "filtered") {
      this.filtered.inc({ env: task.env });
      this.ctx.log.debug({ task: task.taskId, round, env: task.env }, "zero-variance group left out");
    } else if (verdict === "capHit") {
      this.capHits.inc({ env: task.env });
      this.ctx.log.warn(
        { task: task.taskId, round, env: task.env, maxRefillRounds: this.ctx.config.rl.filter.maxRefillRounds },
        "refill cap hit: a zero-variance group is trained on with zero advantage",
      );
    }
  }

  /** The group's figures for the training curves (display only: the orchestrator reads the outcome on rs.<run>.groups). */
  private async publishDisplay(group: RawRolloutGroup, s: ScoredGroup, rows: number, overlong: number, scoreMs: number): Promise<void> {
    const kept = s.kept.map((i) => s.rewards[i]!);
    const values: Record<string, number> = {
      rewardMean: s.rewards.reduce((a, r) => a + r, 0) / s.rewards.length,
      passRate: passRate(s.rewards),
      samples: rows,
      filtered: s.verdict === "filtered" ? 1 : 0,
      capHit: s.verdict === "capHit" ? 1 : 0,
      rewardSpread: kept.length ? Math.max(...kept) - Math.min(...kept) : 0,
      overlong,
      scoreMs,
      errors: s.scores.reduce((n, x) => n + x.errors.length, 0),
    };
    // Group means of every reward component and metric, so the training curves show them too.
    for (const [prefix, pick] of [
      ["reward_", (x: ScoreResult) => x.components],
      ["metric_", (x: ScoreResult) => x.metrics],
    ] as const) {
      const names = new Set(s.scores.flatMap((x) => Object.keys(pick(x))));
      for (const k of names) values[`${prefix}${k}`] = s.scores.reduce((n, x) => n + (pick(x)[k] ?? 0), 0) / s.scores.length;
    }
    await this.ctx.publishMetrics("group", values, group.task.step, { env: group.task.env });
  }
}

/** A group after scoring: the filter's verdict, the indices trained on (overlong ones left out), every rollout's reward and score, the kept ones' advantages. */
interface ScoredGroup {
  verdict: GroupVerdict;
  kept: number[];
  rewards: number[];
  advantages: number[];
  scores: ScoreResult[];
}

function outcomeOf(group: RawRolloutGroup, s: ScoredGroup, rows: number, overlong: number, scoreMs: number): GroupOutcome {
  const task = group.task;
  return {
    run: task.run,
    taskId: task.taskId,
    envKey: task.envKey,
    env: task.env,
    step: task.step,
    exampleIndex: task.exampleIndex,
    round: task.round ?? 0,
    outcome: s.verdict,
    rewards: s.rewards,
    passRate: passRate(s.rewards),
    rows,
    overlong,
    policyVersionMin: Math.min(...group.rollouts.map((r) => r.policyVersionMin)),
    policyVersionMax: Math.max(...group.rollouts.map((r) => r.policyVersionMax)),
    scoreMs,
  };
}
