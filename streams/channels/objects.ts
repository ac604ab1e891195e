// Named objects in a run's object store, in 1-8 MB chunks (where the store runs near its best), with the
// SHA-256 that announcements carry.
import { createHash } from "node:crypto";
import type { JetStreamManager } from "@nats-io/jetstream";
import type { ObjectStore } from "@nats-io/obj";
import { sha256Hex } from "../sha256.js";
import { retryInfrastructure } from "../infrastructure-error.js";

const CHUNK = 4 * 1024 * 1024;

export async function putObject(store: ObjectStore, name: string, bytes: Uint8Array, description?: string): Promise<string> {
  const sha256 = sha256Hex(bytes);
  // A put under the same name replaces the object: safe to repeat when a leader election failed it.
  await retryInfrastructure(() => store.putBlob({ name, description, options: { max_chunk_size: CHUNK } }, bytes));
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
