// Named objects in a run's object store, in 1-8 MB chunks (where the store runs near its best), with the
// SHA-256 that announcements carry.
import type { ObjectStore } from "@nats-io/obj";
import { sha256Hex } from "../sha256.js";

const CHUNK = 4 * 1024 * 1024;

export async function putObject(store: ObjectStore, name: string, bytes: Uint8Array, description?: string): Promise<string> {
  const sha256 = sha256Hex(bytes);
  await store.putBlob({ name, description, options: { max_chunk_size: CHUNK } }, bytes);
  return sha256;
}

export async function getObject(store: ObjectStore, name: string): Promise<Uint8Array> {
  const data = await store.getBlob(name);
  if (data === null) throw new Error(`object ${name} is not in the object store (pruned, or never written)`);
  return data;
}
