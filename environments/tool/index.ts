import { z } from "zod";
import {
  buildPrompt,
  createEnvironment,
  defineTool,
  generatorDataset,
  lastAssistantText,
  Rubric,
  toolRollout,
  XMLParser,
  type DatasetRow,
  type DatasetSplit,
  type LoadEnvironment,
} from "../public.js";
import { parseEnvArgs } from "../public.js";
import { formatRational, parseRationalExpr } from "../public.js";
import pkg from "./package.json" with { type: "json" };
import { taskFor } from "./tasks.js";

export const lookupTool = defineTool({
  name: "lookup",
  description: "Returns the population of a city.",
  parameters: z.object({ city: z.string().min(1) }),
  run: ({ city }, ctx) => {
    const table = ctx.row.info["table"] as Record<string, number>;
    const key = Object.keys(table).find((k) => k.toLowerCase() === city.trim().toLowerCase());
    if (!key) throw new Error(`unknown city "${city}"`);
    return table[key];
  },
});

export const calculatorTool = defineTool({
  name: "calculator",
  description: "Evaluates an arithmetic expression with + - * / ^ and parentheses, exactly.",
  parameters: z.object({ expression: z.string().min(1).max(500) }),
  run: ({ expression }) => formatRational(parseRationalExpr(expression).value),
});

export const argsSchema = z
  .object({
    seed: z.number().int().default(0),
    evalSize: z.number().int().min(1).default(100),
    maxTurns: z.number().int().min(1).max(32).default(8),
    system: z.string().min(1).optional(),
    /** How the model writes tool calls: "auto" = the chat template's (Qwen3: <tool_call>), else rollstream's <tool>. */
    toolFormat: z.enum(["auto", "rollstream", "hermes"]).default("auto"),
    /** The final messages' <think> block: "strip" scores the reply after it (the reasoning kept aside), "keep" the whole text. */
    reasoning: z.enum(["keep", "strip"]).default("strip"),
  })
  .strict();

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const parser = new XMLParser(["answer"]);
  const tools = [lookupTool, calculatorTool];

  const toRow = (split: DatasetSplit, index: number): DatasetRow => {
    const t = taskFor(args.seed, split, index);
    return {
      id: `${split}-${index}`,
      prompt: buildPrompt(`${t.question} Look the numbers up; give the final number in <answer></answer>.`, { system: args.system }),
      answer: String(t.answer),
      info: { table: t.table, needed: t.needed },
    };
  };

  const rubric = new Rubric({ parser, timeoutMs: 5_000 })
    .reward("correct", ({ parsed, answer }) => parsed?.answer?.replace(/[,\s]/g, "") === answer)
    // Format of the final reply only: the tool-calling turns have their own protocol.
    .metric("format", ({ completion }) => parser.formatScore(lastAssistantText(completion)))
    // Did the model look up every city it needed (rather than guess)?
    .metric("looked_up", ({ completion, info }) => {
      const asked = completion.filter((m) => m.role === "tool" && m.name === "lookup" && !m.content.startsWith("error:")).length;
      return Math.min(1, asked / (info["needed"] as string[]).length);
    });

  return createEnvironment({
    name: pkg.name,
    version: pkg.version,
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : args.evalSize, (i) => toRow(split, i)),
    rubric,
    rollout: (ctx, row) => toolRollout(ctx, row, { tools, maxTurns: args.maxTurns, format: args.toolFormat, reasoning: args.reasoning }),
  });
};
