import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RolloutResult } from "../api/rollout.js";
import type { EvalIdentity, EvalMetadata, EvalRecord } from "./records.js";

/** A finished rollout waiting for the rest of its group to be scored (pending.jsonl). */
export type PendingRollout = { example: number; rollout: number; result: RolloutResult } | { example: number; rollout: number; error: string };

/**
 * The files of one eval run, written as it goes so an interrupted run resumes:
 *   results.jsonl  one scored (example, rollout) per line; a group's lines are appended together
 *   pending.jsonl  finished but not yet scored rollouts (group scoring needs the whole group)
 *   metadata.json  settings, progress and the latest summary, replaced atomically
 * A torn last line (a crash mid-append) is cut off on load, and a group with only some of its lines is
 * dropped so it is scored again as a whole.
 */
export class ResultsStore {
  readonly resultsPath: string;
  readonly pendingPath: string;
  readonly metadataPath: string;

  constructor(readonly dir: string) {
    this.resultsPath = join(dir, "results.jsonl");
    this.pendingPath = join(dir, "pending.jsonl");
    this.metadataPath = join(dir, "metadata.json");
  }

  /** Opens (creating or, with overwrite, clearing) the folder; refuses one that holds a different eval. */
  open(
    identity: EvalIdentity,
    opts: { overwrite?: boolean; rolloutsPerExample: number },
  ): { records: EvalRecord[]; pending: PendingRollout[]; metadata: EvalMetadata | null } {
    mkdirSync(this.dir, { recursive: true });
    if (opts.overwrite) for (const p of [this.resultsPath, this.pendingPath, this.metadataPath]) rmSync(p, { force: true });
    let metadata: EvalMetadata | null = null;
    if (existsSync(this.metadataPath)) {
      metadata = JSON.parse(readFileSync(this.metadataPath, "utf8")) as EvalMetadata;
      const diffs = (Object.keys(identity) as Array<keyof EvalIdentity>).filter((k) => JSON.stringify(metadata![k]) !== JSON.stringify(identity[k]));
      if (diffs.length > 0) {
        const what = diffs.map((k) => `${k}: ${JSON.stringify(metadata![k])} there, ${JSON.stringify(identity[k])} now`).join("; ");
        throw new Error(`${this.dir} holds an eval with other settings (${what}); use another output folder or overwrite it`);
      }
    }
    const records = readJsonl<EvalRecord>(this.resultsPath);
    const byExample = new Map<number, EvalRecord[]>();
    for (const r of records) byExample.set(r.example, [...(byExample.get(r.example) ?? []), r]);
    const whole = records.filter((r) => new Set(byExample.get(r.example)!.map((x) => x.rollout)).size === opts.rolloutsPerExample);
    if (whole.length !== records.length) writeFileSync(this.resultsPath, whole.map((r) => JSON.stringify(r) + "\n").join(""));
    const scored = new Set(whole.map((r) => r.example));
    const pending = readJsonl<PendingRollout>(this.pendingPath).filter((p) => !scored.has(p.example));
    return { records: whole, pending, metadata };
  }

  appendPending(p: PendingRollout): void {
    appendFileSync(this.pendingPath, JSON.stringify(p) + "\n");
  }

  appendRecords(records: EvalRecord[]): void {
    appendFileSync(this.resultsPath, records.map((r) => JSON.stringify(r) + "\n").join(""));
  }

  /** Keeps only rollouts whose group is still unscored. */
  compactPending(stillPending: PendingRollout[]): void {
    if (stillPending.length === 0) rmSync(this.pendingPath, { force: true });
    else writeAtomic(this.pendingPath, stillPending.map((p) => JSON.stringify(p) + "\n").join(""));
  }

  writeMetadata(m: EvalMetadata): void {
    writeAtomic(this.metadataPath, JSON.stringify(m, null, 2) + "\n");
  }
}

function writeAtomic(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

function readJsonl<T>(path: string): T[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, "utf8");
  const end = text.lastIndexOf("\n") + 1;
  if (end < text.length) truncateSync(path, Buffer.byteLength(text.slice(0, end)));
  const out: T[] = [];
  for (const line of text.slice(0, end).split("\n")) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as T);
    } catch {
      // A corrupt line is a lost result: that pair simply runs again.
    }
  }
  return out;
}
