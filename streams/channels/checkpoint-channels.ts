// Full training states on their way to disk, and the restore request/reply that brings one back.
// The learner puts a state object (state-<step>) and announces it on rs.<run>.checkpoints; the checkpoint
// actor consumes the announcement durably, writes the state to disk, then deletes the object. A restore
// request (core request/reply, queue group "checkpoint") is answered by putting the newest valid state
// back as restore-<step> and naming it in the reply.
import type { z } from "zod";
import { PoisonMessageError } from "../dead-letter.js";
import { RestoreReplySchema, RestoreRequestSchema, StateAnnouncementSchema, type RestoreReply, type StateAnnouncement } from "../messages.js";
import { decodeMsgpack, encodeMsgpack } from "../msgpack-codec.js";
import { sha256Hex } from "../sha256.js";
import { stateObjectName } from "../subjects.js";
import type { Wire } from "../wire.js";
import type { ConsumeOptions } from "./consume-options.js";
import { MsgpackChannel } from "./msgpack-channel.js";
import { deleteObject, getObject, objectNames, putObject } from "./objects.js";

export class CheckpointChannel {
  readonly announcements: MsgpackChannel<typeof StateAnnouncementSchema>;

  constructor(private readonly wire: Wire) {
    const n = wire.names;
    this.announcements = new MsgpackChannel(wire, {
      subject: n.subjects.checkpoints,
      stream: n.streams.events,
      durable: n.consumers.checkpoint,
      schema: StateAnnouncementSchema,
      what: "state announcement",
      kind: "checkpoint",
      headers: (a) => ({ step: a.step }),
      msgId: (a) => `state:${a.step}:${a.sha256.slice(0, 16)}`,
    });
  }

  /** Stores a training state and announces it for the checkpoint actor. */
  async publish(step: number, bytes: Uint8Array): Promise<StateAnnouncement> {
    const object = stateObjectName(step);
    const sha256 = await putObject(await this.wire.objects(), object, bytes, `training state at step ${step}`);
    const ann = { run: this.wire.run, step, object, bytes: bytes.length, sha256 };
    await this.announcements.publish(ann);
    return ann;
  }

  /**
   * Works through the announcements. `handler` gets the state's bytes, checked against the announced
   * SHA-256 (a mismatch is dead-lettered), or null when the object is gone (an earlier delivery already
   * persisted and deleted it).
   */
  consume(handler: (ann: StateAnnouncement, state: Uint8Array | null) => Promise<void>, o: ConsumeOptions): Promise<void> {
    return this.announcements.consume(async (ann) => {
      if (ann.run !== this.wire.run) throw new PoisonMessageError(`state belongs to run ${ann.run}`);
      const store = await this.wire.objects();
      const state = await store.getBlob(ann.object);
      if (state !== null) {
        const sha = sha256Hex(state);
        if (sha !== ann.sha256)
          throw new PoisonMessageError(`state ${ann.object}: checksum ${sha.slice(0, 12)}… does not match the announced ${ann.sha256.slice(0, 12)}…`);
      }
      await handler(ann, state);
    }, o);
  }

  /** Steps of the state objects in the store (state-<step>; restore objects are not among them). */
  async stateSteps(): Promise<number[]> {
    const names = await objectNames(this.wire.names.objectBucket, await this.wire.jsm());
    return names.flatMap((n) => {
      const m = /^state-(\d+)$/.exec(n);
      return m ? [Number(m[1])] : [];
    });
  }

  /** Deletes a state object, leaving nothing of it in the store (objects.ts deleteObject); a failure is ignored. */
  async deleteObject(name: string): Promise<void> {
    await deleteObject(await this.wire.objects(), name, await this.wire.jsm()).catch(() => undefined);
  }

  async takeObject(name: string): Promise<Uint8Array> {
    const bytes = await getObject(await this.wire.objects(), name, await this.wire.jsm());
    await this.deleteObject(name);
    return bytes;
  }

  async putObject(name: string, bytes: Uint8Array, description: string): Promise<void> {
    await putObject(await this.wire.objects(), name, bytes, description);
  }
}

export type RestoreRequest = z.infer<typeof RestoreRequestSchema>;

export class RestoreChannel {
  constructor(private readonly wire: Wire) {}

  /** Asks the checkpoint actor for the newest state; the reply names the object holding it (or step -1). */
  async request(timeoutMs: number): Promise<RestoreReply> {
    const reply = await this.wire.nc.request(this.wire.names.subjects.checkpointRestore, encodeMsgpack(RestoreRequestSchema, { run: this.wire.run }), {
      timeout: timeoutMs,
    });
    return decodeMsgpack(RestoreReplySchema, reply.data, "restore reply");
  }

  /** Answers restore requests until the signal fires. A request that does not decode gets an error reply. */
  serve(handler: (req: RestoreRequest) => Promise<RestoreReply>, signal: AbortSignal): Promise<void> {
    const sub = this.wire.nc.subscribe(this.wire.names.subjects.checkpointRestore, { queue: "checkpoint" });
    signal.addEventListener("abort", () => sub.unsubscribe(), { once: true });
    return (async () => {
      for await (const m of sub) {
        let reply: RestoreReply;
        try {
          reply = await handler(decodeMsgpack(RestoreRequestSchema, m.data, "restore request"));
        } catch (e) {
          reply = { step: -1, error: (e as Error).message };
        }
        m.respond(encodeMsgpack(RestoreReplySchema, reply));
      }
    })();
  }
}
