// `rollstream bench loop`: seconds per RL step of the demo config with maxAsyncLevel 2 against the
// same run with maxAsyncLevel 0 (fully synchronous: inference waits for every learner step), in one
// process, one after the other. Last line: one JSON object.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { train } from "../cli/commands/train.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

async function secondsPerStep(base: Record<string, unknown>, asyncLevel: number, steps: number, dir: string): Promise<number> {
  const cfg = structuredClone(base) as Record<string, any>;
  cfg.run = `loopbench-a${asyncLevel}`;
  cfg.outDir = dir;
  cfg.rl = { ...cfg.rl, steps, maxAsyncLevel: asyncLevel };
  if (cfg.sft) cfg.sft = { ...cfg.sft, steps: 20 };
  const path = join(dir, `a${asyncLevel}.yaml`);
  writeFileSync(path, stringify(cfg));
  const code = await train(path, { fresh: true, eval: false });
  if (code !== 0) throw new Error(`loop bench run with maxAsyncLevel ${asyncLevel} failed (exit ${code})`);
  const times = readFileSync(join(dir, cfg.run, "metrics.jsonl"), "utf8").split("\n").filter(Boolean)
    .map((l) => JSON.parse(l)).filter((e) => e.actor === "learner" && e.kind === "step").map((e) => e.time as number).sort((a, b) => a - b);
  if (times.length < 2) throw new Error("too few steps recorded");
  // Skip the first step: it includes inference start-up.
  return (times[times.length - 1]! - times[0]!) / 1000 / (times.length - 1);
}

export async function runLoopBench(opts: { quick?: boolean; config?: string } = {}): Promise<Record<string, number>> {
  const base = parse(readFileSync(opts.config ?? join(root, "examples", "demo.yaml"), "utf8")) as Record<string, unknown>;
  const dir = mkdtempSync(join(tmpdir(), "rs-loopbench-"));
  const steps = opts.quick ? 6 : 12;
  const sync = await secondsPerStep(base, 0, steps, dir);
  const asyncS = await secondsPerStep(base, 2, steps, dir);
  const figures = { steps, secondsPerStepAsync0: sync, secondsPerStepAsync2: asyncS, speedupAsync2VsAsync0: sync / asyncS };
  console.log("\nmaxAsyncLevel | s/step\n" + `0             | ${sync.toFixed(3)}\n2             | ${asyncS.toFixed(3)}\nspeedup (0 -> 2): ${(sync / asyncS).toFixed(2)}x`);
  console.log(JSON.stringify(figures));
  return figures;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runLoopBench({ quick: process.argv.includes("--quick") });
  process.exit(0);
}
