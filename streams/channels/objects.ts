// Named objects in a run's object store, in 1-8 MB chunks (where the store runs near its best), with the
// SHA-256 that announcements carry. Deleting one leaves nothing of it in the store's stream, and listing
// the names leaves no consumer: the store's disk use stays the size of the objects kept (see deleteObject).
import { createHash } from "node:crypto";
import { AckPolicy, DeliverPolicy, type JetStreamManager } from "@nats-io/jetstream";
import type { ObjectStore } from "@nats-io/obj";
import { sha256Hex } from "../sha256.js";
import { DiskFullError, isStoreFull, retryInfrastructure } from "../infrastructure-error.js";

const CHUNK = 4 * 1024 * 1024;

export async function putObject(store: ObjectStore, name: string, bytes: Uint8Array, description?: string): Promise<string> {
  const sha256 = sha256Hex(bytes);
  // A put under the same name replaces the object: safe to repeat when a leader election failed it, or when
  // the store was full (a prune may make room meanwhile).
  await retryInfrastructure(() => store.putBlob({ name, description, options: { max_chunk_size: CHUNK } }, bytes)).catch((e: Error) => {
    if (!isStoreFull(e)) throw e;
    const what = `${description ?? name}, ${(bytes.length / 2 ** 20).toFixed(1)} MiB`;
    throw new DiskFullError(
      `disk full: the NATS store has no room for ${what}; JetStream says "${e.message}". Free space where the nats-server keeps its store (or raise its max_file_store), then resume`,
      { cause: e },
    );
  });
  return sha256;
}

/**
 * An object's bytes, read chunk by chunk with direct gets (`$JS.API.DIRECT.GET`, one request per chunk):
 * no consumer is created, so nothing is left on the server afterwards. (The client's own get makes an
 * ordered push consumer per read and leaves it to expire: with every inference replica and the evaluator
 * fetching each policy version, dozens sat on the weights store at any time.) The digest is checked.
 */
export async function getObject(store: ObjectStore, name: string, jsm: JetStreamManager): Promise<Uint8Array> {
  const info = await store.info(name);
  if (info === null || info.deleted) throw new Error(`object ${name} is not in the object store (pruned, or never written)`);
  const out = new Uint8Array(info.size);
  const stream = `OBJ_${info.bucket}`;
  const subject = `$O.${info.bucket}.C.${info.nuid}`;
  let offset = 0;
  let seq = 1;
  for (let chunk = 0; chunk < info.chunks; chunk++) {
    const m = await jsm.direct.getMessage(stream, { seq, next_by_subj: subject });
    if (m === null) throw new Error(`object ${name}: chunk ${chunk + 1} of ${info.chunks} is missing (deleted while it was read?)`);
    if (offset + m.data.length > out.length) throw new Error(`object ${name}: its chunks hold more than the ${info.size} bytes its info says`);
    out.set(m.data, offset);
    offset += m.data.length;
    seq = m.seq + 1;
  }
  if (offset !== info.size) throw new Error(`object ${name}: read ${offset} of its ${info.size} bytes`);
  const digest = `SHA-256=${createHash("sha256").update(out).digest("base64url")}`;
  if (digest.replace(/=+$/, "") !== info.digest.replace(/=+$/, ""))
    throw new Error(`object ${name}: digest ${digest} does not match the stored ${info.digest}`);
  return out;
}

/**
 * The names in the store, from the stream's subject counts (one request, no consumer: the client's list()
 * opens a watcher per call that stays on the server long after, one per pruning pass).
 */
export async function objectNames(bucket: string, jsm: JetStreamManager): Promise<string[]> {
  const prefix = `$O.${bucket}.M.`;
  const si = await jsm.streams.info(`OBJ_${bucket}`, { subjects_filter: `${prefix}>` });
  return Object.keys(si.state.subjects ?? {}).map((subject) => Buffer.from(subject.slice(prefix.length), "base64url").toString());
}

/**
 * Deletes an object's chunks and then its info, message by message, so that nothing of it stays in the
 * stream; false when it was not there. Two faults of nats-server 2.9.10 (Debian's) shape this:
 * - the client's delete() leaves a "deleted" info message behind, written into the file-store block that
 *   holds the newest chunks; every ~8 MiB block then keeps a live message and is never freed, and the disk
 *   grew by a model size per version however few versions were kept;
 * - a purge by subject (how delete() drops the chunks) frees the disk but never takes the bytes off the
 *   account's count of bytes stored, until the server restarts: a server with max_file_store refuses puts
 *   as "insufficient resources" once the bytes ever written reach it, however few are kept.
 * Deleting each message by its sequence does neither. Only this revision of the info goes (a put under the
 * same name meanwhile stays), and a delete cut short leaves the info, so the next delete finishes the job.
 */
export async function deleteObject(store: ObjectStore, name: string, jsm: JetStreamManager): Promise<boolean> {
  const info = await store.info(name);
  if (info === null) return false;
  const stream = `OBJ_${info.bucket}`;
  for (const seq of await sequencesOf(jsm, stream, `$O.${info.bucket}.C.${info.nuid}`)) await deleteMessage(jsm, stream, seq);
  await deleteMessage(jsm, stream, info.revision);
  return !info.deleted;
}

/** The sequences of the messages on `subject`, from a headers-only consumer (no payload is read) deleted at once. */
async function sequencesOf(jsm: JetStreamManager, stream: string, subject: string): Promise<number[]> {
  const ci = await jsm.consumers.add(stream, {
    filter_subject: subject,
    headers_only: true,
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.All,
    mem_storage: true,
    // Gone on its own should this process die before it deletes it.
    inactive_threshold: 30_000 * 1_000_000,
  });
  try {
    const seqs: number[] = [];
    if (ci.num_pending === 0) return seqs;
    const consumer = await jsm.jetstream().consumers.get(stream, ci.name);
    for await (const m of await consumer.fetch({ max_messages: ci.num_pending, expires: 5_000 })) seqs.push(m.seq);
    return seqs;
  } finally {
    await jsm.consumers.delete(stream, ci.name).catch(() => undefined);
  }
}

/** Deletes one message (without overwriting its bytes first); one already gone is no error. */
async function deleteMessage(jsm: JetStreamManager, stream: string, seq: number): Promise<void> {
  await jsm.streams.deleteMessage(stream, seq, false).catch((e: Error) => {
    if (!/no message found|not found/i.test(e.message)) throw e;
  });
}
