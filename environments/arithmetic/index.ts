import { z } from "zod";
import {
  createEnvironment,
  generatorDataset,
  Parser,
  Rubric,
  type Dataset,
  type DatasetRow,
  type DatasetSplit,
  type Environment,
  type LoadEnvironment,
  type ParseResult,
} from "../public.js";
import { parseEnvArgs } from "../public.js";
import pkg from "./package.json" with { type: "json" };
import { makeEvalSplit, makeHardSplit, problemText, solve, trainProblem, type ArithmeticProblem, type ProblemSpace, type ProblemSplit } from "./problem.js";
import { carryDroppingSolution, workedSolution } from "./worked.js";

/** A deterministic number in [0, 1) from a string: FNV-1a, then a murmur3 finaliser so that
 *  neighbouring ids (train-1, train-2) do not give correlated values. */
function unitHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return (h >>> 0) / 0x1_0000_0000;
}

export const argsSchema = z
  .object({
    /** Operands have 1..digits digits. */
    digits: z.number().int().min(1).max(7).default(2),
    ops: z
      .array(z.enum(["+", "-", "*"]))
      .min(1)
      .default(["+"]),
    seed: z.number().int().default(0),
    /**
     * Size of the eval split (the train distribution on problems train never sees) and of the "hard" split
     * (two multi-digit operands with a carry; digits >= 2); smaller when the space has fewer such problems.
     */
    evalSize: z.number().int().min(1).default(200),
    /** SFT targets show a column-by-column worked solution before the answer. */
    worked: z.boolean().default(false),
    /**
     * Share of SFT targets written by a weak teacher that forgets carries (worked mode, "+" only):
     * above 0.5 the SFT model's greedy answer drops carries, and RL against the verifier must fix it.
     */
    teacherCarryDropRate: z.number().min(0).max(1).default(0),
    /** Optional system prompt (none by default: the model's context is tiny). */
    system: z.string().min(1).optional(),
  })
  .strict();
export type ArithmeticArgs = z.output<typeof argsSchema>;

/** The answer is the last integer in the reply (so a worked solution may precede it). */
export class LastIntegerParser extends Parser {
  readonly name = "last-integer";
  constructor(private readonly worked: boolean) {
    super();
  }
  parseText(text: string): ParseResult {
    const all = text.match(/(?<!\d)-?\d+/g);
    return all ? { answer: String(Number(all[all.length - 1])) } : { answer: null, reason: "no integer in reply" };
  }
  /** Plain mode: the reply is just an integer. Worked mode: `step;step;...;answer` and nothing else. */
  formatScore(text: string): number {
    const t = text.trim();
    return (this.worked ? /^(?:[\d+\-*]+=\d+;)*-?\d+$/ : /^-?\d+$/).test(t) ? 1 : 0;
  }
}

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const space: ProblemSpace = { digits: args.digits, ops: args.ops, seed: args.seed };
  const parser = new LastIntegerParser(args.worked);

  const row = (split: DatasetSplit | "hard", index: number, p: ArithmeticProblem): DatasetRow => ({
    id: `${split}-${index}`,
    prompt: [...(args.system ? [{ role: "system" as const, content: args.system }] : []), { role: "user", content: problemText(p) }],
    answer: String(solve(p)),
    info: { a: p.a, op: p.op, b: p.b },
  });

  const rubric = new Rubric({ parser, timeoutMs: 5_000 })
    .reward("correct", ({ parsed, answer }) => parsed?.answer === answer, 1.0)
    .metric("format", ({ completion }) => parser.formatReward(completion));

  // Held-out splits are built on first use: actors that only train never pay for them.
  const heldOut = (name: "eval" | "hard", split: ProblemSplit) => generatorDataset(split.size, (i) => row(name, i, split.problem(i)));
  const hardSplit = () => {
    const split = makeHardSplit(space, args.evalSize);
    if (!split) throw new Error(`arithmetic: no hard problem in the eval partition (digits=${args.digits}, seed=${args.seed})`);
    return heldOut("hard", split);
  };
  const extraSplits: Record<string, () => Dataset> = args.digits >= 2 ? { hard: hardSplit } : {};
  const env: Environment = createEnvironment({
    name: pkg.name,
    version: pkg.version,
    dataset: (split) =>
      split === "train"
        ? generatorDataset(Number.POSITIVE_INFINITY, (i) => row("train", i, trainProblem(space, i)))
        : heldOut("eval", makeEvalSplit(space, args.evalSize)),
    extraSplits,
    rubric,
    sftTarget: (r) => {
      const p = { a: Number(r.info["a"]), op: r.info["op"] as ArithmeticProblem["op"], b: Number(r.info["b"]) };
      if (!args.worked) return String(solve(p));
      // Each SFT example draws its own teacher, deterministically from the row id.
      return args.teacherCarryDropRate > 0 && unitHash(`${args.seed}:${r.id}`) < args.teacherCarryDropRate ? carryDroppingSolution(p) : workedSolution(p);
    },
  });
  return env;
};
