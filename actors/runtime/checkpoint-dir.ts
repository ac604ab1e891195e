// Checkpoints on disk: runs/<run>/checkpoints/step-XXXXXXXX/{state.safetensors, manifest.json}, and for a LoRA
// run adapter/{adapter_config.json, adapter_model.safetensors} (PEFT's format).
// Written into a temp folder, fsynced, then renamed, so a crash never leaves a half checkpoint that
// looks whole; the manifest's sha256 is checked before a checkpoint is used.
import { sha256Hex, StorageBlockedError } from "../../streams/index.js";
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";

/** A file written beside the state, inside the checkpoint folder (a LoRA run's adapter/ in PEFT's format). */
export interface CheckpointExtra {
  /** Relative to the checkpoint folder. */
  path: string;
  data: Uint8Array | string;
}

export interface CheckpointManifest {
  format: "rollstream-checkpoint-1";
  run: string;
  step: number;
  file: string;
  bytes: number;
  sha256: string;
  createdAt: string;
}

function writeFileDurable(path: string, data: Uint8Array | string): void {
  const fd = openSync(path, "w");
  try {
    if (typeof data === "string") writeSync(fd, data);
    else writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function fsyncDir(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function alive(pid: number): boolean {
  if (pid === process.pid) return false; // ours, from a write that did not finish: nothing writes it now
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

const FIXES: Record<string, string> = {
  ENOSPC: "no space left on its disk: free space",
  EDQUOT: "its disk quota is spent: free space or raise the quota",
  EACCES: "no permission to write it: fix its permissions",
  EPERM: "it may not be written (immutable or not ours): fix its attributes (lsattr) or owner",
  EROFS: "its file system is read-only: remount it read-write or set outDir elsewhere",
};

/** The folder-level failure a person must fix, as a StorageBlockedError; null for any other error. */
function blocked(e: unknown, root: string, step: number): StorageBlockedError | null {
  const code = (e as NodeJS.ErrnoException).code;
  const fix = code ? FIXES[code] : undefined;
  if (!fix) return null;
  const what = code === "ENOSPC" || code === "EDQUOT" ? "disk full" : "checkpoint folder not writable";
  return new StorageBlockedError(`${what}: cannot write checkpoint step ${step} to ${root} (${code}): ${fix}`, { cause: e });
}

export class CheckpointDir {
  constructor(
    readonly root: string,
    readonly run: string,
  ) {
    mkdirSync(root, { recursive: true });
  }

  /** Removes the temp folders of writes whose process is gone (killed mid-write, or it failed before cleaning up). */
  sweepPartial(): string[] {
    const gone = readdirSync(this.root).filter((n) => {
      const m = /^step-\d{8}\.tmp-(\d+)$/.exec(n);
      return m !== null && !alive(Number(m[1]));
    });
    for (const n of gone) rmSync(join(this.root, n), { recursive: true, force: true });
    return gone;
  }

  dirFor(step: number): string {
    return join(this.root, `step-${String(step).padStart(8, "0")}`);
  }

  /** Writes it whole or not at all: a failed write leaves no temp folder; a folder that cannot take it is a
   *  StorageBlockedError naming it and what to do. */
  write(step: number, state: Uint8Array, extras: CheckpointExtra[] = []): CheckpointManifest {
    const tmp = `${this.dirFor(step)}.tmp-${process.pid}`;
    try {
      return this.writeVia(tmp, step, state, extras);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      throw blocked(e, this.root, step) ?? e;
    }
  }

  private writeVia(tmp: string, step: number, state: Uint8Array, extras: CheckpointExtra[]): CheckpointManifest {
    const sha256 = sha256Hex(state);
    const final = this.dirFor(step);
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp); // not recursive: a recursive mkdir says ENOENT where the file system is read-only
    const manifest: CheckpointManifest = {
      format: "rollstream-checkpoint-1",
      run: this.run,
      step,
      file: "state.safetensors",
      bytes: state.length,
      sha256,
      createdAt: new Date().toISOString(),
    };
    writeFileDurable(join(tmp, manifest.file), state);
    for (const x of extras) {
      mkdirSync(join(tmp, dirname(x.path)), { recursive: true });
      writeFileDurable(join(tmp, x.path), x.data);
      fsyncDir(join(tmp, dirname(x.path)));
    }
    writeFileDurable(join(tmp, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
    fsyncDir(tmp);
    if (existsSync(final)) rmSync(final, { recursive: true, force: true });
    renameSync(tmp, final);
    fsyncDir(this.root);
    return manifest;
  }

  /** Steps of complete checkpoints, newest first. */
  steps(): number[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root)
      .map((n) => /^step-(\d{8})$/.exec(n))
      .filter((m): m is RegExpExecArray => m !== null && existsSync(join(this.root, m[0], "manifest.json")))
      .map((m) => Number(m[1]))
      .sort((a, b) => b - a);
  }

  /** Reads and verifies a checkpoint; throws naming the problem when it is corrupt. */
  read(step: number): { manifest: CheckpointManifest; state: Uint8Array } {
    const dir = this.dirFor(step);
    const manifest = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as CheckpointManifest;
    if (manifest.format !== "rollstream-checkpoint-1") throw new Error(`${dir}: unknown checkpoint format ${manifest.format}`);
    const state = new Uint8Array(readFileSync(join(dir, manifest.file)));
    if (state.length !== manifest.bytes) throw new Error(`${dir}: ${manifest.file} has ${state.length} bytes, manifest says ${manifest.bytes}`);
    const sha = sha256Hex(state);
    if (sha !== manifest.sha256) throw new Error(`${dir}: checksum mismatch (file ${sha.slice(0, 12)}…, manifest ${manifest.sha256.slice(0, 12)}…)`);
    return { manifest, state };
  }

  /** The newest checkpoint that verifies; corrupt ones are skipped (and reported through onSkip). */
  latestValid(onSkip?: (step: number, err: Error) => void): { manifest: CheckpointManifest; state: Uint8Array } | null {
    for (const s of this.steps()) {
      try {
        return this.read(s);
      } catch (e) {
        onSkip?.(s, e as Error);
      }
    }
    return null;
  }

  /** Keeps the newest `keep` checkpoints. */
  prune(keep: number): number[] {
    const removed = this.steps().slice(keep);
    for (const s of removed) rmSync(this.dirFor(s), { recursive: true, force: true });
    return removed;
  }
}
