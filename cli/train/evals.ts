// How `train` says the evaluator's held-out results: a line per evaluated version as it arrives (kept in
// runs/<run>/eval.json), and at the end the curve and the figures before and after RL. A version the evaluator
// skipped (its weights gone) is said as "skipped (why)" wherever it appears, never as a figure: its record in KV
// carries zeros only because the schema wants numbers, and eval.json leaves them out.
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RunConfig } from "../../actors/runtime/config.js";
import { isNoRoomOnDisk, StateKeys, type HeldOutResult, type RunState } from "../../streams/index.js";
import type { DiskFullWatcher } from "../../deploy/local/append-log.js";

/** The evaluator's results, each version said once as it arrives, and all of them kept in runs/<run>/eval.json. */
export class EvalFeed {
  private readonly shown = new Set<string>();
  /** eval.json could not be written for want of room: written again at the next show(). */
  private unsaved = false;

  constructor(
    private readonly state: RunState,
    private readonly runDir: string,
    private readonly say: (line: string) => void,
    private readonly disk?: DiskFullWatcher,
    /** Repairs eval.results when it holds a bad value (run-state.ts), so the results read on; absent: the error is thrown. */
    private readonly repair?: { handle(e: unknown): Promise<boolean> },
  ) {}

  async show(): Promise<Record<string, HeldOutResult>> {
    const results = await this.read();
    let fresh = false;
    for (const [v, r] of Object.entries(results).sort(([a], [b]) => Number(a) - Number(b))) {
      if (this.shown.has(v)) continue;
      this.shown.add(v);
      fresh = true;
      this.say(
        r.skipped
          ? `held-out evaluation of v${v}: skipped (${r.skipped})`
          : `held-out pass@1 at v${v}: ${r.passAt1.toFixed(3)} on ${r.n} problems${passAtKText(r)}${splitsText(r)} (${r.seconds.toFixed(1)} s)`,
      );
    }
    if (fresh || this.unsaved) this.save(results);
    return results;
  }

  private async read(): Promise<Record<string, HeldOutResult>> {
    try {
      return (await this.state.get(StateKeys.evalResults)) ?? {};
    } catch (e) {
      if (!(await this.repair?.handle(e))) throw e;
      return (await this.state.get(StateKeys.evalResults)) ?? {};
    }
  }

  /** Whole or not at all (a temp file renamed); a full disk is said once and the write tried again later. */
  private save(results: Record<string, HeldOutResult>): void {
    const path = join(this.runDir, "eval.json");
    try {
      writeFileSync(`${path}.tmp`, JSON.stringify(withoutSkippedFigures(results), null, 2) + "\n");
      renameSync(`${path}.tmp`, path);
      if (this.unsaved) this.disk?.back(path, 0, 0);
      this.unsaved = false;
    } catch (e) {
      if (!isNoRoomOnDisk(e)) throw e;
      if (!this.unsaved) this.disk?.full(path, e as Error);
      this.unsaved = true;
    }
  }
}

/** The results as eval.json keeps them: a skipped version as its version and why, with no figures to misread. */
export function withoutSkippedFigures(results: Record<string, HeldOutResult>): Record<string, HeldOutResult | { version: number; skipped: string }> {
  return Object.fromEntries(Object.entries(results).map(([v, r]) => [v, r.skipped ? { version: r.version, skipped: r.skipped } : r]));
}

/** A skipped version in a short place (the curve): its reason up to the first colon. */
function skippedShort(r: HeldOutResult): string {
  return `skipped (${(r.skipped ?? "").split(":")[0]})`;
}

/** Held-out splits other than eval (arithmetic's hard), said beside the eval split's figure. */
function splitsText(r: HeldOutResult): string {
  return Object.entries(r.splits ?? {})
    .map(([name, s]) => `; ${name} split ${s.passAt1.toFixed(3)} on ${s.n}`)
    .join("");
}

function passAtKText(r: HeldOutResult): string {
  const ks = Object.entries(r.passAtK);
  return ks.length ? `, sampled ${ks.map(([k, v]) => `${k} ${v.toFixed(3)}`).join(" ")}` : "";
}

/** The eval curve (greedy pass@1 per evaluated version), then before and after RL. */
export function printSummary(config: RunConfig, results: Record<string, HeldOutResult>): void {
  const versions = Object.keys(results)
    .map(Number)
    .sort((a, b) => a - b);
  const lines = ["held-out evaluation (greedy pass@1 by policy version):"];
  const point = (r: HeldOutResult) => (r.skipped ? skippedShort(r) : r.passAt1.toFixed(3));
  if (versions.length > 2) lines.push(`  curve     ${versions.map((v) => `v${v} ${point(results[String(v)]!)}`).join("  ")}`);
  const line = (label: string, r?: HeldOutResult) => {
    if (!r) return `  ${label.padEnd(10)} (not evaluated)`;
    if (r.skipped) return `  ${label.padEnd(10)} skipped (${r.skipped})  (policy v${r.version})`;
    return `  ${label.padEnd(10)} pass@1 ${r.passAt1.toFixed(3)}  reward ${r.rewardMean.toFixed(3)}${passAtKText(r)}${splitsText(r)}  (n=${r.n}, policy v${r.version})`;
  };
  const first = results["0"];
  const last = results[String(config.rl.steps)];
  lines.push(line(config.sft ? "after SFT" : "at start", first), line("after RL", last));
  if (first && last && !first.skipped && !last.skipped) {
    const d = last.passAt1 - first.passAt1;
    lines.push(`  RL changed pass@1 by ${d >= 0 ? "+" : ""}${d.toFixed(3)}`);
  }
  process.stdout.write(lines.join("\n") + "\n");
}
