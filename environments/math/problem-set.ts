import { readFileSync } from "node:fs";
import { z } from "zod";
import builtin from "./problems.json" with { type: "json" };

export const problemSchema = z.object({
  id: z.string().min(1),
  problem: z.string().min(1),
  /** Gold answer in LaTeX (what \boxed{} should contain). */
  answer: z.string().min(1),
  /** A short worked solution for SFT targets and few-shot examples. */
  solution: z.string().optional(),
  split: z.enum(["train", "eval"]).optional(),
  topic: z.string().optional(),
});
export type MathProblem = z.output<typeof problemSchema>;

/** The built-in set, or a JSON ({problems: [...]} or [...]) / JSONL file of problems. */
export function loadProblems(file?: string): MathProblem[] {
  let raw: unknown[];
  let where = "built-in problems.json";
  if (file) {
    where = file;
    const text = readFileSync(file, "utf8");
    if (file.endsWith(".jsonl")) {
      raw = text
        .split("\n")
        .filter((l) => l.trim())
        .map((l, i) => {
          try {
            return JSON.parse(l) as unknown;
          } catch (err) {
            throw new Error(`${file}:${i + 1}: invalid JSON: ${(err as Error).message}`);
          }
        });
    } else {
      const v = JSON.parse(text) as unknown;
      raw = Array.isArray(v) ? v : ((v as { problems?: unknown[] }).problems ?? []);
    }
  } else raw = builtin.problems;
  const out = raw.map((p, i) => {
    const r = problemSchema.safeParse(p);
    if (!r.success) throw new Error(`${where}: problem ${i} is invalid: ${r.error.issues.map((x) => `${x.path.join(".")}: ${x.message}`).join("; ")}`);
    return r.data;
  });
  if (out.length === 0) throw new Error(`${where}: no problems`);
  return out;
}

/** Problems without a split: every fifth goes to eval, so the splits stay disjoint. */
export function splitProblems(problems: MathProblem[]): { train: MathProblem[]; eval: MathProblem[] } {
  const train: MathProblem[] = [];
  const evalSet: MathProblem[] = [];
  problems.forEach((p, i) => ((p.split ?? (i % 5 === 4 ? "eval" : "train")) === "eval" ? evalSet : train).push(p));
  return { train, eval: evalSet };
}
