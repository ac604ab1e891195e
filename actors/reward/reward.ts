// Reward consumes raw rollout groups, scores them with the environment's rubric (which may call the
// sandbox), computes group advantages and publishes the scored rows on rollouts.scored (batch id = task
// id); the raw message is acked only after that publish is stored. What the rubric scores is exactly the
// RolloutResult the environment returned in inference (state, tool names and all), so a rollout scores
// the same here as in `rollstream eval`.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import { PoisonMessageError, toScoredRow, type RawRolloutChannel, type RawRolloutGroup, type ScoredChannel } from "../../streams/index.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import { groupAdvantages } from "./advantages.js";

@injectable()
export class RewardActor implements Actor {
  private envs!: Map<string, LoadedEnvironment>;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Scored) private readonly scored: ScoredChannel,
    @inject(Tokens.Sandbox) private readonly sandbox: CodeSandbox,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.envs = await loadRunEnvironments(ctx.config);
    await this.rawRollouts.consume((g) => this.handleGroup(g), consumeOptions(ctx, "rollout group", ctx.config.actors.reward.maxInFlight));
  }

  private async handleGroup(group: RawRolloutGroup): Promise<void> {
    const { ctx } = this;
    const task = group.task;
    if (task.run !== ctx.config.run) throw new PoisonMessageError(`group belongs to run ${task.run}, not ${ctx.config.run}`);
    const loaded = this.envs.get(task.envKey);
    if (!loaded) throw new PoisonMessageError(`group names environment key ${task.envKey}, which this run's config does not have`);
    if (loaded.id !== task.env) throw new PoisonMessageError(`group was made with ${task.env} but this actor resolved ${loaded.id}`);
    const row = loaded.env.dataset("train").row(task.exampleIndex);
    const t0 = Date.now();
    const scores = await loaded.env.scoreGroup(group.rollouts, row, { sandbox: this.sandbox });
    const scoreMs = Date.now() - t0;
    if (scores.length !== group.rollouts.length)
      throw new Error(`rubric of ${task.env} returned ${scores.length} scores for ${group.rollouts.length} rollouts`);
    const rewards = scores.map((s) => (Number.isFinite(s.reward) ? s.reward : 0));
    const adv = groupAdvantages(rewards, ctx.config.rl.normalizeAdvantage);
    const rows = group.rollouts.map((r, i) => toScoredRow(r, { task, exampleId: row.id, score: scores[i]!, reward: rewards[i]!, advantage: adv[i]!, scoreMs }));
    await this.scored.publish(rows, { batchId: task.taskId, step: task.step, env: task.env, producer: ctx.instance });

    const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
    const values: Record<string, number> = {
      step: task.step,
      rewardMean: mean,
      passRate: rewards.filter((r) => r >= 1 - 1e-6).length / rewards.length,
      samples: rows.length,
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
    await ctx.publishMetrics("group", values, task.step, { env: task.env });
  }
}
