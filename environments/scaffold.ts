import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

/**
 * `rollstream env init <name>`: a new environment module in <root>/environments/<name> (package.json +
 * index.ts with a complete small environment) and its test in <root>/test/environments/<name>.test.ts.
 * The project build compiles it like the built-ins, and the registry finds it as <name>@0.1.0.
 */
export function scaffoldEnvironment(name: string, opts: { root: string }): string[] {
  if (!/^[a-z][a-z0-9-]{0,49}$/.test(name)) {
    throw new Error(`invalid environment name "${name}": use lowercase letters, digits and "-", starting with a letter`);
  }
  if (["api", "util", "eval", "clients", "testing"].includes(name)) throw new Error(`"${name}" is a reserved folder of environments/`);
  const dir = join(opts.root, "environments", name);
  const testFile = join(opts.root, "test", "environments", `${name}.test.ts`);
  for (const p of [dir, testFile]) if (existsSync(p)) throw new Error(`${p} already exists`);
  mkdirSync(dir, { recursive: true });
  mkdirSync(join(opts.root, "test", "environments"), { recursive: true });
  const files: Array<[string, string]> = [
    [join(dir, "package.json"), packageJson(name)],
    [join(dir, "index.ts"), indexTs()],
    [testFile, testTs(name)],
  ];
  for (const [path, text] of files) writeFileSync(path, text);
  return files.map(([p]) => relative(opts.root, p));
}

function packageJson(name: string): string {
  return (
    JSON.stringify(
      { name, version: "0.1.0", description: `The ${name} environment`, type: "module", main: "index.js", keywords: ["rollstream-environment"] },
      null,
      2,
    ) + "\n"
  );
}

function indexTs(): string {
  return `import { z } from "zod";
import {
  createEnvironment, generatorDataset, Rubric, XMLParser,
  type DatasetRow, type DatasetSplit, type LoadEnvironment,
} from "../api/index.js";
import { parseEnvArgs } from "../util/args.js";
import { rngFor } from "../util/rng.js";
import pkg from "./package.json" with { type: "json" };

// Args are validated: a typo or a bad value is an error naming this environment.
export const argsSchema = z.object({ seed: z.number().int().default(0), evalSize: z.number().int().min(1).default(100) }).strict();

const WORDS = ["banana", "cherry", "apple", "kiwi", "mango", "papaya", "grape", "lemon"];

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const parser = new XMLParser(["answer"]);

  // Rows are a pure function of (seed, split, index): restarts and other actors see the same task.
  const row = (split: DatasetSplit, index: number): DatasetRow => {
    const rng = rngFor(args.seed, split, index);
    const word = rng.pick(WORDS);
    const letter = rng.pick([...new Set(word)]);
    return {
      id: \`\${split}-\${index}\`,
      prompt: [{ role: "user", content: \`How many times does "\${letter}" occur in "\${word}"? Answer in <answer></answer>.\` }],
      answer: String([...word].filter((c) => c === letter).length),
      info: { word, letter },
    };
  };

  const rubric = new Rubric({ parser })
    .reward("correct", ({ parsed, answer }) => parsed?.answer === answer, 1.0)
    .metric("format", ({ completion }) => parser.formatReward(completion));

  return createEnvironment({
    name: pkg.name,
    version: pkg.version,
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : args.evalSize, (i) => row(split, i)),
    rubric,
    // The default rollout is single-turn; see multiTurnRollout and toolRollout for more.
    sftTarget: (r) => parser.format({ answer: r.answer }),
  });
};
`;
}

function testTs(name: string): string {
  return `import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "../../environments/${name}/index.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 64 };

test("${name}: deterministic rows, right and wrong answers", async () => {
  const env = await loadEnvironment({});
  assert.equal(env.name, "${name}");
  const row = env.dataset("eval").row(0);
  assert.deepEqual((await loadEnvironment({})).dataset("eval").row(0), row);
  const replies = [env.sftTarget!(row), "<answer>99</answer>", "no idea"];
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling }, row));
  const scores = await env.scoreGroup(rollouts, row, {});
  assert.deepEqual(scores.map((s) => s.reward), [1, 0, 0]);
  assert.deepEqual(scores[2]!.errors, ["parse: no <answer> field"]);
});
`;
}
