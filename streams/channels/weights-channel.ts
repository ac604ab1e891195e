// Policy weights: safetensors objects `v<n>` in the run's object store, announced on rs.<run>.weights
// (msgpack). The object is written before its announcement, so an announced version is always there
// until it is pruned; KV policy.version (written by the learner) says which one is current.
import type { PubAck } from "@nats-io/jetstream";
import { WeightsAnnouncementSchema, type WeightsAnnouncement } from "../messages.js";
import { weightsObjectName } from "../subjects.js";
import { withDeadline } from "../deadline.js";
import type { Wire } from "../wire.js";
import { MsgpackChannel } from "./msgpack-channel.js";
import { deleteObject, getObject, objectNames, putObject } from "./objects.js";

export class WeightsChannel {
  readonly announcements: MsgpackChannel<typeof WeightsAnnouncementSchema>;

  constructor(private readonly wire: Wire) {
    const n = wire.names;
    this.announcements = new MsgpackChannel(wire, {
      subject: n.subjects.weights,
      stream: n.streams.events,
      schema: WeightsAnnouncementSchema,
      what: "weights announcement",
      kind: "weights",
      headers: (a) => ({ step: a.step, policyVersion: a.version }),
      msgId: (a) => `weights:${a.version}:${a.sha256.slice(0, 16)}`,
    });
  }

  /** Stores version `version` and announces it. */
  async publish(v: { version: number; step: number; phase: "sft" | "rl"; bytes: Uint8Array }): Promise<{ ack: PubAck; announcement: WeightsAnnouncement }> {
    const object = weightsObjectName(v.version);
    const sha256 = await putObject(await this.wire.objects(), object, v.bytes, `policy weights version ${v.version} (safetensors)`);
    const announcement = { run: this.wire.run, version: v.version, step: v.step, phase: v.phase, object, bytes: v.bytes.length, sha256 };
    return { ack: await this.announcements.publish(announcement), announcement };
  }

  /** The weights of `version`; a DeadlineError after `deadlineMs` (a read can hang when a cluster member dies). */
  async fetch(version: number, deadlineMs = 60_000): Promise<Uint8Array> {
    return withDeadline(
      (async () => getObject(await this.wire.objects(), weightsObjectName(version), await this.wire.jsm()))(),
      deadlineMs,
      `fetch of weights v${version}`,
    );
  }

  /** The version of the newest announcement on rs.<run>.weights (the learner's newest, or the one it was restored to); null before any. */
  async lastAnnounced(): Promise<number | null> {
    return (await this.announcements.last())?.value.version ?? null;
  }

  /** The versions whose weights are in the object store, ascending. */
  async storedVersions(): Promise<number[]> {
    const names = await objectNames(this.wire.names.objectBucket, await this.wire.jsm());
    return names.flatMap((n) => (/^v\d+$/.test(n) ? [Number(n.slice(1))] : [])).sort((a, b) => a - b);
  }

  /** Calls fn for every announcement published from now on (core subscription: pruning needs no history). */
  onAnnouncement(fn: (a: WeightsAnnouncement) => Promise<void>, signal: AbortSignal, onInvalid: (e: Error) => void): Promise<void> {
    const sub = this.wire.nc.subscribe(this.announcements.subject);
    signal.addEventListener("abort", () => sub.unsubscribe(), { once: true });
    return (async () => {
      for await (const m of sub) {
        try {
          await fn(this.announcements.decode(m.data));
        } catch (e) {
          onInvalid(e as Error);
        }
      }
    })();
  }

  /**
   * Deletes versions older than the newest `keep`, except those in `protect` (the evaluator still needs them).
   * A delete that fails is tried again by the next pass: the version is still listed.
   */
  async prune(current: number, keep: number, protect: ReadonlySet<number> = new Set()): Promise<number[]> {
    const [store, jsm] = [await this.wire.objects(), await this.wire.jsm()];
    const removed: number[] = [];
    for (const name of await objectNames(this.wire.names.objectBucket, jsm)) {
      const m = /^v(\d+)$/.exec(name);
      if (!m) continue;
      const v = Number(m[1]);
      if (v <= current - keep && !protect.has(v) && (await deleteObject(store, name, jsm).catch(() => false))) removed.push(v);
    }
    return removed;
  }
}
