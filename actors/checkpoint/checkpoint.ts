// The checkpoint actor owns durability: it writes every training state the learner announces to disk
// (atomically, checksummed, keep-last-K), prunes old weight versions from the object store, and
// answers restore requests by putting the newest valid state back into the object store.
import { join } from "node:path";
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { consumeOptions } from "../runtime/consumer-loop.js";
import { CheckpointDir } from "../runtime/checkpoint-dir.js";
import { peftCheckpointFiles } from "../../kernels/lora-peft.js";
import { versionsHeldForEvaluator } from "../../rl/eval-schedule.js";
import {
  StateKeys,
  stateObjectName,
  type HealthBoard,
  type CheckpointChannel,
  type RestoreChannel,
  type RestoreReply,
  type RestoreRequest,
  type RunState,
  type StateAnnouncement,
  type WeightsChannel,
} from "../../streams/index.js";

@injectable()
export class CheckpointActor implements Actor {
  private dir!: CheckpointDir;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Checkpoints) private readonly checkpoints: CheckpointChannel,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Restore) private readonly restores: RestoreChannel,
    @inject(Tokens.HealthBoard) private readonly board: HealthBoard,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    this.dir = new CheckpointDir(join(ctx.runDir, "checkpoints"), ctx.config.run);
    const partial = this.dir.sweepPartial();
    if (partial.length) ctx.log.warn({ removed: partial }, "removed partial checkpoint folders of writes that never finished");
    await this.dropSuperseded();
    const serveRestores = this.restores.serve((req) => this.restore(req), ctx.signal);
    const prune = this.weights.onAnnouncement(
      async (ann) => {
        // Scheduled versions the evaluator has not evaluated yet stay: it may be running behind.
        const evaluated = (await this.state.get(StateKeys.evalResults)) ?? {};
        const pending = versionsHeldForEvaluator(ctx.config, evaluated, await this.board.hasLive("evaluator"));
        const removed = await this.weights.prune(ann.version, ctx.config.checkpoint.keepVersions, pending);
        if (removed.length) ctx.log.debug({ removed }, "pruned weight versions");
      },
      ctx.signal,
      (e) => ctx.log.warn({ err: e.message }, "weights announcement ignored"),
    );
    await this.checkpoints.consume((ann, state) => this.persist(ann, state), consumeOptions(ctx, "training state", 1));
    await Promise.allSettled([serveRestores, prune]);
  }

  private async persist(ann: StateAnnouncement, state: Uint8Array | null): Promise<void> {
    const { ctx } = this;
    if (state === null) {
      // Already persisted and cleaned up by an earlier delivery, or superseded by a newer checkpoint.
      const onDisk = this.dir.steps();
      if (onDisk.includes(ann.step) || (onDisk[0] ?? -1) > ann.step) return;
      throw new Error(`state object ${ann.object} is not in the object store`);
    }
    const manifest = await ctx.health.work(`write checkpoint step ${ann.step}`, () => this.dir.write(ann.step, state, peftCheckpointFiles(state)));
    const removed = this.dir.prune(ctx.config.checkpoint.keepLast);
    await this.state.put(StateKeys.checkpointLatest, ann.step);
    await this.checkpoints.deleteObject(ann.object);
    await this.dropSuperseded();
    ctx.log.info({ step: ann.step, bytes: manifest.bytes, removed }, "checkpoint written");
    await ctx.publishMetrics("checkpoint", { step: ann.step, bytes: manifest.bytes }, ann.step);
  }

  /** State objects older than the newest checkpoint on disk (left by announcements set aside, or by a crash
   *  between a write and its delete) are of no use to anyone: they would only fill the store. */
  private async dropSuperseded(): Promise<void> {
    const newest = this.dir.steps()[0];
    if (newest === undefined) return;
    const stale = (await this.checkpoints.stateSteps().catch(() => [])).filter((s) => s < newest);
    for (const s of stale) await this.checkpoints.deleteObject(stateObjectName(s));
    if (stale.length) this.ctx.log.info({ steps: stale, newest }, "deleted state objects superseded by a newer checkpoint");
  }

  private async restore(req: RestoreRequest): Promise<RestoreReply> {
    const { ctx } = this;
    if (req.run !== ctx.config.run) return { step: -1, error: `this checkpoint actor serves run ${ctx.config.run}, not ${req.run}` };
    const found = this.dir.latestValid((step, err) => ctx.log.error({ step, err: err.message }, "corrupt checkpoint skipped"));
    if (!found) return { step: -1 };
    const object = `restore-${found.manifest.step}`;
    await this.checkpoints.putObject(object, found.state, `restore of step ${found.manifest.step}`);
    ctx.log.info({ step: found.manifest.step }, "checkpoint served for restore");
    return { step: found.manifest.step, object };
  }
}
