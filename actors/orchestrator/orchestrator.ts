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
    const published = ctx.metrics.counter("tasks_published_total", "tasks published (server-side duplicates included)");

    // Tasks only make sense once a policy exists (after SFT, or the initial weights).
    await this.waitFor(() => state.policyVersion().then((v) => v >= 0));
    let next = await state.getNumber(StateKeys.orchestratorNext, 0);
    log.info({ next, totalTasks, promptsPerStep, maxAsyncLevel: rl.maxAsyncLevel }, "dispatching");
    while (next < totalTasks && !ctx.signal.aborted) {
      const step = Math.floor(next / promptsPerStep);
      if (step - learnerStep > rl.maxAsyncLevel) {
        gate.set(1);
        await new Promise<void>((r) => { wake = r; setTimeout(r, 2000); });
        wake = null;
        continue;
      }
      gate.set(0);
      const task = this.makeTask(next, step, envs);
      const ack = await ctx.js.publish(ctx.topology.names.subjects.tasks, encodeMsgpack(TaskSchema, task), {
        msgID: task.taskId,
        headers: makeHeaders({ contentType: ContentType.msgpack, run: config.run, step, env: task.env, kind: "task" }),
      });
      published.inc();
      if (ack.duplicate) log.debug({ taskId: task.taskId }, "task already published before a restart");
      next++;
      await state.putJson(StateKeys.orchestratorNext, next);
      await ctx.publishMetrics("dispatch", { next, step, learnerStep, inFlightSteps: step - learnerStep }, step);
    }
    if (ctx.signal.aborted) return;
    log.info("all tasks published; waiting for the learner to finish");
    await this.waitFor(async () => learnerStep >= rl.steps);
    if (!ctx.signal.aborted) await state.putJson(StateKeys.runStatus, "done");
  }

  private makeTask(index: number, step: number, envs: Awaited<ReturnType<typeof loadRunEnvironments>> extends Map<string, infer V> ? V[] : never): Task {
    const { config } = this.ctx;
    const chosen = pickEnvironment(envs, config.seed, index);
    const size = chosen.env.dataset("train").size;
    const epoch = Number.isFinite(size) ? Math.floor(index / size) : 0;
    const exampleIndex = Number.isFinite(size) ? index % size : index;
    return {
      run: config.run,
      taskId: `${config.run}:${epoch}:${index}`,
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
