// Policy weights: safetensors objects `v<n>` in the run's object store, announced on rs.<run>.weights
// (msgpack). The object is written before its announcement, so an announced version is always there
// until it is pruned; KV policy.version (written by the learner) says which one is current.
// A LoRA run's RL versions also have their adapters alone, `lora-v<n>` (msgpack: PEFT's adapter_model.safetensors
// bytes, its adapter_config.json and the base's sha256), written before the version is announced, and the
// frozen base they apply to, `lora-base` (safetensors, HF names): what a fleet ships to servers that take adapters.
import { createHash } from "node:crypto";
import type { PubAck } from "@nats-io/jetstream";
import { decode, encode } from "@msgpack/msgpack";
import { z } from "zod";
import { WeightsAnnouncementSchema, type WeightsAnnouncement } from "../messages.js";
import { weightsObjectName } from "../subjects.js";
import { withDeadline } from "../deadline.js";
import type { Wire } from "../wire.js";
import { MsgpackChannel } from "./msgpack-channel.js";
import { deleteObject, getObject, objectNames, putObject } from "./objects.js";

/** A version's LoRA adapters in PEFT's two files, and the sha256 (hex) of the base safetensors they apply to. */
export interface LoraAdapterFiles {
  config: string;
  weights: Uint8Array;
  baseSha256: string;
}

/** The msgpack object `lora-v<n>`. */
const AdapterObject = z.object({ config: z.string(), weights: z.instanceof(Uint8Array), baseSha256: z.string().regex(/^[0-9a-f]{64}$/) });

const LORA_BASE = "lora-base";
const loraObjectName = (version: number) => `lora-v${version}`;

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

  /** Stores the adapters of `version` (before its announcement: a reader that sees the version finds them). */
  async publishAdapter(version: number, a: LoraAdapterFiles): Promise<void> {
    const bytes = encode({ config: a.config, weights: a.weights, baseSha256: a.baseSha256 });
    await putObject(await this.wire.objects(), loraObjectName(version), bytes, `LoRA adapters of policy version ${version} (PEFT)`);
  }

  /** The adapters of `version`; null when it has none (a version of SFT or of full RL, or one pruned). */
  async fetchAdapter(version: number, deadlineMs = 60_000): Promise<LoraAdapterFiles | null> {
    const store = await this.wire.objects();
    const info = await store.info(loraObjectName(version));
    if (info === null || info.deleted) return null;
    const bytes = await withDeadline(
      (async () => getObject(store, loraObjectName(version), await this.wire.jsm()))(),
      deadlineMs,
      `fetch of adapters v${version}`,
    );
    const parsed = AdapterObject.safeParse(decode(bytes));
    if (!parsed.success) throw new Error(`object ${loraObjectName(version)} is not an adapter object: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  }

  /** Stores the frozen base the adapters apply to; its sha256 (what adapters name). Unchanged bytes are not written again. */
  async publishLoraBase(bytes: Uint8Array): Promise<string> {
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    const store = await this.wire.objects();
    const info = await store.info(LORA_BASE);
    if (info?.description === sha256 && !info.deleted) return sha256;
    await putObject(store, LORA_BASE, bytes, sha256);
    return sha256;
  }

  /** The base the adapters apply to, checked against the sha256 an adapter names. */
  async fetchLoraBase(sha256: string, deadlineMs = 60_000): Promise<Uint8Array> {
    const bytes = await withDeadline(
      (async () => getObject(await this.wire.objects(), LORA_BASE, await this.wire.jsm()))(),
      deadlineMs,
      "fetch of the LoRA base",
    );
    const got = createHash("sha256").update(bytes).digest("hex");
    if (got !== sha256)
      throw new Error(
        `the LoRA base in the object store is ${got.slice(0, 12)}, the adapters need ${sha256.slice(0, 12)} (a learner restarted on another base?)`,
      );
    return bytes;
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
      const m = /^(?:lora-)?v(\d+)$/.exec(name);
      if (!m) continue;
      const v = Number(m[1]);
      const gone = v <= current - keep && !protect.has(v) && (await deleteObject(store, name, jsm).catch(() => false));
      if (gone && name.startsWith("v")) removed.push(v);
    }
    return removed;
  }
}
