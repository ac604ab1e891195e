// The orchestrator feeds prompt groups into rs.<run>.tasks and enforces the off-policy bound:
// tasks for RL step n go out only while n - learnerStep <= maxAsyncLevel. Task msg-ids are
// <run>:<epoch>:<index>, so a restarted orchestrator republishing a task is deduplicated by the server.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { hash32, loadRunEnvironments, pickEnvironment } from "../runtime/environments.js";
import { exportHeartbeatAges } from "../runtime/heartbeat-ages.js";
import { StateKeys, type RawRolloutChannel, type RunState, type Task, type TaskChannel } from "../../streams/index.js";

@injectable()
export class OrchestratorActor implements Actor {
  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Tasks) private readonly tasks: TaskChannel,
    @inject(Tokens.RawRollouts) private readonly rawRollouts: RawRolloutChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const rl = config.rl;
    const promptsPerStep = rl.batchSize / rl.groupSize;
    const totalTasks = rl.steps * promptsPerStep;
    const envs = [...(await loadRunEnvironments(config)).values()];
    await state.put(
      StateKeys.environments,
      envs.map((e) => ({ key: e.key, id: e.id, weight: e.weight })),
    );

    let learnerStep = await state.learnerStep();
    let wake: (() => void) | null = null;
    await state.watch(
      StateKeys.learnerStep,
      (v) => {
        learnerStep = v;
        wake?.();
      },
      ctx.signal,
      (e) => log.warn({ err: e.message }, "invalid learner.step ignored"),
    );
    ctx.signal.addEventListener("abort", () => wake?.(), { once: true });
    const gate = ctx.metrics.gauge("orchestrator_gate_waiting", "1 while dispatch waits on the maxAsyncLevel gate");
    exportHeartbeatAges(ctx);

    // Tasks only make sense once a policy exists (after SFT, or the initial weights).
    await ctx.health.wait("policy", () => this.waitFor(() => this.state.policyVersion().then((v) => v >= 0)), { detail: "first version", idle: true });
    let next = (await state.get(StateKeys.orchestratorNext)) ?? 0;
    let refills = (await state.get(StateKeys.orchestratorRefills)) ?? 0;
    let idleChecks = 0;
    log.info({ next, totalTasks, promptsPerStep, maxAsyncLevel: rl.maxAsyncLevel }, "dispatching");
    if ((await state.get(StateKeys.runStatus)) !== "done") await state.put(StateKeys.runStatus, "running");
    while (learnerStep < rl.steps && !ctx.signal.aborted) {
      if (next < totalTasks) {
        const step = Math.floor(next / promptsPerStep);
        if (step - learnerStep <= rl.maxAsyncLevel) {
          gate.set(0);
          await this.publishTask(this.makeTask(next, step, envs, `${next}`));
          next++;
          await state.put(StateKeys.orchestratorNext, next);
          await ctx.publishMetrics("dispatch", { next, step, learnerStep, inFlightSteps: step - learnerStep, refills }, step);
          continue;
        }
        gate.set(1);
      }
      // Samples dropped as stale, or dead-lettered, never reach the learner. When it says it is waiting
      // and nothing is in flight (twice in a row), top up with tasks for the learner's current step.
      const starved = await state.get(StateKeys.learnerStarved);
      if (starved && starved.step === learnerStep && starved.missing > 0 && (await this.pipelineIdle())) {
        if (++idleChecks >= 2) {
          const count = Math.ceil(starved.missing / rl.groupSize);
          log.info({ step: learnerStep, missing: starved.missing, tasks: count }, "learner starved: refilling");
          for (let i = 0; i < count; i++) {
            await this.publishTask(this.makeTask(totalTasks + refills, learnerStep, envs, `refill-${refills}`));
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
      const gateOpen = new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 1000);
      });
      await ctx.health.wait("learner", () => gateOpen, { detail: `step ${learnerStep + 1}`, idle: true });
      wake = null;
    }
    if (ctx.signal.aborted) return;
    if (!ctx.signal.aborted) await state.put(StateKeys.runStatus, "done");
  }

  private async publishTask(task: Task): Promise<void> {
    const { ctx } = this;
    const ack = await this.tasks.publish(task);
    ctx.metrics.counter("tasks_published_total", "tasks published (server-side duplicates included)").inc();
    if (ack.duplicate) ctx.log.debug({ taskId: task.taskId }, "task already published before a restart");
  }

  /** Nothing waiting or being worked on between the orchestrator and the learner. */
  private async pipelineIdle(): Promise<boolean> {
    const [t, r] = await Promise.all([this.tasks.backlog(), this.rawRollouts.backlog()]);
    return t === 0 && r === 0;
  }

  /** `label` makes the msg-id: the dataset position for regular tasks, refill-<n> for top-ups. */
  private makeTask(
    index: number,
    step: number,
    envs: Awaited<ReturnType<typeof loadRunEnvironments>> extends Map<string, infer V> ? V[] : never,
    label: string,
  ): Task {
    const { config } = this.ctx;
    const chosen = pickEnvironment(envs, config.seed, index);
    const size = chosen.env.dataset("train").size;
    const epoch = Number.isFinite(size) ? Math.floor(index / size) : 0;
    const exampleIndex = Number.isFinite(size) ? index % size : index;
    return {
      run: config.run,
      taskId: `${config.run}:${epoch}:${label}`,
      epoch,
      index,
      step,
      env: chosen.id,
      envKey: chosen.key,
      exampleIndex,
      groupSize: config.rl.groupSize,
      sampling: config.rl.sampling,
      seed: hash32(config.rl.seed, index),
    };
  }

  private async waitFor(cond: () => Promise<boolean>): Promise<void> {
    while (!this.ctx.signal.aborted && !(await cond())) await new Promise((r) => setTimeout(r, 250));
  }
}
