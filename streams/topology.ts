// The run's JetStream objects, defined once and created idempotently: every actor calls
// ensureTopology at start, so any of them can come up first, and a restart changes nothing.
import type { NatsConnection } from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type ConsumerConfig,
  type JetStreamManager,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { Objm, setSha256Backend, type ObjectStore } from "@nats-io/obj";
import { runNames, type RunNames } from "./subjects.js";
import { openWire, type Wire } from "./wire.js";
import { DiskFullError, isStoreFull } from "./infrastructure-error.js";

// The default JS sha256 caps the object store at ~40 MB/s (DESIGN §3).
setSha256Backend("native");

export interface TopologyOptions {
  /** Stream replicas: 1 locally, 3 on a clustered JetStream. */
  replicas?: number;
  /** Cap on the rollouts stream (kept for replay); oldest dropped past it. -1 = unlimited. */
  rolloutsMaxBytes?: number;
  eventsMaxBytes?: number;
  /** How long inference (a task) or reward (a raw group) may hold a message without a progress
   *  heartbeat before it is redelivered to another replica. */
  taskAckWaitMs?: number;
  maxDeliver?: number;
  /** Redelivery window for msg-id dedupe. */
  duplicateWindowMs?: number;
}

export interface Topology {
  names: RunNames;
  jsm: JetStreamManager;
  kv: KV;
  objects: ObjectStore;
  /** Payloads larger than max_payload, referenced from their stream messages (streams/large-payload.ts). */
  blobs: ObjectStore;
  /** Attempts started and not finished, per message (streams/attempt-ledger.ts). */
  attempts: KV;
  /** Each actor instance's heartbeat (streams/health.ts). */
  health: KV;
  /** What the run's channels stand on, over the objects above. */
  wire: Wire;
}

const ms = (n: number) => n * 1_000_000; // JetStream durations are nanoseconds

/** How long an unfinished attempt is remembered: far longer than any crash loop takes to show. */
const ATTEMPTS_TTL_MS = 24 * 3600_000;

/** Live keys are rewritten every few seconds; this only clears those of processes that died, after a while. */
const HEALTH_TTL_MS = 3600_000;

function streamConfigs(names: RunNames, o: Required<TopologyOptions>): Array<Partial<StreamConfig> & { name: string; subjects: string[] }> {
  const common = { storage: StorageType.File, num_replicas: o.replicas, duplicate_window: ms(o.duplicateWindowMs) };
  return [
    { ...common, name: names.streams.tasks, subjects: [names.subjects.tasks], retention: RetentionPolicy.Workqueue },
    {
      ...common,
      name: names.streams.rollouts,
      subjects: [names.subjects.rolloutsRaw, names.subjects.rolloutsScored],
      retention: RetentionPolicy.Limits,
      max_bytes: o.rolloutsMaxBytes,
      discard: DiscardPolicy.Old,
    },
    {
      ...common,
      name: names.streams.events,
      subjects: [
        names.subjects.weights,
        names.subjects.checkpoints,
        names.subjects.groups,
        names.subjects.steps,
        names.subjects.replays,
        names.subjects.metricsAll,
        names.subjects.dlq,
        names.subjects.eval,
      ],
      retention: RetentionPolicy.Limits,
      max_bytes: o.eventsMaxBytes,
      discard: DiscardPolicy.Old,
    },
  ];
}

function consumerConfigs(names: RunNames, o: Required<TopologyOptions>): Array<{ stream: string; config: Partial<ConsumerConfig> & { durable_name: string } }> {
  return [
    {
      stream: names.streams.tasks,
      config: {
        durable_name: names.consumers.inference,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: names.subjects.tasks,
        ack_wait: ms(o.taskAckWaitMs),
        max_deliver: o.maxDeliver,
        max_ack_pending: 1024,
      },
    },
    {
      stream: names.streams.rollouts,
      config: {
        durable_name: names.consumers.reward,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: names.subjects.rolloutsRaw,
        // Scoring heartbeats like inference does, so a lost reward replica's groups come back as fast.
        ack_wait: ms(o.taskAckWaitMs),
        max_deliver: o.maxDeliver,
        max_ack_pending: 1024,
      },
    },
    {
      stream: names.streams.events,
      config: {
        durable_name: names.consumers.checkpoint,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: names.subjects.checkpoints,
        ack_wait: ms(120_000),
        max_deliver: o.maxDeliver,
        max_ack_pending: 4,
      },
    },
  ];
}

/**
 * A stream whose byte cap JetStream cannot reserve ("insufficient storage resources": the server's max storage,
 * by default three quarters of its disk's free space when it started, is smaller) is said as a full store that
 * names the cap and what to change; any other error is returned as it is.
 */
function noRoomFor(cfg: { name: string; max_bytes?: number }, e: Error): Error {
  if (!isStoreFull(e)) return e;
  const cap = cfg.max_bytes && cfg.max_bytes > 0 ? `its cap of ${(cfg.max_bytes / 2 ** 20).toFixed(0)} MiB` : "it";
  return new DiskFullError(
    `disk full: the NATS server has no room to reserve stream ${cfg.name} (${cap}); JetStream says "${e.message}". Free space on the server's store disk and restart it, or lower nats.eventsMaxBytes / nats.rolloutsMaxBytes`,
    { cause: e },
  );
}

export async function ensureTopology(nc: NatsConnection, run: string, opts: TopologyOptions = {}): Promise<Topology> {
  const o: Required<TopologyOptions> = {
    replicas: opts.replicas ?? 1,
    rolloutsMaxBytes: opts.rolloutsMaxBytes ?? -1,
    eventsMaxBytes: opts.eventsMaxBytes ?? 1024 * 1024 * 1024,
    taskAckWaitMs: opts.taskAckWaitMs ?? 60_000,
    maxDeliver: opts.maxDeliver ?? 10,
    duplicateWindowMs: opts.duplicateWindowMs ?? 10 * 60_000,
  };
  const names = runNames(run);
  const jsm = await jetstreamManager(nc);
  for (const cfg of streamConfigs(names, o)) {
    const existing = await jsm.streams.info(cfg.name).catch(() => null);
    if (existing === null) {
      await jsm.streams.add(cfg).catch(async (e: Error) => {
        // Another actor may have created it between our info and add.
        if (!(await jsm.streams.info(cfg.name).catch(() => null))) throw noRoomFor(cfg, e);
      });
    } else {
      const same = JSON.stringify([...existing.config.subjects].sort()) === JSON.stringify([...cfg.subjects].sort());
      if (!same || existing.config.max_bytes !== cfg.max_bytes) {
        // Retention cannot change in place; everything else we set can.
        const { retention: _r, storage: _s, ...updatable } = cfg;
        await jsm.streams.update(cfg.name, updatable).catch((e: Error) => {
          throw noRoomFor(cfg, e);
        });
      }
    }
  }
  for (const { stream, config } of consumerConfigs(names, o)) {
    const existing = await jsm.consumers.info(stream, config.durable_name).catch(() => null);
    if (existing === null) {
      await jsm.consumers.add(stream, config).catch(async (e: Error) => {
        if (!(await jsm.consumers.info(stream, config.durable_name).catch(() => null))) throw e;
      });
    } else if (existing.config.ack_wait !== config.ack_wait || existing.config.max_deliver !== config.max_deliver) {
      // A run restarted with other timeouts: these two can change in place (the position is kept).
      await jsm.consumers.update(stream, config.durable_name, { ack_wait: config.ack_wait, max_deliver: config.max_deliver });
    }
  }
  const kv = await openStateBucket(nc, run, o.replicas);
  const objects = await new Objm(nc).create(names.objectBucket, { replicas: o.replicas });
  // Kept like the rollouts stream they belong to: a replay or inspect of an old message still finds its blob.
  const blobs = await new Objm(nc).create(names.blobBucket, { replicas: o.replicas, max_bytes: o.rolloutsMaxBytes });
  // Entries live only while a message is being retried; the age limit also clears the delete markers.
  const attempts = await new Kvm(nc).create(names.attemptsBucket, { history: 1, replicas: o.replicas, ttl: ATTEMPTS_TTL_MS });
  const health = await new Kvm(nc).create(names.healthBucket, { history: 1, replicas: o.replicas, ttl: HEALTH_TTL_MS });
  return { names, jsm, kv, objects, blobs, attempts, health, wire: openWire(nc, run, { jsm, objects, blobs, attempts, health }) };
}

/** The run's state KV bucket, created if missing: `train` takes the run's lease in it before it touches anything else. */
export function openStateBucket(nc: NatsConnection, run: string, replicas = 1): Promise<KV> {
  return new Kvm(nc).create(runNames(run).kvBucket, { history: 5, replicas });
}

/** Deletes every JetStream object of a run (used by tests and `rollstream train --fresh`). */
export async function deleteTopology(nc: NatsConnection, run: string): Promise<void> {
  const names = runNames(run);
  const jsm = await jetstreamManager(nc);
  for (const s of Object.values(names.streams)) await jsm.streams.delete(s).catch(() => false);
  await jsm.streams.delete(`KV_${names.kvBucket}`).catch(() => false);
  await jsm.streams.delete(`OBJ_${names.objectBucket}`).catch(() => false);
  await jsm.streams.delete(`OBJ_${names.blobBucket}`).catch(() => false);
  await jsm.streams.delete(`KV_${names.attemptsBucket}`).catch(() => false);
  await jsm.streams.delete(`KV_${names.healthBucket}`).catch(() => false);
}
