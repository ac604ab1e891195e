// The orchestrator feeds prompt groups into rs.<run>.tasks and enforces the off-policy bound:
// tasks for RL step n go out only while n - learnerStep <= maxAsyncLevel. Task msg-ids are
// <run>:<epoch>:<index>, so a restarted orchestrator republishing a task is deduplicated by the server.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { hash32, loadRunEnvironments, pickEnvironment } from "../runtime/environments.js";
import { encodeMsgpack } from "../../streams/msgpack-codec.js";
import { TaskSchema, type Task } from "../../streams/messages.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { StateKeys } from "../../streams/subjects.js";

@injectable()
export class OrchestratorActor implements Actor {
  constructor(@inject(Tokens.Context) private readonly ctx: ActorContext) {}

  async run(): Promise<void> {
    const { ctx } = this;
    const { config, state, log } = ctx;
    const rl = config.rl;
    const promptsPerStep = rl.batchSize / rl.groupSize;
    const totalTasks = rl.steps * promptsPerStep;
    const envs = [...(await loadRunEnvironments(config)).values()];
    await state.putJson(StateKeys.environments, envs.map((e) => ({ key: e.key, id: e.id, weight: e.weight })));

    let learnerStep = await state.learnerStep();
    let wake: (() => void) | null = null;
    await state.watchNumber(StateKeys.learnerStep, (v) => { learnerStep = v; wake?.(); }, ctx.signal);
    ctx.signal.addEventListener("abort", () => wake?.(), { once: true });
    const gate = ctx.metrics.gauge("orchestrator_gate_waiting", "1 while dispatch waits on the maxAsyncLevel gate");

    // Tasks only make sense once a policy exists (after SFT, or the initial weights).
    await this.waitFor(() => state.policyVersion().then((v) => v >= 0));
    let next = await state.getNumber(StateKeys.orchestratorNext, 0);
    let refills = await state.getNumber(StateKeys.orchestratorRefills, 0);
    let idleChecks = 0;
    log.info({ next, totalTasks, promptsPerStep, maxAsyncLevel: rl.maxAsyncLevel }, "dispatching");
    while (learnerStep < rl.steps && !ctx.signal.aborted) {
      if (next < totalTasks) {
        const step = Math.floor(next / promptsPerStep);
        if (step - learnerStep <= rl.maxAsyncLevel) {
          gate.set(0);
          await this.publishTask(this.makeTask(next, step, envs, `${next}`));
          next++;
          await state.putJson(StateKeys.orchestratorNext, next);
          await ctx.publishMetrics("dispatch", { next, step, learnerStep, inFlightSteps: step - learnerStep, refills }, step);
          continue;
        }
        gate.set(1);
      }
      // Samples dropped as stale, or dead-lettered, never reach the learner. When it says it is waiting
      // and nothing is in flight (twice in a row), top up with tasks for the learner's current step.
      const starved = await state.getJson<{ step: number; missing: number }>(StateKeys.learnerStarved);
      if (starved && starved.step === learnerStep && starved.missing > 0 && (await this.pipelineIdle())) {
        if (++idleChecks >= 2) {
          const count = Math.ceil(starved.missing / rl.groupSize);
          log.info({ step: learnerStep, missing: starved.missing, tasks: count }, "learner starved: refilling");
          for (let i = 0; i < count; i++) {
            await this.publishTask(this.makeTask(totalTasks + refills, learnerStep, envs, `refill-${refills}`));
            refills++;
            await state.putJson(StateKeys.orchestratorRefills, refills);
          }
          await state.putJson(StateKeys.learnerStarved, { step: learnerStep, missing: 0 });
          idleChecks = 0;
          await ctx.publishMetrics("refill", { step: learnerStep, tasks: count, refills }, learnerStep);
        }
      } else {
        idleChecks = 0;
      }
      await new Promise<void>((r) => { wake = r; setTimeout(r, 1000); });
      wake = null;
    }
    if (ctx.signal.aborted) return;
    if (!ctx.signal.aborted) await state.putJson(StateKeys.runStatus, "done");
  }

  private async publishTask(task: Task): Promise<void> {
    const { ctx } = this;
    const ack = await ctx.js.publish(ctx.topology.names.subjects.tasks, encodeMsgpack(TaskSchema, task), {
      msgID: task.taskId,
      headers: makeHeaders({ contentType: ContentType.msgpack, run: task.run, step: task.step, env: task.env, kind: "task" }),
    });
    ctx.metrics.counter("tasks_published_total", "tasks published (server-side duplicates included)").inc();
    if (ack.duplicate) ctx.log.debug({ taskId: task.taskId }, "task already published before a restart");
  }

  /** Nothing waiting or being worked on between the orchestrator and the learner. */
  private async pipelineIdle(): Promise<boolean> {
    const { jsm, names } = this.ctx.topology;
    const t = await jsm.consumers.info(names.streams.tasks, names.consumers.inference).catch(() => null);
    const r = await jsm.consumers.info(names.streams.rollouts, names.consumers.reward).catch(() => null);
    return t !== null && r !== null && t.num_pending + t.num_ack_pending === 0 && r.num_pending + r.num_ack_pending === 0;
  }

  /** `label` makes the msg-id: the dataset position for regular tasks, refill-<n> for top-ups. */
  private makeTask(index: number, step: number, envs: Awaited<ReturnType<typeof loadRunEnvironments>> extends Map<string, infer V> ? V[] : never, label: string): Task {
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
