import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { registerEvalCommand, type EvalCommandDeps } from "../../cli/commands/eval.js";
import { registerEnvCommands } from "../../cli/commands/env.js";
import { scaffoldEnvironment } from "../../environments/scaffold.js";
import { ByteChatTokenizer, ScriptedModelClient } from "../../environments/testing/index.js";

const tmp = mkdtempSync(join(tmpdir(), "rs-envcli-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

async function run(args: string[], deps: EvalCommandDeps = { makeCheckpointClient: async () => rightPolicy() }): Promise<{ out: string; err: string }> {
  const program = new Command().exitOverride();
  registerEvalCommand(program, deps);
  registerEnvCommands(program);
  let out = "";
  let err = "";
  const wo = process.stdout.write.bind(process.stdout);
  const we = process.stderr.write.bind(process.stderr);
  process.stdout.write = ((s: string) => ((out += s), true)) as typeof process.stdout.write;
  process.stderr.write = ((s: string) => ((err += s), true)) as typeof process.stderr.write;
  try {
    await program.parseAsync(["node", "rollstream", ...args]);
  } finally {
    process.stdout.write = wo;
    process.stderr.write = we;
  }
  return { out, err };
}

function rightPolicy() {
  return new ScriptedModelClient(new ByteChatTokenizer(), (ctx) => {
    const m = /user\n(\d+)\+(\d+)/.exec(ctx)!;
    return String(Number(m[1]) + Number(m[2]));
  });
}

test("rollstream eval: runs, prints the report, saves results, resumes", async () => {
  const out = join(tmp, "ev");
  let made = 0;
  const deps = {
    makeCheckpointClient: async (path: string, opts: { threads?: number; seed?: number }) => {
      made++;
      assert.equal(path, "/ckpt/step-10");
      assert.deepEqual(opts, { threads: 2, seed: 3 });
      return rightPolicy();
    },
  };
  const r = await run(
    [
      "eval",
      "arithmetic@^1",
      "-n",
      "4",
      "-r",
      "2",
      "-c",
      "2",
      "--checkpoint",
      "/ckpt/step-10",
      "--threads",
      "2",
      "--seed",
      "3",
      "-o",
      out,
      "-a",
      '{"digits":1}',
      "--max-tokens",
      "8",
    ],
    deps,
  );
  assert.equal(made, 1);
  assert.match(r.out, /arithmetic@1\.0\.0: 4 examples x 2 rollouts = 8 samples/);
  assert.match(r.out, /reward +mean 1 +std 0/);
  assert.match(r.out, /pass@1 1 +pass@2 1/);
  // The default samples (temperature 1); the report says so, and how to get train's greedy figure.
  assert.match(
    r.out,
    /decoding +sampled: temperature 1, top-p 1, top-k 0, 2 rollouts per example \(train's held-out pass@1 is greedy: --temperature 0 -r 1 gives that figure\)$/m,
  );
  assert.equal(readFileSync(join(out, "results.jsonl"), "utf8").trim().split("\n").length, 8);
  const meta = JSON.parse(readFileSync(join(out, "metadata.json"), "utf8"));
  assert.deepEqual(meta.sampling, { temperature: 1, topP: 1, topK: 0, maxTokens: 8 });
  assert.deepEqual(meta.info.envArgs, { digits: 1 });
  const again = await run(
    [
      "eval",
      "arithmetic",
      "-n",
      "4",
      "-r",
      "2",
      "--checkpoint",
      "/ckpt/step-10",
      "--threads",
      "2",
      "--seed",
      "3",
      "-o",
      out,
      "-a",
      '{"digits":1}',
      "--max-tokens",
      "8",
      "--json",
    ],
    deps,
  );
  assert.match(again.err, /resumed 8 finished rollouts/);
  assert.equal(JSON.parse(again.out).samples, 8);
  assert.deepEqual(JSON.parse(again.out).sampling, { temperature: 1, topP: 1, topK: 0, maxTokens: 8 });
  const greedy = await run(
    [
      "eval",
      "arithmetic",
      "-n",
      "2",
      "-r",
      "1",
      "--temperature",
      "0",
      "--checkpoint",
      "/ckpt/step-10",
      "--threads",
      "2",
      "--seed",
      "3",
      "-o",
      join(tmp, "greedy"),
      "-a",
      '{"digits":1}',
    ],
    deps,
  );
  assert.match(greedy.out, /decoding +greedy \(temperature 0\), as the run's evaluator/m);
});

test("rollstream eval: bad flags and specs are clear errors", async () => {
  await assert.rejects(run(["eval", "arithmetic", "-n", "2"]), /exactly one of --checkpoint <path> or --base-url <url>/);
  await assert.rejects(run(["eval", "arithmetic", "--base-url", "http://x"]), /--base-url needs --model/);
  await assert.rejects(run(["eval", "arithmetic@^9", "--checkpoint", "x"]), /no version matches "\^9"/);
  await assert.rejects(run(["eval", "arithmetic", "-n", "zero", "--checkpoint", "x"]), /expected an integer >= 1/);
  await assert.rejects(run(["eval", "arithmetic", "-a", "[1]", "--checkpoint", "x"]), /expected a JSON object/);
});

test("rollstream env list and env init", async () => {
  const list = await run(["env", "list"]);
  for (const name of ["arithmetic@1.0.0", "math@1.0.0", "code@1.0.0", "logic@1.0.0", "tool@1.0.0"])
    assert.match(list.out, new RegExp(`^${name} +project`, "m"));
  const json = JSON.parse((await run(["env", "list", "--json"])).out) as Array<{ name: string }>;
  assert.ok(json.some((e) => e.name === "math"));

  const init = await run(["env", "init", "letters", "--root", tmp]);
  assert.match(init.out, /created environments\/letters\/package\.json, environments\/letters\/index\.ts, test\/environments\/letters\.test\.ts/);
  const pkg = JSON.parse(readFileSync(join(tmp, "environments", "letters", "package.json"), "utf8"));
  assert.deepEqual([pkg.name, pkg.version, pkg.keywords], ["letters", "0.1.0", ["rollstream-environment"]]);
  assert.match(readFileSync(join(tmp, "environments", "letters", "index.ts"), "utf8"), /export const loadEnvironment: LoadEnvironment/);
  assert.ok(existsSync(join(tmp, "test", "environments", "letters.test.ts")));
  await assert.rejects(run(["env", "init", "letters", "--root", tmp]), /already exists/);
  assert.throws(() => scaffoldEnvironment("Bad Name", { root: tmp }), /invalid environment name "Bad Name"/);
  assert.throws(() => scaffoldEnvironment("api", { root: tmp }), /reserved/);
});
