// `rollstream bench algos`: the ablation bench. Trains the demo under each recipe (the default, each filter,
// each loss and advantage setting) for the same RL wall time, with several seeds, and prints held-out greedy
// pass@1 on the eval split (the one that follows train's distribution) as mean ± std per recipe with the
// ratio to the default, measured in the same run. Each run is `rollstream train` in a child process, stopped
// with Ctrl-C (it drains) when its RL time is up; its newest checkpoint is then evaluated by `rollstream eval`.
// Recipes this build's config schema does not know are skipped and said so. Last line: one JSON object.
//
//   rollstream bench algos [--quick]      (ALGOS_RECIPES=default,nofilter  ALGOS_SEEDS=3  ALGOS_RL_SECONDS=60)
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { parseRunConfig } from "../actors/runtime/config.js";
import { StepRecordSchema } from "../streams/index.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const cli = join(root, "bin", "rollstream.js");

type Overrides = Record<string, unknown>;

/** Each recipe is a change to the demo config's `rl` section (deep-merged). */
export const RECIPES: Record<string, { what: string; rl: Overrides }> = {
  default: { what: "the demo as shipped: zero-variance filter with refill", rl: {} },
  nofilter: { what: "no filter: every group trains", rl: { filter: { zeroVariance: false } } },
  pace: { what: "staleness pacing, oldest first", rl: { staleness: "pace" } },
  mean_std: { what: "advantages divided by the group std (GRPO)", rl: { advantage: "mean_std" } },
  ppo_clip: { what: "PPO-clip loss", rl: { loss: { name: "ppo_clip", clipEps: 0.2 } } },
  dppo: { what: "DPPO binary TV trust region + d^2 KL", rl: { loss: { name: "dppo" } } },
  ipo: { what: "IPO: |p - q| > 0.1 masked + d^2 KL", rl: { loss: { name: "ipo" } } },
  gspo: { what: "sequence-level ratio (GSPO)", rl: { loss: { name: "gspo" } } },
  rloo: { what: "leave-one-out advantages", rl: { advantage: "rloo" } },
  length: { what: "overlong penalty over the last 8 tokens", rl: { lengthPenalty: { coef: 0.5, buffer: 8 } } },
};

/** Deep merge, except that a loss replaces the loss (its parameters belong to its name). */
function merge(a: unknown, b: unknown, key = ""): unknown {
  if (b === undefined) return a;
  if (key === "loss" || typeof a !== "object" || a === null || Array.isArray(a) || typeof b !== "object" || b === null || Array.isArray(b)) return b;
  const out: Record<string, unknown> = { ...(a as Record<string, unknown>) };
  for (const [k, v] of Object.entries(b)) out[k] = merge(out[k], v, k);
  return out;
}

interface RunResult {
  recipe: string;
  seed: number;
  passAt1: number;
  rlSteps: number;
  rlSeconds: number;
}

function latestCheckpoint(runDir: string): string | null {
  const dir = join(runDir, "checkpoints");
  if (!existsSync(dir)) return null;
  const steps = readdirSync(dir)
    .filter((d) => /^step-\d+$/.test(d))
    .sort();
  return steps.length ? join(dir, steps.at(-1)!) : null;
}

/** The times of the run's RL steps so far, from its steps.jsonl (a line cut short by a running write is passed over). */
function rlSteps(stepsFile: string): number[] {
  if (!existsSync(stepsFile)) return [];
  return readFileSync(stepsFile, "utf8")
    .split("\n")
    .flatMap((l) => {
      const r = StepRecordSchema.safeParse(parseJsonLine(l));
      return r.success ? [r.data.time] : [];
    });
}

function parseJsonLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return null;
  }
}

/** One training run, stopped `rlSeconds` after its first RL step; then its newest checkpoint evaluated. */
async function trainAndEval(base: Overrides, recipe: string, seed: number, rlSeconds: number, dir: string, log: (l: string) => void): Promise<RunResult> {
  const run = `algos-${recipe.replace(/_/g, "-")}-s${seed}`;
  const cfg = merge(base, {
    run,
    outDir: dir,
    seed,
    model: { seed: 1234 + seed },
    // Long enough never to end by itself: the wall-time budget ends it. Checkpoints often, so the newest is near the end.
    rl: merge(RECIPES[recipe]!.rl, { steps: 100_000 }),
    checkpoint: { interval: 5, keepLast: 2, keepVersions: 4 },
  }) as Overrides;
  const path = join(dir, `${run}.yaml`);
  writeFileSync(path, stringify(cfg));
  const env = { ...process.env };
  delete env["NATS_URL"];
  const child = spawn(process.execPath, [cli, "train", path, "--fresh", "--no-eval", "--no-dashboard"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const metrics = join(dir, run, "steps.jsonl");
  let first: number | undefined;
  for (;;) {
    const done = await Promise.race([exited.then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 500))]);
    if (done) throw new Error(`${run}: train exited before its time was up (exit ${child.exitCode}): ${stderr.split("\n").slice(-3).join(" | ")}`);
    // The RL clock starts at the first step record; after that only the clock is watched.
    if (first === undefined && rlSteps(metrics).length > 0) first = Date.now();
    if (first !== undefined && Date.now() - first >= rlSeconds * 1000) break;
  }
  child.kill("SIGINT");
  await exited;
  const times = rlSteps(metrics);
  const ckpt = latestCheckpoint(join(dir, run));
  if (!ckpt) throw new Error(`${run}: no checkpoint written`);
  const evalCfg = parseRunConfig(cfg, path);
  const r = spawnSync(
    process.execPath,
    [
      cli,
      "eval",
      evalCfg.environments[0]!.id,
      "--checkpoint",
      ckpt,
      "-n",
      String(evalCfg.eval.n),
      "-r",
      "1",
      "--temperature",
      "0",
      "--max-tokens",
      String(evalCfg.eval.maxTokens ?? evalCfg.rl.sampling.maxTokens),
      "--json",
      "--no-progress",
      "-o",
      join(dir, `${run}-eval`),
    ],
    { encoding: "utf8", env, timeout: 600_000 },
  );
  if (r.status !== 0) throw new Error(`${run}: eval failed: ${r.stderr.split("\n").slice(-3).join(" | ")}`);
  const summary = JSON.parse(r.stdout) as { passAtK: Record<string, number> };
  const passAt1 = summary.passAtK["pass@1"]!;
  const result = { recipe, seed, passAt1, rlSteps: times.length, rlSeconds: times.length > 1 ? (times.at(-1)! - times[0]!) / 1000 : 0 };
  log(`  ${recipe.padEnd(9)} seed ${seed}: pass@1 ${passAt1.toFixed(3)} after ${result.rlSteps} RL steps (${ckpt.split("/").at(-1)})`);
  rmSync(join(dir, run), { recursive: true, force: true });
  return result;
}

const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
const std = (a: number[]) => (a.length < 2 ? 0 : Math.sqrt(a.reduce((s, x) => s + (x - mean(a)) ** 2, 0) / (a.length - 1)));

export async function runAlgosBench(opts: { quick?: boolean; config?: string; log?: (l: string) => void } = {}): Promise<Record<string, unknown>> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const base = parse(readFileSync(opts.config ?? join(root, "examples", "demo.yaml"), "utf8")) as Overrides;
  const seeds = Number(process.env["ALGOS_SEEDS"] ?? (opts.quick ? 1 : 3));
  const rlSeconds = Number(process.env["ALGOS_RL_SECONDS"] ?? (opts.quick ? 15 : 60));
  const asked = (process.env["ALGOS_RECIPES"] ?? (opts.quick ? "default,nofilter" : Object.keys(RECIPES).join(","))).split(",").filter(Boolean);
  if (opts.quick) (base as { sft?: Overrides }).sft = merge((base as { sft?: Overrides }).sft, { steps: 100 }) as Overrides;
  const recipes: string[] = [];
  for (const name of asked) {
    if (!RECIPES[name]) throw new Error(`unknown recipe ${name}; the recipes: ${Object.keys(RECIPES).join(", ")}`);
    try {
      parseRunConfig(merge(base, { rl: RECIPES[name]!.rl }), name);
      recipes.push(name);
    } catch (e) {
      log(`recipe ${name} (${RECIPES[name]!.what}) skipped: this build's config does not take it (${(e as Error).message.split("\n")[1]?.trim() ?? ""})`);
    }
  }
  if (!recipes.includes("default")) recipes.unshift("default");
  const dir = mkdtempSync(join(tmpdir(), "rs-algos-"));
  log(`bench algos: ${recipes.length} recipes x ${seeds} seeds, ${rlSeconds} s of RL each after the demo's SFT; held-out greedy pass@1 on the eval split`);
  const results: RunResult[] = [];
  try {
    // Seeds outer, recipes inner: a drift in this machine's speed spreads over every recipe alike.
    for (let s = 0; s < seeds; s++) for (const recipe of recipes) results.push(await trainAndEval(base, recipe, s, rlSeconds, dir, log));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const rows = recipes.map((recipe) => {
    const rs = results.filter((r) => r.recipe === recipe);
    return {
      recipe,
      what: RECIPES[recipe]!.what,
      mean: mean(rs.map((r) => r.passAt1)),
      std: std(rs.map((r) => r.passAt1)),
      steps: mean(rs.map((r) => r.rlSteps)),
    };
  });
  const baseline = rows.find((r) => r.recipe === "default")!.mean;
  log("");
  log("| recipe | held-out pass@1 (mean ± std) | vs default | RL steps in the time |");
  log("|---|---|---|---|");
  for (const r of rows)
    log(`| ${r.recipe} (${r.what}) | ${r.mean.toFixed(3)} ± ${r.std.toFixed(3)} | ${(r.mean / baseline).toFixed(3)}x | ${r.steps.toFixed(0)} |`);
  const figures = {
    seeds,
    rlSeconds,
    recipes: Object.fromEntries(
      rows.map((r) => [
        r.recipe,
        { passAt1Mean: +r.mean.toFixed(4), passAt1Std: +r.std.toFixed(4), ratioToDefault: +(r.mean / baseline).toFixed(3), rlSteps: +r.steps.toFixed(1) },
      ]),
    ),
  };
  console.log(JSON.stringify(figures));
  return figures;
}
