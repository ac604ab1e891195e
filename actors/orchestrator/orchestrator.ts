// The orchestrator feeds prompt groups into rs.<run>.tasks and enforces the off-policy bound:
// tasks for RL step n go out only while n - learnerStep <= maxAsyncLevel. Task msg-ids are
// <run>:<epoch>:<index>, so a restarted orchestrator republishing a task is deduplicated by the server.
//
// Its feedback is the reward actor's GroupOutcome of each group on rs.<run>.groups, read in order:
// - rl.filter: one replacement task per group the zero-variance filter left out (same environment, a fresh
//   prompt, round + 1, task id rl/group-filter.ts replacementTaskId), so the learner's steps fill with
//   informative samples. The read position is kept in KV (orchestrator.filterSeq), so a restart neither loses a
//   replacement nor sends one twice.
// - rl.staleness pace (rl/pace.ts): each task carries the learner's version, and no task goes out for a step past
//   the deadline of a task still in flight (until its outcome arrives).
// - rl.pool (rl/difficulty-pool.ts): each example's running pass rate, and rl.pool.quotas per environment.
// Nothing here reads a metrics event: those are for display.
import { inject, injectable } from "tsyringe";
import type { Gauge } from "prom-client";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { exportHeartbeatAges } from "../runtime/heartbeat-ages.js";
import {
  StateKeys,
  type GroupChannel,
  type GroupOutcome,
  type MsgpackReader,
  type RawRolloutChannel,
  type RunState,
  type Task,
  type TaskChannel,
} from "../../streams/index.js";
import {
  applyGroups,
  chooseExample,
  emptyCursor,
  emptyStats,
  quotaEnvironment,
  quotaProblems,
  type PoolCursor,
  type PoolStats,
  type ScoredGroup,
} from "../../rl/difficulty-pool.js";
import { replacementTaskId } from "../../rl/group-filter.js";
import { hash32, pickEnvironment } from "../../rl/mixing.js";
import { deadlineExpired, paceAllows, paceDeadline, withinAsyncLevel } from "../../rl/pace.js";

/** A group the reward actor left out, as its outcome names it. */
interface FilteredGroup {
  seq: number;
  taskId: string;
  envKey: string;
  step: number;
  round: number;
}

/** What the dispatch loop carries from one task to the next (each field also kept in KV). */
interface Dispatch {
  next: number;
  refills: number;
  stats: PoolStats;
  cursor: PoolCursor;
  idleChecks: number;
  learnerStep: number;
}

type OutcomeReader = MsgpackReader<GroupChannel["spec"]["schema"]>;

@injectable()
export class OrchestratorActor implements Actor {
  private envs: LoadedEnvironment[] = [];
  /** Groups left out by the reward actor, read and not yet replaced (in stream order). */
  private readonly filteredQueue: FilteredGroup[] = [];
  /** Left-out groups per step and environment key, this process's life (for the metrics events). */
  private readonly filteredByStep = new Map<string, number>();
  /** Groups replaced in this process's life: an outcome seen twice (a redelivered group) is replaced once. */
  private readonly replaced = new Set<string>();
  /** rl.pool: scored groups read and not yet applied to the stats. */
  private readonly scoredQueue: ScoredGroup[] = [];
  /** rl.staleness pace: tasks of this life not yet scored, with the last learner version their samples may be trained at. */
  private readonly deadlines = new Map<string, number>();
  /** First outcome seq each reader of the groups still needs (filter: orchestrator.filterSeq; pool: pool.stats.seq). */
  private filterFrom = Number.POSITIVE_INFINITY;
  private poolFrom = Number.POSITIVE_INFINITY;
  private reading = false;
  private wake: (() => void) | null = null;
  private gate!: Gauge;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Tasks) private readonly tasks: TaskChannel,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
    @inject(Tokens.Groups) private readonly groups: GroupChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx, state } = this;
    const d = await this.prepare();
    const outcomes = this.openOutcomes();
    this.reading = outcomes !== null;
    const reading = outcomes ? this.readOutcomes(outcomes) : Promise.resolve();
    if ((await state.get(StateKeys.runStatus)) !== "done") await state.put(StateKeys.runStatus, "running");
    try {
      while (d.learnerStep < ctx.config.rl.steps && !ctx.signal.aborted) {
        if (await this.dispatchOne(d)) continue;
        await this.topUpIfStarved(d);
        await this.sleep(d.learnerStep);
      }
    } finally {
      this.reading = false;
      await reading;
      await outcomes?.close();
    }
    if (ctx.signal.aborted) return;
    await state.put(StateKeys.runStatus, "done");
  }

  /** Loads the environments, follows learner.step, waits for the first policy and reads the dispatch state from KV. */
  private async prepare(): Promise<Dispatch> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const rl = config.rl;
    this.envs = [...(await loadRunEnvironments(config)).values()];
    await state.put(
      StateKeys.environments,
      this.envs.map((e) => ({ key: e.key, id: e.id, weight: e.weight })),
    );
    if (rl.pool?.quotas) {
      const problems = quotaProblems(this.envs, rl.pool.quotas);
      if (problems.length) throw new Error(problems.join("; "));
    }
    const d: Dispatch = { next: 0, refills: 0, stats: emptyStats(), cursor: emptyCursor(), idleChecks: 0, learnerStep: await state.learnerStep() };
    await state.watch(
      StateKeys.learnerStep,
      (v) => {
        d.learnerStep = v;
        this.wake?.();
      },
      ctx.signal,
      (e) => log.warn({ err: e.message }, "invalid learner.step ignored"),
    );
    ctx.signal.addEventListener("abort", () => this.wake?.(), { once: true });
    this.gate = ctx.metrics.gauge("orchestrator_gate_waiting", "1 while dispatch waits on the maxAsyncLevel gate");
    exportHeartbeatAges(ctx);
    // Tasks only make sense once a policy exists (after SFT, or the initial weights).
    await ctx.health.wait("policy", () => this.waitFor(() => this.state.policyVersion().then((v) => v >= 0)), { detail: "first version", idle: true });
    d.next = (await state.get(StateKeys.orchestratorNext)) ?? 0;
    d.refills = (await state.get(StateKeys.orchestratorRefills)) ?? 0;
    if (rl.pool) {
      d.stats = (await state.get(StateKeys.poolStats)) ?? emptyStats();
      d.cursor = (await state.get(StateKeys.poolCursor)) ?? emptyCursor();
      // The cursor is stored right after a task is published: it may be one ahead of orchestrator.next.
      if (d.cursor.next > d.next) d.next = d.cursor.next;
      this.poolFrom = d.stats.seq;
    }
    if (rl.filter.zeroVariance) this.filterFrom = (await state.get(StateKeys.orchestratorFilterSeq)) ?? 1;
    log.info(
      {
        next: d.next,
        totalTasks: this.totalTasks,
        maxAsyncLevel: rl.maxAsyncLevel,
        staleness: rl.staleness,
        filter: rl.filter.zeroVariance ? rl.filter : "off",
        pool: rl.pool ?? "off",
      },
      "dispatching",
    );
    return d;
  }

  private get promptsPerStep(): number {
    return this.ctx.config.rl.batchSize / this.ctx.config.rl.groupSize;
  }

  private get totalTasks(): number {
    return this.ctx.config.rl.steps * this.promptsPerStep;
  }

  /** A reader of rs.<run>.groups from the first outcome any of filter, pool and pace still needs; null when none does. */
  private openOutcomes(): OutcomeReader | null {
    const pace = this.ctx.config.rl.staleness === "pace";
    const from = Math.min(this.filterFrom, this.poolFrom, pace ? 1 : Number.POSITIVE_INFINITY);
    return Number.isFinite(from) ? this.groups.reader(from, { deadLetterAs: this.ctx.actor }) : null;
  }

  /** Publishes one task if one may go out now (a replacement first, then the next regular task); false if none may. */
  private async dispatchOne(d: Dispatch): Promise<boolean> {
    const rl = this.ctx.config.rl;
    // Replacements first: they feed steps already dispatched, which the learner waits on sooner.
    const filtered = this.filteredQueue.shift();
    if (filtered) {
      d.refills = await this.replace(filtered, d.learnerStep, d.refills);
      return true;
    }
    if (d.next < this.totalTasks) {
      const step = Math.floor(d.next / this.promptsPerStep);
      const pace = rl.staleness === "pace";
      if (withinAsyncLevel(step, d.learnerStep, rl.maxAsyncLevel) && (!pace || this.paceAllows(step, d.learnerStep))) {
        this.gate.set(0);
        await this.dispatchRegular(d, step);
        if (rl.pool && this.scoredQueue.length > 0) d.stats = await this.applyScored(d.stats, rl.pool.decay);
        return true;
      }
      this.gate.set(1);
    }
    if (rl.pool && this.scoredQueue.length > 0) d.stats = await this.applyScored(d.stats, rl.pool.decay);
    return false;
  }

  /** Regular task d.next, for `step`: its environment by weight or quota, its example by dataset order or the pool. */
  private async dispatchRegular(d: Dispatch, step: number): Promise<void> {
    const { ctx, state } = this;
    const { config } = ctx;
    const pool = config.rl.pool;
    const env = pool?.quotas ? quotaEnvironment(this.envs, pool.quotas, d.next) : pickEnvironment(this.envs, config.seed, d.next);
    let position = d.next;
    const extra: Record<string, number> = {};
    if (pool) {
      // Chosen from the stats and cursor as stored, so a restart here chooses the same example.
      const choice = chooseExample(d.stats.envs[env.key], d.cursor.envs[env.key] ?? 0, env.env.dataset("train").size, config.seed, d.next, pool);
      position = choice.position;
      if (choice.scanned > 1)
        ctx.metrics
          .counter("pool_passed_over_total", "examples the difficulty-pool sampler met outside rl.pool.band and passed over, by environment", ["env"])
          .inc({ env: env.id }, choice.scanned - 1);
      if (choice.forced) ctx.log.warn({ env: env.key, scanned: choice.scanned }, "every example met lies outside rl.pool.band: took the last one");
      Object.assign(extra, { poolPassedOver: choice.scanned - 1, poolForced: choice.forced ? 1 : 0 });
    }
    await this.publishTask(this.makeTask(d.next, step, env, { label: `${d.next}` }, 0, d.learnerStep, position));
    d.next++;
    if (pool) {
      d.cursor = { next: d.next, envs: { ...d.cursor.envs, [env.key]: position + 1 } };
      await state.put(StateKeys.poolCursor, d.cursor);
    }
    await state.put(StateKeys.orchestratorNext, d.next);
    const values = { next: d.next, step, learnerStep: d.learnerStep, inFlightSteps: step - d.learnerStep, refills: d.refills, ...extra };
    await ctx.publishMetrics("dispatch", values, step, { env: env.id, envKey: env.key });
  }

  /**
   * Samples dropped as stale, or dead-lettered, never reach the learner. When it says it is waiting and nothing
   * is in flight (twice in a row), top up with tasks for the learner's current step.
   */
  private async topUpIfStarved(d: Dispatch): Promise<void> {
    const { ctx, state } = this;
    const starved = await state.get(StateKeys.learnerStarved);
    if (!(starved && starved.step === d.learnerStep && starved.missing > 0 && (await this.pipelineIdle()))) {
      d.idleChecks = 0;
      return;
    }
    if (++d.idleChecks < 2) return;
    const count = Math.ceil(starved.missing / ctx.config.rl.groupSize);
    ctx.log.info({ step: d.learnerStep, missing: starved.missing, tasks: count }, "learner starved: refilling");
    for (let i = 0; i < count; i++) {
      const index = this.totalTasks + d.refills;
      const env = pickEnvironment(this.envs, ctx.config.seed, index);
      await this.publishTask(this.makeTask(index, d.learnerStep, env, { label: `refill-${d.refills}` }, 0, d.learnerStep));
      d.refills++;
      await state.put(StateKeys.orchestratorRefills, d.refills);
    }
    await state.put(StateKeys.learnerStarved, { step: d.learnerStep, missing: 0 });
    d.idleChecks = 0;
    await ctx.publishMetrics("refill", { step: d.learnerStep, tasks: count, refills: d.refills }, d.learnerStep);
  }

  private async sleep(learnerStep: number): Promise<void> {
    const woken = new Promise<void>((r) => {
      this.wake = r;
      setTimeout(r, 1000);
    });
    await this.ctx.health.wait("learner", () => woken, { detail: `step ${learnerStep + 1}`, idle: true });
    this.wake = null;
  }

  /**
   * Reads the group outcomes and queues what the dispatch loop (which alone publishes tasks and writes the
   * orchestrator's KV keys) acts on: left-out groups to replace (rl.filter), scored groups for the pool's stats
   * (rl.pool), and tasks no longer in flight (rl.staleness pace). An outcome that does not decode is
   * dead-lettered with the reason and passed over. Ends when the actor stops.
   */
  private async readOutcomes(outcomes: OutcomeReader): Promise<void> {
    const { ctx } = this;
    while (this.reading && !ctx.signal.aborted) {
      const m = await outcomes.next(1000, ctx.signal);
      if (!m) continue;
      if ("error" in m) {
        ctx.log.warn({ seq: m.seq, err: m.error }, "an invalid group outcome dead-lettered and passed over");
        continue;
      }
      this.take(m.seq, m.value);
    }
  }

  private take(seq: number, g: GroupOutcome): void {
    if (this.deadlines.delete(g.taskId)) this.wake?.();
    if (seq >= this.filterFrom && g.outcome === "filtered") {
      this.filteredQueue.push({ seq, taskId: g.taskId, envKey: g.envKey, step: g.step, round: g.round });
      this.wake?.();
    }
    if (seq >= this.poolFrom) {
      this.scoredQueue.push({ seq, envKey: g.envKey, exampleIndex: g.exampleIndex, passRate: g.passRate });
      this.wake?.();
    }
  }

  /** Applies the scored groups read so far to the pool's stats and stores them. */
  private async applyScored(stats: PoolStats, decay: number): Promise<PoolStats> {
    const groups = this.scoredQueue.splice(0);
    const next = applyGroups(stats, groups, decay);
    await this.state.put(StateKeys.poolStats, next);
    return next;
  }

  /** rl.staleness pace (rl/pace.ts) over the deadlines of this life's tasks still in flight. */
  private paceAllows(step: number, learnerStep: number): boolean {
    for (const [taskId, deadline] of this.deadlines) if (deadlineExpired(deadline, learnerStep)) this.deadlines.delete(taskId);
    return paceAllows(step, learnerStep, this.ctx.config.rl.maxOffPolicySteps, this.deadlines.values());
  }

  /** One replacement for a left-out group; returns the refill count after it. */
  private async replace(group: FilteredGroup, learnerStep: number, refills: number): Promise<number> {
    const { ctx, state } = this;
    const loaded = this.envs.find((e) => e.key === group.envKey);
    if (!loaded || this.replaced.has(group.taskId)) {
      if (!loaded) ctx.log.warn({ task: group.taskId, envKey: group.envKey }, "a left-out group names an environment this run does not have: not replaced");
      await state.put(StateKeys.orchestratorFilterSeq, group.seq + 1);
      return refills;
    }
    const round = group.round + 1;
    const step = Math.max(group.step, learnerStep);
    const index = this.totalTasks + refills;
    const ack = await this.publishTask(this.makeTask(index, step, loaded, { taskId: replacementTaskId(group.taskId, round) }, round, learnerStep));
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
    if (task.minPolicyVersion !== undefined) this.deadlines.set(task.taskId, paceDeadline(task.minPolicyVersion, ctx.config.rl.maxOffPolicySteps));
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
