// The checkpoint actor owns durability: it writes every training state the learner announces to disk
// (atomically, checksummed, keep-last-K), prunes old weight versions from the object store, and
// answers restore requests by putting the newest valid state back into the object store.
import { createHash } from "node:crypto";
import { join } from "node:path";
import { inject, injectable } from "tsyringe";
import type { JsMsg } from "@nats-io/jetstream";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { getBlob, putBlob, pruneWeights } from "../runtime/weights.js";
import { runConsumerLoop } from "../runtime/consumer-loop.js";
import { decodeMsgpack, encodeMsgpack } from "../../streams/msgpack-codec.js";
import { RestoreReplySchema, RestoreRequestSchema, StateAnnouncementSchema, WeightsAnnouncementSchema } from "../../streams/messages.js";
import { PoisonMessageError } from "../../streams/dead-letter.js";
import { StateKeys } from "../../streams/subjects.js";
import { CheckpointDir } from "../runtime/checkpoint-dir.js";

@injectable()
export class CheckpointActor implements Actor {
  private dir!: CheckpointDir;

  constructor(@inject(Tokens.Context) private readonly ctx: ActorContext) {}

  async run(): Promise<void> {
    const { ctx } = this;
    const names = ctx.topology.names;
    this.dir = new CheckpointDir(join(ctx.runDir, "checkpoints"), ctx.config.run);
    const restoreSub = ctx.nc.subscribe(names.subjects.checkpointRestore, { queue: "checkpoint" });
    const weightsSub = ctx.nc.subscribe(names.subjects.weights);
    const serveRestores = (async () => {
      for await (const m of restoreSub) m.respond(encodeMsgpack(RestoreReplySchema, await this.restore(m.data)));
    })();
    const prune = (async () => {
      for await (const m of weightsSub) {
        try {
          const ann = decodeMsgpack(WeightsAnnouncementSchema, m.data, "weights announcement");
          const removed = await pruneWeights(ctx.topology.objects, ann.version, ctx.config.checkpoint.keepVersions);
          if (removed.length) ctx.log.debug({ removed }, "pruned weight versions");
        } catch (e) {
          ctx.log.warn({ err: (e as Error).message }, "weights announcement ignored");
        }
      }
    })();
    ctx.signal.addEventListener("abort", () => { restoreSub.unsubscribe(); weightsSub.unsubscribe(); }, { once: true });

    await runConsumerLoop(ctx, { stream: names.streams.events, durable: names.consumers.checkpoint, maxInFlight: 1, what: "training state" }, (m) => this.persist(m));
    await Promise.allSettled([serveRestores, prune]);
  }

  private async persist(msg: JsMsg): Promise<void> {
    const { ctx } = this;
    const ann = decodeMsgpack(StateAnnouncementSchema, msg.data, "state announcement");
    if (ann.run !== ctx.config.run) throw new PoisonMessageError(`state belongs to run ${ann.run}`);
    let state: Uint8Array;
    try {
      state = await getBlob(ctx.topology.objects, ann.object);
    } catch (e) {
      // Already persisted and cleaned up by an earlier delivery.
      if (this.dir.steps().includes(ann.step)) return;
      throw e;
    }
    const sha = createHash("sha256").update(state).digest("hex");
    if (sha !== ann.sha256) throw new PoisonMessageError(`state ${ann.object}: checksum ${sha.slice(0, 12)}… does not match the announced ${ann.sha256.slice(0, 12)}…`);
    const manifest = this.dir.write(ann.step, state);
    const removed = this.dir.prune(ctx.config.checkpoint.keepLast);
    await ctx.state.putJson(StateKeys.checkpointLatest, ann.step);
    await ctx.topology.objects.delete(ann.object).catch(() => undefined);
    ctx.log.info({ step: ann.step, bytes: manifest.bytes, removed }, "checkpoint written");
    await ctx.publishMetrics("checkpoint", { step: ann.step, bytes: manifest.bytes }, ann.step);
  }

  private async restore(data: Uint8Array) {
    const { ctx } = this;
    try {
      const req = decodeMsgpack(RestoreRequestSchema, data, "restore request");
      if (req.run !== ctx.config.run) return { step: -1, error: `this checkpoint actor serves run ${ctx.config.run}, not ${req.run}` };
      const found = this.dir.latestValid((step, err) => ctx.log.error({ step, err: err.message }, "corrupt checkpoint skipped"));
      if (!found) return { step: -1 };
      const object = `restore-${found.manifest.step}`;
      await putBlob(ctx.topology.objects, object, found.state, `restore of step ${found.manifest.step}`);
      ctx.log.info({ step: found.manifest.step }, "checkpoint served for restore");
      return { step: found.manifest.step, object };
    } catch (e) {
      return { step: -1, error: (e as Error).message };
    }
  }
}
