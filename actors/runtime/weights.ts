// Policy weights travel as safetensors objects `v<n>` in the run's object store; KV `policy.version`
// says which is current. Shared by the learner (writes), inference (reads) and checkpoint (prunes).
import { createHash } from "node:crypto";
import type { ObjectStore } from "@nats-io/obj";
import { weightsObjectName } from "../../streams/subjects.js";

const CHUNK = 4 * 1024 * 1024; // 1-8 MB chunks keep the object store near its best throughput

export async function putBlob(store: ObjectStore, name: string, bytes: Uint8Array, description?: string): Promise<string> {
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  await store.putBlob({ name, description, options: { max_chunk_size: CHUNK } }, bytes);
  return sha256;
}

export async function getBlob(store: ObjectStore, name: string): Promise<Uint8Array> {
  const data = await store.getBlob(name);
  if (data === null) throw new Error(`object ${name} is not in the object store (pruned, or never written)`);
  return data;
}

export async function putWeights(store: ObjectStore, version: number, bytes: Uint8Array): Promise<string> {
  return putBlob(store, weightsObjectName(version), bytes, `policy weights version ${version} (safetensors)`);
}

export async function getWeights(store: ObjectStore, version: number): Promise<Uint8Array> {
  return getBlob(store, weightsObjectName(version));
}

/** Deletes weight versions older than the newest `keep` (never the current one). */
export async function pruneWeights(store: ObjectStore, current: number, keep: number): Promise<number[]> {
  const removed: number[] = [];
  const list = await store.list();
  for (const info of list) {
    const m = /^v(\d+)$/.exec(info.name);
    if (!m) continue;
    const v = Number(m[1]);
    // v0 is the policy RL started from (the SFT result): the run's "after SFT" evaluation and any later
    // comparison read it, so it is kept however far the run goes.
    if (v > 0 && v <= current - keep) {
      await store.delete(info.name).catch(() => undefined);
      removed.push(v);
    }
  }
  return removed;
}
