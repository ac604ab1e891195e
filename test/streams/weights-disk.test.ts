// The weights object store's disk use stays bounded by the versions kept (issue 43). 1,000 policy versions are
// put and pruned exactly as the learner and the checkpoint actor do (keepVersions newest kept, v0 held back
// for the evaluator throughout, a training state put and deleted every 10 versions), and the weights stream's
// folder on the nats-server's disk is measured every 100 versions. Before deletes left nothing of an object
// behind, each version left a "deleted" info message in the ~8 MiB file-store block being written, no block
// was ever freed, and the folder grew by a version's size per version (2.2 GB after 1,000 versions of 2.2 MB);
// and the server's count of the bytes stored, which its max_file_store is enforced against, must shrink too.
// A store with no room left says "disk full" in one line (not a NATS outage), and takes puts again once a prune
// made room, with no restart of the server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology, RunChannels } from "../../streams/index.js";
import { DiskFullError } from "../../streams/infrastructure-error.js";

const VERSIONS = 1000;
const KEEP = 4;
const BLOB = 1024 * 1024;
const BLOCK = 8 * 1024 * 1024;
/**
 * The kept versions (KEEP, v0 and the one being written) plus, for each of the two runs of live data in the
 * stream (v0's, and the newest versions'), at most a partly used file-store block at either end.
 */
const BOUND = (KEEP + 2) * BLOB + 4 * BLOCK;

/** Bytes of the files under `dir` (apparent sizes: the blocks the file store keeps). */
function folderBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) n += e.isDirectory() ? folderBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size;
  return n;
}

function findFolder(root: string, name: string): string | null {
  for (const e of readdirSync(root, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    if (e.name === name) return join(root, e.name);
    const found = findFolder(join(root, e.name), name);
    if (found) return found;
  }
  return null;
}

test(`1,000 weight versions put and pruned keep the store within (keep + 2) × the model + 4 blocks, with no consumer left`, async (t) => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    const topo = await ensureTopology(nc, "disk");
    const ch = new RunChannels(topo.wire);
    const stream = `OBJ_${topo.names.objectBucket}`;
    const folder = findFolder(nats.storeDir, stream);
    assert.ok(folder, `the weights stream's folder ${stream} is under the server's store`);
    const bytes = new Uint8Array(BLOB);
    const sizes: string[] = [];
    for (let v = 0; v <= VERSIONS; v++) {
      bytes[0] = v & 255;
      bytes[1] = v >> 8;
      await ch.weights.publish({ version: v, step: v, phase: "rl", bytes });
      if (v % 10 === 0) {
        const state = await ch.checkpoints.publish(v, new Uint8Array(2 * BLOB).fill(v & 255));
        await ch.checkpoints.deleteObject(state.object);
      }
      const removed = await ch.weights.prune(v, KEEP, new Set([0]));
      if (v > KEEP) assert.deepEqual(removed, [v - KEEP], `v${v}: the version that fell out of the newest ${KEEP} is pruned, and only it`);
      if (v % 100 !== 0) continue;
      const onDisk = folderBytes(folder);
      const si = await topo.jsm.streams.info(stream);
      const used = (await topo.jsm.getAccountInfo()).storage;
      sizes.push(`v${v} ${(onDisk / 2 ** 20).toFixed(1)} MiB (server's count ${(used / 2 ** 20).toFixed(1)} MiB), ${si.state.consumer_count} consumers`);
      assert.ok(onDisk <= BOUND, `v${v}: the weights stream takes ${onDisk} bytes on disk, over the bound ${BOUND} (${sizes.join("; ")})`);
      // What max_file_store is enforced against: a purge by subject freed the disk but never came off this count.
      assert.ok(used <= BOUND, `v${v}: the server counts ${used} bytes stored, over the bound ${BOUND} (${sizes.join("; ")})`);
      assert.equal(si.state.consumer_count, 0, `v${v}: pruning passes leave no consumer on the weights stream`);
    }
    t.diagnostic(`weights stream on disk: ${sizes.join("; ")}`);
    // The positive control: every kept version is still whole, and what was pruned is gone.
    for (const v of [0, VERSIONS - KEEP + 1, VERSIONS]) assert.equal((await ch.weights.fetch(v)).length, BLOB, `v${v} kept and readable`);
    await assert.rejects(ch.weights.fetch(VERSIONS - KEEP), /not in the object store/);
    const objects = (await topo.jsm.streams.info(stream, { subjects_filter: `$O.${topo.names.objectBucket}.M.>` })).state.subjects ?? {};
    assert.equal(Object.keys(objects).length, KEEP + 1, "the store lists the kept versions and v0, no trace of a deleted object");
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});

test("a full NATS store: the weights put fails as one line saying disk full, and succeeds again once pruning made room", async () => {
  const nats = await startTestNats({ maxFileStoreBytes: 40 * 2 ** 20 });
  const nc = await connect({ servers: nats.url });
  try {
    const topo = await ensureTopology(nc, "full", { eventsMaxBytes: 2 ** 20 });
    const ch = new RunChannels(topo.wire);
    const bytes = new Uint8Array(5 * 2 ** 20);
    let full: unknown = null;
    let v = 0;
    for (; v < 20 && full === null; v++) await ch.weights.publish({ version: v, step: v, phase: "rl", bytes }).catch((e: unknown) => (full = e));
    assert.ok(full instanceof DiskFullError, `a put into the full store fails as DiskFullError, not as ${String(full)}`);
    assert.match(
      full.message,
      /^disk full: the NATS store has no room for policy weights version \d+ \(safetensors\), 5\.0 MiB; JetStream says "insufficient resources"/,
    );
    assert.ok(!full.message.includes("\n"), "one line");
    assert.ok(v >= 5, `several versions fitted before the store was full (${v - 1})`);
    // Room again: the checkpoint actor's prune (here by hand) frees the disk, and the next put goes through.
    await ch.weights.prune(v - 2, 1);
    await ch.weights.publish({ version: v, step: v, phase: "rl", bytes });
    assert.equal((await ch.weights.fetch(v)).length, bytes.length);
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});
