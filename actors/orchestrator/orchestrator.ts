// The orchestrator feeds prompt groups into rs.<run>.tasks and enforces the off-policy bound:
// tasks for RL step n go out only while n - learnerStep <= maxAsyncLevel. Task msg-ids are
// <run>:<epoch>:<index>, so a restarted orchestrator republishing a task is deduplicated by the server.
//
// With rl.filter.zeroVariance the reward actor leaves out groups that carry no signal and says so in its
// group metrics event (filtered 1). The orchestrator reads those events in order and dispatches one
// replacement task per left-out group (same environment, a fresh prompt, round + 1, task id
// <replaced id>~r<round>), so the learner's steps fill with informative samples; the reward actor ends a chain
// at rl.filter.maxRefillRounds. The msg-id derives from the group replaced and the read position is kept in
// KV (orchestrator.filterSeq), so a restart neither loses a replacement nor sends one twice.
//
// With rl.staleness pace the gate also keeps samples inside the staleness bound: tasks for step n go out only
// while n - learnerStep <= maxOffPolicySteps as well, each carries the learner's version (inference does not
// start it on older weights), and no task goes out for a step past the deadline of a task still in flight
// (its dispatch version + maxOffPolicySteps, until its reward group event arrives): the learner then runs out
// of other samples and waits for the straggler instead of training past it and dropping it.
//
// With rl.pool the regular tasks' examples come from the difficulty-pool sampler (difficulty-pool.ts), fed
// by the same reward group events, and rl.pool.quotas fixes each environment's share of every step.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { hash32, loadRunEnvironments, pickEnvironment, type LoadedEnvironment } from "../runtime/environments.js";
import { exportHeartbeatAges } from "../runtime/heartbeat-ages.js";
import {
  StateKeys,
  type MetricsChannel,
  type MetricsEvent,
  type PoolCursor,
  type PoolStats,
  type RawRolloutChannel,
  type RunState,
  type Task,
  type TaskChannel,
} from "../../streams/index.js";
import { applyGroups, chooseExample, emptyCursor, emptyStats, quotaEnvironment, quotaProblems, type ScoredGroupEvent } from "./difficulty-pool.js";

/** A group the reward actor left out, as its metrics event names it. */
interface FilteredGroup {
  seq: number;
  taskId: string;
  envKey: string;
  step: number;
  round: number;
}

@injectable()
export class OrchestratorActor implements Actor {
  private envs: LoadedEnvironment[] = [];
  /** Groups left out by the reward actor, read and not yet replaced (in stream order). */
  private readonly filteredQueue: FilteredGroup[] = [];
  /** Left-out groups per step and environment key, this process's life (for the metrics events). */
  private readonly filteredByStep = new Map<string, number>();
  /** Groups replaced in this process's life: a reward event seen twice (a redelivered group) is replaced once. */
  private readonly replaced = new Set<string>();
  /** rl.pool: scored groups read and not yet applied to the stats. */
  private readonly scoredQueue: ScoredGroupEvent[] = [];
  /** rl.staleness pace: tasks of this life not yet scored, with the last learner version their samples may be trained at. */
  private readonly deadlines = new Map<string, number>();
  /** First reward event seq each reader of the events still needs (filter: orchestrator.filterSeq; pool: pool.stats.seq). */
  private filterFrom = Number.POSITIVE_INFINITY;
  private poolFrom = Number.POSITIVE_INFINITY;
  private reading = false;
  private wake: (() => void) | null = null;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Tasks) private readonly tasks: TaskChannel,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.RewardEvents) private readonly rewardEvents: MetricsChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const rl = config.rl;
    const promptsPerStep = rl.batchSize / rl.groupSize;
    const totalTasks = rl.steps * promptsPerStep;
    this.envs = [...(await loadRunEnvironments(config)).values()];
    await state.put(
      StateKeys.environments,
      this.envs.map((e) => ({ key: e.key, id: e.id, weight: e.weight })),
    );

    let learnerStep = await state.learnerStep();
    await state.watch(
      StateKeys.learnerStep,
      (v) => {
        learnerStep = v;
        this.wake?.();
      },
      ctx.signal,
      (e) => log.warn({ err: e.message }, "invalid learner.step ignored"),
    );
    ctx.signal.addEventListener("abort", () => this.wake?.(), { once: true });
    const gate = ctx.metrics.gauge("orchestrator_gate_waiting", "1 while dispatch waits on the maxAsyncLevel gate");
    exportHeartbeatAges(ctx);

    // Tasks only make sense once a policy exists (after SFT, or the initial weights).
    await ctx.health.wait("policy", () => this.waitFor(() => this.state.policyVersion().then((v) => v >= 0)), { detail: "first version", idle: true });
    let next = (await state.get(StateKeys.orchestratorNext)) ?? 0;
    let refills = (await state.get(StateKeys.orchestratorRefills)) ?? 0;
    let idleChecks = 0;
    const filtering = rl.filter.zeroVariance;
    const pace = rl.staleness === "pace";
    const pool = rl.pool;
    if (pool?.quotas) {
      const problems = quotaProblems(this.envs, pool.quotas);
      if (problems.length) throw new Error(problems.join("; "));
    }
    let stats: PoolStats = pool ? ((await state.get(StateKeys.poolStats)) ?? emptyStats()) : emptyStats();
    let cursor: PoolCursor = pool ? ((await state.get(StateKeys.poolCursor)) ?? emptyCursor()) : emptyCursor();
    // The cursor is stored right after a task is published: it may be one ahead of orchestrator.next.
    if (pool && cursor.next > next) next = cursor.next;
    if (filtering) this.filterFrom = (await state.get(StateKeys.orchestratorFilterSeq)) ?? 1;
    if (pool) this.poolFrom = stats.seq;
    const events = filtering || pool || pace ? this.rewardEvents.reader(Math.min(this.filterFrom, this.poolFrom, pace ? 1 : Number.POSITIVE_INFINITY)) : null;
    this.reading = events !== null;
    const reading = events ? this.readRewardEvents(events) : Promise.resolve();
    const poolPassedOver = ctx.metrics.counter(
      "pool_passed_over_total",
      "examples the difficulty-pool sampler met outside rl.pool.band and passed over, by environment",
      ["env"],
    );
    log.info(
      {
        next,
        totalTasks,
        promptsPerStep,
        maxAsyncLevel: rl.maxAsyncLevel,
        staleness: rl.staleness,
        filter: filtering ? rl.filter : "off",
        pool: pool ?? "off",
      },
      "dispatching",
    );
    if ((await state.get(StateKeys.runStatus)) !== "done") await state.put(StateKeys.runStatus, "running");
    try {
      while (learnerStep < rl.steps && !ctx.signal.aborted) {
        // Replacements first: they feed steps already dispatched, which the learner waits on sooner.
        const filtered = this.filteredQueue.shift();
        if (filtered) {
          refills = await this.replace(filtered, learnerStep, totalTasks, refills);
          continue;
        }
        if (next < totalTasks) {
          const step = Math.floor(next / promptsPerStep);
          if (step - learnerStep <= rl.maxAsyncLevel && (!pace || this.paceAllows(step, learnerStep))) {
            gate.set(0);
            const env = pool?.quotas ? quotaEnvironment(this.envs, pool.quotas, next) : pickEnvironment(this.envs, config.seed, next);
            let position = next;
            const extra: Record<string, number> = {};
            if (pool) {
              // Chosen from the stats and cursor as stored, so a restart here chooses the same example.
              const choice = chooseExample(stats.envs[env.key], cursor.envs[env.key] ?? 0, env.env.dataset("train").size, config.seed, next, pool);
              position = choice.position;
              if (choice.scanned > 1) poolPassedOver.inc({ env: env.id }, choice.scanned - 1);
              if (choice.forced) log.warn({ env: env.key, scanned: choice.scanned }, "every example met lies outside rl.pool.band: took the last one");
              Object.assign(extra, { poolPassedOver: choice.scanned - 1, poolForced: choice.forced ? 1 : 0 });
            }
            await this.publishTask(this.makeTask(next, step, env, { label: `${next}` }, 0, learnerStep, position));
            next++;
            if (pool) {
              cursor = { next, envs: { ...cursor.envs, [env.key]: position + 1 } };
              await state.put(StateKeys.poolCursor, cursor);
            }
            await state.put(StateKeys.orchestratorNext, next);
            await ctx.publishMetrics("dispatch", { next, step, learnerStep, inFlightSteps: step - learnerStep, refills, ...extra }, step, {
              env: env.id,
              envKey: env.key,
            });
            if (pool && this.scoredQueue.length > 0) stats = await this.applyScored(stats, pool.decay);
            continue;
          }
          gate.set(1);
        }
        if (pool && this.scoredQueue.length > 0) stats = await this.applyScored(stats, pool.decay);
        // Samples dropped as stale, or dead-lettered, never reach the learner. When it says it is waiting
        // and nothing is in flight (twice in a row), top up with tasks for the learner's current step.
        const starved = await state.get(StateKeys.learnerStarved);
        if (starved && starved.step === learnerStep && starved.missing > 0 && (await this.pipelineIdle())) {
          if (++idleChecks >= 2) {
            const count = Math.ceil(starved.missing / rl.groupSize);
            log.info({ step: learnerStep, missing: starved.missing, tasks: count }, "learner starved: refilling");
            for (let i = 0; i < count; i++) {
              const index = totalTasks + refills;
              await this.publishTask(
                this.makeTask(index, learnerStep, pickEnvironment(this.envs, config.seed, index), { label: `refill-${refills}` }, 0, learnerStep),
              );
              refills++;
              await state.put(StateKeys.orchestratorRefills, refills);
            }
            await state.put(StateKeys.learnerStarved, { step: learnerStep, missing: 0 });
            idleChecks = 0;
            await ctx.publishMetrics("refill", { step: learnerStep, tasks: count, refills }, learnerStep);
          }
        } else {
          idleChecks = 0;
        }
        const woken = new Promise<void>((r) => {
          this.wake = r;
          setTimeout(r, 1000);
        });
        await ctx.health.wait("learner", () => woken, { detail: `step ${learnerStep + 1}`, idle: true });
        this.wake = null;
      }
    } finally {
      this.reading = false;
      await reading;
      await events?.close();
    }
    if (ctx.signal.aborted) return;
    await state.put(StateKeys.runStatus, "done");
  }

  /**
   * Reads the reward actor's group events and queues what the dispatch loop (which alone publishes tasks and
   * writes the orchestrator's KV keys) acts on: left-out groups to replace (rl.filter), scored groups for the
   * pool's stats (rl.pool), and tasks no longer in flight (rl.staleness pace). Ends when the actor stops.
   */
  private async readRewardEvents(events: ReturnType<MetricsChannel["reader"]>): Promise<void> {
    const { ctx } = this;
    while (this.reading && !ctx.signal.aborted) {
      const m = await events.next(1000, ctx.signal);
      if (!m) continue;
      if ("error" in m) {
        ctx.log.warn({ seq: m.seq, err: m.error }, "an unreadable reward event passed over");
        continue;
      }
      if (m.value.kind !== "group") continue;
      const taskId = m.value.labels?.["task"];
      if (taskId && this.deadlines.delete(taskId)) this.wake?.();
      const group = m.seq >= this.filterFrom ? filteredGroupOf(m.seq, m.value) : null;
      if (group) {
        this.filteredQueue.push(group);
        this.wake?.();
      }
      const scored = m.seq >= this.poolFrom ? scoredGroupOf(m.seq, m.value) : null;
      if (scored) {
        this.scoredQueue.push(scored);
        this.wake?.();
      }
    }
  }

  /** Applies the scored groups read so far to the pool's stats and stores them. */
  private async applyScored(stats: PoolStats, decay: number): Promise<PoolStats> {
    const groups = this.scoredQueue.splice(0);
    const next = applyGroups(stats, groups, decay);
    await this.state.put(StateKeys.poolStats, next);
    return next;
  }

  /**
   * rl.staleness pace: a task for `step` would be trained at version `step` at the earliest, on weights of
   * version learnerStep at the oldest (inference waits for them). It may go out when that is inside the bound
   * and when it does not let the learner run past a task still in flight: the learner can reach version
   * `step` on the tasks for steps before it, so a straggler whose samples must be trained by version d holds
   * every step after d back until it arrives (or until the learner is past d anyway: its samples are then
   * lost to the bound and counted by the learner).
   */
  private paceAllows(step: number, learnerStep: number): boolean {
    const bound = this.ctx.config.rl.maxOffPolicySteps;
    if (step - learnerStep > bound) return false;
    for (const [taskId, deadline] of this.deadlines) {
      if (deadline < learnerStep) this.deadlines.delete(taskId);
      else if (step > deadline) return false;
    }
    return true;
  }

  /** One replacement for a left-out group; returns the refill count after it. */
  private async replace(group: FilteredGroup, learnerStep: number, totalTasks: number, refills: number): Promise<number> {
    const { ctx, state } = this;
    const loaded = this.envs.find((e) => e.key === group.envKey);
    if (!loaded || this.replaced.has(group.taskId)) {
      if (!loaded) ctx.log.warn({ task: group.taskId, envKey: group.envKey }, "a left-out group names an environment this run does not have: not replaced");
      await state.put(StateKeys.orchestratorFilterSeq, group.seq + 1);
      return refills;
    }
    // Its msg-id is the replaced group's with the round appended (never the new prompt's position, which
    // moves with the refill count): a replacement sent again after a restart is stored once.
    const round = group.round + 1;
    const step = Math.max(group.step, learnerStep);
    const index = totalTasks + refills;
    const ack = await this.publishTask(this.makeTask(index, step, loaded, { taskId: `${group.taskId.replace(/~r\d+$/, "")}~r${round}` }, round, learnerStep));
    if (!ack.duplicate) refills++;
    this.replaced.add(group.taskId);
    await state.put(StateKeys.orchestratorRefills, refills);
    await state.put(StateKeys.orchestratorFilterSeq, group.seq + 1);
    const key = `${group.step}|${group.envKey}`;
    const inStep = (this.filteredByStep.get(key) ?? 0) + 1;
    this.filteredByStep.set(key, inStep);
    ctx.metrics
      .counter("groups_replaced_total", "replacement tasks for groups the zero-variance filter left out, by environment", ["env"])
      .inc({ env: loaded.id });
    await ctx.publishMetrics("replace", { step: group.step, filteredInStep: inStep, round, refills }, group.step, { env: loaded.id, envKey: loaded.key });
    return refills;
  }

  private async publishTask(task: Task): Promise<{ duplicate: boolean }> {
    const { ctx } = this;
    const ack = await this.tasks.publish(task);
    if (task.minPolicyVersion !== undefined) this.deadlines.set(task.taskId, task.minPolicyVersion + ctx.config.rl.maxOffPolicySteps);
    ctx.metrics.counter("tasks_published_total", "tasks published (server-side duplicates included)").inc();
    if (ack.duplicate) ctx.log.debug({ taskId: task.taskId }, "task already published before a restart");
    return ack;
  }

  /** Nothing waiting or being worked on between the orchestrator and the learner. */
  private async pipelineIdle(): Promise<boolean> {
    if (this.filteredQueue.length > 0) return false;
    const [t, r] = await Promise.all([this.tasks.backlog(), this.rawRollouts.backlog()]);
    return t === 0 && r === 0;
  }

  /**
   * The task id is the msg-id: `<run>:<epoch>:<label>` with the task's index as the label for regular
   * tasks and refill-<n> for top-ups; a replacement's is given whole. `position` is the place in the
   * environment's dataset order (the index itself unless the pool sampler chose it); `learnerStep`, under
   * rl.staleness pace, the policy version inference must have before it starts the task.
   */
  private makeTask(
    index: number,
    step: number,
    chosen: LoadedEnvironment,
    id: { label: string } | { taskId: string },
    round: number,
    learnerStep: number,
    position = index,
  ): Task {
    const { config } = this.ctx;
    const size = chosen.env.dataset("train").size;
    const epoch = Number.isFinite(size) ? Math.floor(position / size) : 0;
    const exampleIndex = Number.isFinite(size) ? position % size : position;
    return {
      run: config.run,
      taskId: "taskId" in id ? id.taskId : `${config.run}:${epoch}:${id.label}`,
      epoch,
      index,
      step,
      env: chosen.id,
      envKey: chosen.key,
      exampleIndex,
      groupSize: config.rl.groupSize,
      sampling: config.rl.sampling,
      seed: hash32(config.rl.seed, index),
      ...(round > 0 ? { round } : {}),
      ...(config.rl.staleness === "pace" ? { minPolicyVersion: learnerStep } : {}),
    };
  }

  private async waitFor(cond: () => Promise<boolean>): Promise<void> {
    while (!this.ctx.signal.aborted && !(await cond())) await new Promise((r) => setTimeout(r, 250));
  }
}

/** The left-out group a reward group event names, or null for any other event. */
function filteredGroupOf(seq: number, e: MetricsEvent): FilteredGroup | null {
  if (e.kind !== "group" || e.values["filtered"] !== 1) return null;
  const taskId = e.labels?.["task"];
  const envKey = e.labels?.["envKey"];
  if (!taskId || !envKey) return null;
  return { seq, taskId, envKey, step: e.step ?? e.values["step"] ?? 0, round: e.values["round"] ?? 0 };
}

/** The scored group a reward group event reports (for the pool's stats), or null for any other event. */
function scoredGroupOf(seq: number, e: MetricsEvent): ScoredGroupEvent | null {
  if (e.kind !== "group") return null;
  const envKey = e.labels?.["envKey"];
  const exampleIndex = e.values["exampleIndex"];
  const passRate = e.values["passRate"];
  if (!envKey || exampleIndex === undefined || passRate === undefined) return null;
  return { seq, envKey, exampleIndex, passRate };
}
