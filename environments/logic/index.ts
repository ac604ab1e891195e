import { z } from "zod";
import { buildPrompt, createEnvironment, generatorDataset, Rubric, XMLParser, type DatasetRow, type DatasetSplit, type LoadEnvironment } from "../public.js";
import { parseEnvArgs } from "../public.js";
import pkg from "./package.json" with { type: "json" };
import { rngFor } from "../public.js";
import { stratifiedSplit } from "../public.js";
import { LEVELS, puzzleFor, puzzleStratum, verifyCountdown, type CountdownPuzzle } from "./countdown.js";

export const argsSchema = z
  .object({
    /** 1: three numbers up to 10; 2: four up to 25; 3: two large + three small numbers, three-digit target. */
    difficulty: z.union([z.literal(1), z.literal(2), z.literal(3)]).default(1),
    seed: z.number().int().default(0),
    /** Eval split size: puzzles train never sees, in train's mix of target sizes and operations. */
    evalSize: z.number().int().min(1).default(200),
    system: z.string().min(1).optional(),
  })
  .strict();

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const level = LEVELS[args.difficulty];
  const parser = new XMLParser(["answer"]);

  // Level 1 has a few thousand puzzles, some far likelier than others: which ones hash into eval tilts an
  // unstratified eval split (tested). Built on first use from 10,000 train rows.
  let evalPuzzles: CountdownPuzzle[] | undefined;
  const evalPuzzle = (index: number): CountdownPuzzle => {
    evalPuzzles ??= stratifiedSplit({
      size: args.evalSize,
      stratum: puzzleStratum,
      reference: (i) => puzzleFor(args.seed, "train", i, level),
      referenceCount: 10_000,
      candidate: (i) => puzzleFor(args.seed, "eval", i, level),
      rng: rngFor(args.seed, "eval-order"),
    });
    return evalPuzzles[index]!;
  };
  const toRow = (split: DatasetSplit, index: number): DatasetRow => {
    const p: CountdownPuzzle = split === "train" ? puzzleFor(args.seed, split, index, level) : evalPuzzle(index);
    const q = `Using the numbers ${p.numbers.join(", ")}, make ${p.target}. Use + - * / and each number exactly once. Give the expression in <answer></answer>.`;
    return {
      id: `${split}-${index}`,
      prompt: buildPrompt(q, { system: args.system }),
      answer: String(p.target),
      info: { numbers: p.numbers, target: p.target, solution: p.solution, difficulty: args.difficulty },
    };
  };

  const verdict = (answer: string | null | undefined, info: Record<string, unknown>) =>
    answer ? verifyCountdown(answer, info["numbers"] as number[], info["target"] as number) : null;
  const rubric = new Rubric({ parser, timeoutMs: 5_000 })
    .reward("correct", ({ parsed, info }) => verdict(parsed?.answer, info)?.correct ?? false)
    .metric("valid_numbers", ({ parsed, info }) => verdict(parsed?.answer, info)?.validNumbers ?? false)
    .metric("format", ({ completion }) => parser.formatReward(completion));

  return createEnvironment({
    name: pkg.name,
    version: pkg.version,
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : args.evalSize, (i) => toRow(split, i)),
    rubric,
    sftTarget: (row) => parser.format({ answer: String(row.info["solution"]) }),
  });
};
