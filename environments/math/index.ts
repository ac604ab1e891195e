import { z } from "zod";
import {
  BoxedParser,
  buildPrompt,
  createEnvironment,
  listDataset,
  Rubric,
  ThinkParser,
  type DatasetRow,
  type FewShotExample,
  type LoadEnvironment,
} from "../public.js";
import { parseEnvArgs } from "../public.js";
import pkg from "./package.json" with { type: "json" };
import { loadProblems, splitProblems, type MathProblem } from "./problem-set.js";
import { sharedMathVerifier } from "./verifier.js";

export const argsSchema = z
  .object({
    /** JSON or JSONL file of problems {id, problem, answer, solution?, split?}; default: the built-in set. */
    problemsFile: z.string().min(1).optional(),
    /** Appended to each problem. */
    instruction: z.string().default("Put the final answer in \\boxed{}."),
    system: z.string().min(1).optional(),
    /** Reasoning models: expect <think>…</think> before the answer. */
    think: z.boolean().default(false),
    /** Worked train problems shown before the question. */
    fewShot: z.number().int().min(0).max(8).default(0),
    /** Time limit for one equivalence check. */
    verifyTimeoutMs: z.number().int().positive().default(5_000),
  })
  .strict();

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const splits = splitProblems(loadProblems(args.problemsFile));
  const parser = args.think ? new ThinkParser(new BoxedParser()) : new BoxedParser();
  const verifier = sharedMathVerifier();

  const question = (p: MathProblem) => (args.instruction ? `${p.problem}\n${args.instruction}` : p.problem);
  const target = (p: MathProblem) => {
    const answer = `The answer is $\\boxed{${p.answer}}$.`;
    const work = p.solution ?? "";
    return args.think ? `<think>${work}</think>\n${answer}` : work ? `${work}\n${answer}` : answer;
  };
  const fewShot: FewShotExample[] = splits.train.slice(0, args.fewShot).map((p) => ({ user: question(p), assistant: target(p) }));
  const toRow = (p: MathProblem): DatasetRow => ({
    id: p.id,
    prompt: buildPrompt(question(p), { system: args.system, fewShot }),
    answer: p.answer,
    info: { topic: p.topic ?? "", ...(p.solution ? { solution: p.solution } : {}) },
  });
  const byId = new Map([...splits.train, ...splits.eval].map((p) => [p.id, p]));

  const rubric = new Rubric({ parser, timeoutMs: args.verifyTimeoutMs + 30_000 })
    .reward("correct", async ({ parsed, answer }) => {
      if (!parsed?.answer) return 0;
      return (await verifier.verify(answer, parsed.answer, args.verifyTimeoutMs)).equal;
    })
    .metric("format", ({ completion }) => parser.formatReward(completion));

  return createEnvironment({
    name: pkg.name,
    version: pkg.version,
    dataset: (split) => listDataset(splits[split].map(toRow)),
    rubric,
    sftTarget: (row) => {
      const p = byId.get(row.id);
      return p ? target(p) : `The answer is $\\boxed{${row.answer}}$.`;
    },
  });
};
