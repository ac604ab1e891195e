// What every channel of a run stands on: the connection, the run's names and its buckets. Actors get a
// Wire from ensureTopology (which creates what is missing); tools that only read a run (inspect, replay,
// dashboard) get one from openWire, which creates nothing and opens buckets only when a message needs them.
// The run's KV is not part of it: RunState wraps the bucket ensureTopology opens.
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { PoisonMessageError } from "./dead-letter.js";
import { isInfrastructureError } from "./infrastructure-error.js";
import { runNames, type RunNames } from "./subjects.js";

/** A max_payload the server did not tell us: the NATS default. */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

export interface Wire {
  run: string;
  names: RunNames;
  nc: NatsConnection;
  js: JetStreamClient;
  jsm(): Promise<JetStreamManager>;
  /** Policy weights and training-state objects. */
  objects(): Promise<ObjectStore>;
  /** Payloads larger than max_payload (large-payload.ts). */
  blobs(): Promise<ObjectStore>;
  /** Attempts started and never finished, per message (attempt-ledger.ts). */
  attempts(): Promise<KV>;
  /** Each actor instance's heartbeat (health.ts). */
  health(): Promise<KV>;
  /** The server's max_payload: headers + payload of one message. */
  maxPayload(): number;
}

function once<T>(open: () => Promise<T>, fail: (e: Error) => Error): () => Promise<T> {
  let p: Promise<T> | undefined;
  return () =>
    (p ??= open().catch((e: Error) => {
      p = undefined;
      // A server that did not answer says nothing about the bucket: keep the error as it is, so callers
      // can tell it from a missing bucket and retry it.
      throw isInfrastructureError(e) ? e : fail(e);
    }));
}

export interface WireParts {
  jsm?: JetStreamManager;
  objects?: ObjectStore;
  blobs?: ObjectStore;
  attempts?: KV;
  health?: KV;
}

/** A wire over an existing run; parts already open (from ensureTopology) are used as they are. */
export function openWire(nc: NatsConnection, run: string, parts: WireParts = {}): Wire {
  const names = runNames(run);
  const objm = new Objm(nc);
  return {
    run,
    names,
    nc,
    js: jetstream(nc),
    jsm: parts.jsm
      ? () => Promise.resolve(parts.jsm!)
      : once(
          () => jetstreamManager(nc),
          (e) => e,
        ),
    objects: parts.objects
      ? () => Promise.resolve(parts.objects!)
      : once(
          () => objm.open(names.objectBucket),
          (e) => new Error(`run ${run} has no weights bucket ${names.objectBucket}: ${e.message}`),
        ),
    // A run recorded before blobs existed has no bucket: only a pointer message needs it, and then its
    // absence is that message's fault.
    blobs: parts.blobs
      ? () => Promise.resolve(parts.blobs!)
      : once(
          () => objm.open(names.blobBucket),
          (e) => new PoisonMessageError(`message points to a blob, but bucket ${names.blobBucket} cannot be opened: ${e.message}`),
        ),
    attempts: parts.attempts
      ? () => Promise.resolve(parts.attempts!)
      : once(
          () => new Kvm(nc).open(names.attemptsBucket),
          (e) => new Error(`run ${run} has no attempts bucket ${names.attemptsBucket}: ${e.message}`),
        ),
    health: parts.health
      ? () => Promise.resolve(parts.health!)
      : once(
          () => new Kvm(nc).open(names.healthBucket),
          (e) => new Error(`run ${run} has no health bucket ${names.healthBucket}: ${e.message}`),
        ),
    maxPayload: () => nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD,
  };
}
