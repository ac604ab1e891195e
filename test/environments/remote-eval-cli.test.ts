// `rollstream eval verifiers:<name> --server … --tasks …` and `eval openenv:<name> --url …` work like a built-in's
// eval, against the Python test servers; the policy is a scripted one standing in for --checkpoint.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { registerEvalCommand, type EvalCommandDeps } from "../../cli/commands/eval.js";
import { ScriptedModelClient } from "../../environments/testing/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { startPythonServer, type PythonServer } from "../helpers/python-env-server.js";

const tmp = mkdtempSync(join(tmpdir(), "rs-remote-eval-"));
const tok = new ByteTokenizer();
const servers: PythonServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function evalCli(args: string[], deps: EvalCommandDeps): Promise<string> {
  const program = new Command().exitOverride();
  registerEvalCommand(program, deps);
  let out = "";
  const wo = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((s: string) => ((out += s), true)) as typeof process.stdout.write;
  try {
    await program.parseAsync(["node", "rollstream", ...args]);
  } finally {
    process.stdout.write = wo;
  }
  return out;
}

/** Reverses the word in the last user message; `right` false answers something else. */
const policy = (right: boolean) =>
  new ScriptedModelClient(tok, (ctx) => {
    const users = [...ctx.matchAll(/<\|user\|>(?:Reverse the word: )?(\w+)<\|end\|>/g)];
    const w = users.at(-1)?.[1] ?? "";
    return right ? [...w].reverse().join("") : "zzz";
  });

test("eval verifiers:reverse-text --server … --tasks …: the server's scores, pass@k, results on disk", async () => {
  const s = await startPythonServer("verifiers_env_server.py", []);
  servers.push(s);
  const tasks = join(tmp, "tasks.jsonl");
  writeFileSync(tasks, ["abc", "stream", "moon"].map((w) => JSON.stringify({ prompt: w, answer: [...w].reverse().join("") })).join("\n"));
  const common = ["--server", s.address, "--tasks", tasks, "--env-version", "1.0.0", "-n", "3", "-r", "2", "--checkpoint", "/ckpt", "--no-progress"];
  const good = await evalCli(["eval", "verifiers:reverse-text", ...common, "-o", join(tmp, "good")], { makeCheckpointClient: async () => policy(true) });
  assert.match(good, /verifiers:reverse-text@1\.0\.0: 3 examples x 2 rollouts = 6 samples/);
  assert.match(good, /pass@1 1 +pass@2 1/);
  const lines = readFileSync(join(tmp, "good", "results.jsonl"), "utf8")
    .trim()
    .split("\n");
  assert.equal(lines.length, 6);
  // Positive control: a wrong policy scores below 1 on the server.
  const bad = await evalCli(["eval", "verifiers:reverse-text", ...common, "-o", join(tmp, "bad")], { makeCheckpointClient: async () => policy(false) });
  assert.match(bad, /pass@1 0 +pass@2 0/);
});

test("eval openenv:reverse-word --url …", async () => {
  const s = await startPythonServer("openenv_server.py", []);
  servers.push(s);
  const out = await evalCli(
    ["eval", "openenv:reverse-word", "--url", s.address, "-n", "2", "-r", "1", "--checkpoint", "/ckpt", "--no-progress", "-o", join(tmp, "oe")],
    {
      makeCheckpointClient: async () => policy(true),
    },
  );
  assert.match(out, /openenv:reverse-word@0\.3\.1: 2 examples x 1 rollouts = 2 samples/);
  assert.match(out, /pass@1 1/);
});
