// `rollstream bench loop`: seconds per RL step of the demo config with maxAsyncLevel 2 against the
// same run with maxAsyncLevel 0 (fully synchronous: inference waits for every learner step), in one
// process, alternating, two runs of each. Last line: one JSON object.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { train } from "../cli/commands/train.js";
import { StepRecordSchema } from "../streams/index.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

async function secondsPerStep(base: Record<string, unknown>, asyncLevel: number, steps: number, dir: string): Promise<number> {
  const cfg = structuredClone(base) as { run?: string; outDir?: string; rl?: Record<string, unknown>; sft?: Record<string, unknown> };
  cfg.run = `loopbench-a${asyncLevel}`;
  cfg.outDir = dir;
  cfg.rl = { ...cfg.rl, steps, maxAsyncLevel: asyncLevel };
  if (cfg.sft) cfg.sft = { ...cfg.sft, steps: 20 };
  const path = join(dir, `a${asyncLevel}.yaml`);
  writeFileSync(path, stringify(cfg));
  const code = await train(path, { fresh: true, eval: false });
  if (code !== 0) throw new Error(`loop bench run with maxAsyncLevel ${asyncLevel} failed (exit ${code})`);
  const times = readFileSync(join(dir, cfg.run, "steps.jsonl"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => StepRecordSchema.parse(JSON.parse(l)).time)
    .sort((a, b) => a - b);
  if (times.length < 2) throw new Error("too few steps recorded");
  // Skip the first step: it includes inference start-up.
  return (times[times.length - 1]! - times[0]!) / 1000 / (times.length - 1);
}

export async function runLoopBench(opts: { quick?: boolean; config?: string } = {}): Promise<Record<string, number>> {
  const base = parse(readFileSync(opts.config ?? join(root, "examples", "demo.yaml"), "utf8")) as Record<string, unknown>;
  const dir = mkdtempSync(join(tmpdir(), "rs-loopbench-"));
  const steps = opts.quick ? 6 : 24;
  // Rounds alternate the order (0,2 then 2,0): this machine's speed drifts, and a drift would
  // otherwise always favour whichever level runs second.
  const rounds = opts.quick ? 1 : 2;
  const sync: number[] = [];
  const asyncS: number[] = [];
  for (let r = 0; r < rounds; r++) {
    for (const level of r % 2 === 0 ? [0, 2] : [2, 0]) (level === 0 ? sync : asyncS).push(await secondsPerStep(base, level, steps, dir));
  }
  const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
  const s0 = mean(sync);
  const s2 = mean(asyncS);
  const figures = {
    steps,
    rounds,
    secondsPerStepAsync0: +s0.toFixed(4),
    secondsPerStepAsync2: +s2.toFixed(4),
    speedupAsync2VsAsync0: +(s0 / s2).toFixed(3),
    speedupPerRound: sync.map((x, i) => +(x / asyncS[i]!).toFixed(3)),
  };
  console.log(
    "\nmaxAsyncLevel | s/step (mean of " +
      rounds +
      " runs of " +
      steps +
      " steps)\n" +
      `0             | ${s0.toFixed(3)}  (${sync.map((x) => x.toFixed(3)).join(", ")})\n` +
      `2             | ${s2.toFixed(3)}  (${asyncS.map((x) => x.toFixed(3)).join(", ")})\n` +
      `speedup (0 -> 2): ${(s0 / s2).toFixed(2)}x`,
  );
  console.log(JSON.stringify(figures));
  return figures as unknown as Record<string, number>;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runLoopBench({ quick: process.argv.includes("--quick") });
  process.exit(0);
}
