import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

// `rollstream env init <name>` writes a small, complete environment: rows from a seed, an XML-tagged answer,
// a rubric with a reward and a format metric, an SFT target. It is sized for the demo model (a byte
// tokenizer and a 64-token context): the longest prompt and its target reply take 42 tokens with the chat
// template, leaving room for sampling. Two forms:
//   in a rollstream checkout   environments/<name>/ + test/environments/<name>.test.ts, built with the project;
//   --package <dir>            a standalone npm package that imports only rollstream's public API
//                              ("rollstream/environments", a peer dependency), with its own build and test.

const NAME = /^[a-z][a-z0-9-]{0,49}$/;

function checkName(name: string): void {
  if (!NAME.test(name)) throw new Error(`invalid environment name "${name}": use lowercase letters, digits and "-", starting with a letter`);
}

function writeAll(root: string, files: Array<[string, string]>): string[] {
  for (const [path] of files) if (existsSync(path)) throw new Error(`${path} already exists`);
  for (const [path, text] of files) {
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, text);
  }
  return files.map(([p]) => relative(root, p));
}

/** environments/<name> in a rollstream checkout, with its test under test/environments/. */
export function scaffoldEnvironment(name: string, opts: { root: string }): string[] {
  checkName(name);
  if (["api", "util", "eval", "clients", "testing"].includes(name)) throw new Error(`"${name}" is a reserved folder of environments/`);
  const dir = join(opts.root, "environments", name);
  return writeAll(opts.root, [
    [
      join(dir, "package.json"),
      json({ name, version: "0.1.0", description: `The ${name} environment`, type: "module", main: "index.js", keywords: ["rollstream-environment"] }),
    ],
    [join(dir, "index.ts"), environmentSource({ api: "../public.js", pkg: `import pkg from "./package.json" with { type: "json" };` })],
    [
      join(opts.root, "test", "environments", `${name}.test.ts`),
      testSource(name, `../../environments/${name}/index.js`, "../../environments/testing/index.js"),
    ],
  ]);
}

/** A standalone environment package in `dir` (created; must be empty or absent). */
export function scaffoldEnvironmentPackage(name: string, opts: { dir: string; rollstreamVersion: string }): string[] {
  checkName(name);
  const dir = resolve(opts.dir);
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new Error(`${dir} is not empty: give --package a new folder`);
  return writeAll(dir, [
    [
      join(dir, "package.json"),
      json({
        name,
        version: "0.1.0",
        description: `The ${name} environment for rollstream`,
        type: "module",
        main: "dist/index.js",
        types: "dist/index.d.ts",
        files: ["dist"],
        keywords: ["rollstream-environment"],
        scripts: { build: "tsc -p tsconfig.json", test: "tsc -p tsconfig.json && node --test dist/test/" },
        peerDependencies: { rollstream: `>=${opts.rollstreamVersion}` },
        devDependencies: { typescript: "5.9.3", "@types/node": "^20.19.0" },
      }),
    ],
    [
      join(dir, "tsconfig.json"),
      json({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          outDir: "dist",
          rootDir: "src",
          strict: true,
          declaration: true,
          skipLibCheck: true,
          types: ["node"],
        },
        include: ["src"],
      }),
    ],
    [
      join(dir, "src", "index.ts"),
      environmentSource({
        api: "rollstream/environments",
        pkg: `import { readFileSync } from "node:fs";\n\nconst pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { name: string; version: string };`,
      }),
    ],
    [join(dir, "src", "test", "index.test.ts"), testSource(name, "../index.js", "rollstream/environments/testing")],
    [join(dir, ".gitignore"), "node_modules/\ndist/\n"],
    [
      join(dir, "README.md"),
      `# ${name}\n\nA rollstream environment. \`npm run build && npm test\`; then, from a rollstream project where this package is\ninstalled (\`npm install <this folder or its tarball>\`, or its folder on \`ROLLSTREAM_ENV_PATH\`):\n\n    rollstream eval ${name} -n 20 --checkpoint <dir>\n\nand name it in a run config: \`environments: [{ id: "${name}@^0.1" }]\`.\n`,
    ],
  ]);
}

function json(v: unknown): string {
  return `${JSON.stringify(v, null, 2)}\n`;
}

function environmentSource(o: { api: string; pkg: string }): string {
  return `import {
  createEnvironment,
  type DatasetRow,
  type DatasetSplit,
  generatorDataset,
  type LoadEnvironment,
  parseEnvArgs,
  Rubric,
  rngFor,
  XMLParser,
  z,
} from "${o.api}";
${o.pkg}

// Args are validated: a typo or a bad value is an error naming this environment.
export const argsSchema = z.object({ seed: z.number().int().default(0), evalSize: z.number().int().min(1).default(100) }).strict();

// Count a letter in a made-up word: short enough for a 64-token context, and millions of distinct problems, so
// the held-out split can be disjoint from train (a problem is held out when its hash says so, whichever split drew it).
const LETTERS = "abcdefgh";
const heldOut = (word: string, letter: string) => fnv1a(\`\${letter}:\${word}\`) % 10 === 0;

function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

export const loadEnvironment: LoadEnvironment = (rawArgs) => {
  const args = parseEnvArgs(pkg.name, argsSchema, rawArgs);
  const parser = new XMLParser(["a"]);

  // Rows are a pure function of (seed, split, index): restarts and other actors see the same task. A split
  // draws until the problem is on its side of the hash: train never sees an eval problem.
  const row = (split: DatasetSplit, index: number): DatasetRow => {
    const rng = rngFor(args.seed, split, index);
    for (;;) {
      const word = Array.from({ length: rng.int(4, 7) }, () => rng.pick([...LETTERS])).join("");
      const letter = rng.pick([...LETTERS]);
      if (heldOut(word, letter) !== (split !== "train")) continue;
      return {
        id: \`\${split}-\${index}\`,
        prompt: [{ role: "user", content: \`"\${letter}" in \${word}?\` }],
        answer: String([...word].filter((c) => c === letter).length),
        info: { word, letter },
      };
    }
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
    sftTarget: (r) => parser.format({ a: r.answer }),
  });
};
`;
}

function testSource(name: string, envModule: string, testing: string): string {
  return `import { test } from "node:test";
import assert from "node:assert/strict";
import { loadEnvironment } from "${envModule}";
import { ByteChatTokenizer, ScriptedModelClient } from "${testing}";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 16 };

test("${name}: deterministic rows, right and wrong answers", async () => {
  const env = await loadEnvironment({});
  assert.equal(env.name, "${name}");
  const row = env.dataset("eval").row(0);
  assert.deepEqual((await loadEnvironment({})).dataset("eval").row(0), row);
  const replies = [env.sftTarget!(row), "<a>99</a>", "no idea"];
  const model = new ScriptedModelClient(new ByteChatTokenizer(), replies);
  const rollouts = [];
  for (let i = 0; i < replies.length; i++) rollouts.push(await env.rollout({ model, sampling }, row));
  const scores = await env.scoreGroup(rollouts, row, {});
  assert.deepEqual(scores.map((s) => s.reward), [1, 0, 0]);
  assert.deepEqual(scores[2]!.errors, ["parse: no <a> field"]);
});

test("${name}: the eval split shares no problem with train", async () => {
  const env = await loadEnvironment({});
  const key = (r: { prompt: Array<{ content: string }> }) => r.prompt[0]!.content;
  const evalRows = env.dataset("eval");
  const held = new Set(Array.from({ length: evalRows.size }, (_, i) => key(evalRows.row(i))));
  assert.ok(held.size > evalRows.size / 2, "eval rows are varied");
  const train = env.dataset("train");
  for (let i = 0; i < 5000; i++) assert.ok(!held.has(key(train.row(i))), \`train row \${i} is an eval problem\`);
});

test("${name}: every prompt and its target reply fit a 64-token context (the demo model's) with room to sample", async () => {
  const env = await loadEnvironment({});
  const tok = new ByteChatTokenizer();
  let longest = 0;
  const evalRows = env.dataset("eval");
  for (let i = 0; i < Math.min(200, evalRows.size); i++) {
    const row = evalRows.row(i);
    const prompt = tok.applyChatTemplate(row.prompt, { addGenerationPrompt: true }).length;
    longest = Math.max(longest, prompt + tok.encode(env.sftTarget!(row)).length + 1);
  }
  assert.ok(longest <= 48, \`longest prompt + reply: \${longest} tokens\`);
});
`;
}
