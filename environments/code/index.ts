import { z } from "zod";
import { buildPrompt, createEnvironment, listDataset, Parser, Rubric, type DatasetRow, type LoadEnvironment, type ParseResult } from "../public.js";
import { parseEnvArgs } from "../public.js";
import pkg from "./package.json" with { type: "json" };
import builtin from "./problems.json" with { type: "json" };
import { runHiddenTests, type TestRun } from "./harness.js";

/** The code in the last ```python (or bare ```) block of a reply. */
export class CodeBlockParser extends Parser {
  readonly name = "code-block";
  parseText(text: string): ParseResult {
    const blocks = [...text.matchAll(/```(?:python|py)?[ \t]*\n([\s\S]*?)```/g)];
    const last = blocks[blocks.length - 1];
    if (!last) return { answer: null, reason: "no ```python code block" };
    const code = last[1]!.trim();
    return code ? { answer: code } : { answer: null, reason: "empty code block" };
  }
  formatScore(text: string): number {
    return this.parseText(text).answer ? 1 : 0;
  }
}

const problemSchema = z.object({
  id: z.string(),
  split: z.enum(["train", "eval"]),
  entryPoint: z.string(),
  signature: z.string(),
  description: z.string(),
  tests: z.array(z.string()).min(1),
  solution: z.string(),
});
type CodeProblem = z.output<typeof problemSchema>;

export const argsSchema = z
  .object({
    system: z.string().min(1).optional(),
    /** Sandbox limits for one test run. */
    wallMs: z.number().int().positive().default(10_000),
    memoryMb: z.number().int().positive().default(512),
  })
  .strict();

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const problems = z.array(problemSchema).parse(builtin.problems);
  const parser = new CodeBlockParser();
  const byId = new Map(problems.map((p) => [p.id, p]));

  const toRow = (p: CodeProblem): DatasetRow => ({
    id: p.id,
    prompt: buildPrompt(`Write a Python function \`${p.signature}\` that ${p.description}\nReply with the function in a \`\`\`python code block.`, {
      system: args.system,
    }),
    answer: "",
    info: { entryPoint: p.entryPoint, tests: p.tests },
  });

  const rubric = new Rubric({ parser, timeoutMs: args.wallMs + 30_000 });
  const tests = (inp: Parameters<Parameters<typeof rubric.reward>[1]>[0]): Promise<TestRun> =>
    inp.memo("tests", async () => {
      if (!inp.sandbox) throw new Error("the code environment needs a CodeSandbox, and none was injected");
      const code = inp.parsed?.answer;
      const hidden = inp.info["tests"] as string[];
      if (!code) return { passed: 0, total: hidden.length, error: "no code" };
      return runHiddenTests(inp.sandbox, code, hidden, { wallMs: args.wallMs, memoryMb: args.memoryMb });
    });
  rubric
    .reward("passed", async (inp) => {
      const r = await tests(inp);
      return r.total > 0 && r.passed === r.total;
    })
    .metric("pass_rate", async (inp) => {
      const r = await tests(inp);
      return r.total > 0 ? r.passed / r.total : 0;
    })
    .metric("format", ({ completion }) => parser.formatReward(completion))
    // 1 when the tests ran to the end; otherwise throws so the reason (load error, timeout) is recorded.
    .metric("tests_completed", async (inp) => {
      const r = await tests(inp);
      if (r.error) throw new Error(r.error);
      return 1;
    });

  return createEnvironment({
    name: pkg.name,
    version: pkg.version,
    needsSandbox: true, // the hidden tests run in the sandbox
    dataset: (split) => listDataset(problems.filter((p) => p.split === split).map(toRow)),
    rubric,
    sftTarget: (row) => {
      const p = byId.get(row.id);
      if (!p) throw new Error(`code: no reference solution for row ${row.id}`);
      return `\`\`\`python\n${p.solution}\n\`\`\``;
    },
  });
};
