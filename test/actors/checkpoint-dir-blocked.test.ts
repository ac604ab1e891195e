// The checkpoint folder when it cannot take a write: a full disk and a read-only folder each give one error a
// person can act on (StorageBlockedError, naming the folder, the errno and the fix), and leave no partial
// folder; partial folders of writers that died are swept, a live writer's is not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { isDiskFull, StorageBlockedError } from "../../streams/index.js";

function mountTmpfs(dir: string, opts: string): string | null {
  if (process.getuid?.() !== 0) return "needs root to mount a small tmpfs";
  const r = spawnSync("mount", ["-t", "tmpfs", "-o", opts, "tmpfs", dir]);
  return r.status === 0 ? null : `mount -t tmpfs failed: ${r.stderr.toString().trim()}`;
}

const probe = mkdtempSync(join(tmpdir(), "rs-mount-probe-"));
const cannotMount = mountTmpfs(probe, "size=1m");
if (!cannotMount) spawnSync("umount", [probe]);
rmSync(probe, { recursive: true, force: true });

function withTmpfs(opts: string, fn: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), "rs-ckpt-"));
  assert.equal(mountTmpfs(dir, opts), null);
  try {
    fn(dir);
  } finally {
    spawnSync("umount", ["-l", dir]);
    rmSync(dir, { recursive: true, force: true });
  }
}

function blockedError(fn: () => void): StorageBlockedError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof StorageBlockedError, `a StorageBlockedError, not ${(e as Error).stack}`);
    assert.ok(isDiskFull(e), "consume waits on it instead of spending deliveries");
    return e;
  }
  assert.fail("the write should have failed");
}

test("a checkpoint that does not fit: disk full, said with the folder and the fix, no partial folder left", { skip: cannotMount ?? false }, () => {
  withTmpfs("size=256k", (root) => {
    const dir = new CheckpointDir(root, "r");
    dir.write(1, new Uint8Array(16 * 1024)); // positive control: a small one fits
    const e = blockedError(() => dir.write(2, new Uint8Array(1024 * 1024)));
    assert.match(e.message, /^disk full: cannot write checkpoint step 2 to .* \(ENOSPC\): no space left on its disk: free space$/);
    assert.deepEqual(readdirSync(root), ["step-00000001"]);
    assert.deepEqual(dir.steps(), [1]);
  });
});

test("a read-only checkpoint folder: not writable, said with the errno and the fix, nothing written", { skip: cannotMount ?? false }, () => {
  withTmpfs("size=1m", (root) => {
    mkdirSync(join(root, "ck"));
    spawnSync("mount", ["-o", "remount,ro", root]);
    const dir = new CheckpointDir(join(root, "ck"), "r");
    const e = blockedError(() => dir.write(3, new Uint8Array(10)));
    assert.match(e.message, /^checkpoint folder not writable: cannot write checkpoint step 3 to .*ck \(EROFS\): its file system is read-only/);
    assert.deepEqual(readdirSync(join(root, "ck")), []);
  });
});

test("partial folders of writers that died are swept; a live writer's stays", () => {
  const root = mkdtempSync(join(tmpdir(), "rs-ckpt-sweep-"));
  const live = spawn("sleep", ["30"]);
  try {
    const dead = spawnSync("true").pid!; // exited: its pid names no process now
    for (const pid of [dead, live.pid!]) {
      mkdirSync(join(root, `step-00000004.tmp-${pid}`));
      writeFileSync(join(root, `step-00000004.tmp-${pid}`, "state.safetensors"), "half");
    }
    const dir = new CheckpointDir(root, "r");
    assert.deepEqual(dir.sweepPartial(), [`step-00000004.tmp-${dead}`]);
    assert.deepEqual(readdirSync(root), [`step-00000004.tmp-${live.pid}`]);
  } finally {
    live.kill();
    rmSync(root, { recursive: true, force: true });
  }
});
