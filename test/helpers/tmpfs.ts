// A small tmpfs for a real ENOSPC: mounted where a test needs a disk that fills, then filled by one file.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Mounts a tmpfs of `size` (e.g. "24m") on `dir`; null, or why it could not (mounting needs root). */
export function mountTmpfs(dir: string, size: string): string | null {
  if (process.getuid?.() !== 0) return "needs root to mount a small tmpfs";
  const r = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir]);
  return r.status === 0 ? null : `mount -t tmpfs failed: ${r.stderr.toString().trim()}`;
}

/** Why this machine cannot mount a tmpfs (a test's skip reason), or null when it can: tried once on a probe. */
export function whyNoTmpfs(): string | null {
  const probe = mkdtempSync(join(tmpdir(), "rs-mount-probe-"));
  const why = mountTmpfs(probe, "1m");
  if (!why) spawnSync("umount", [probe]);
  rmSync(probe, { recursive: true, force: true });
  return why;
}

/** Fills the disk under `dir` with one file, to the last block; returns its path. */
export function fillDisk(dir: string): string {
  const path = join(dir, "filler");
  const fd = openSync(path, "w");
  try {
    for (const size of [1 << 20, 4096, 512]) {
      const chunk = Buffer.alloc(size, 1);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (e) {
        assert.equal((e as NodeJS.ErrnoException).code, "ENOSPC");
      }
    }
  } finally {
    closeSync(fd);
  }
  return path;
}
