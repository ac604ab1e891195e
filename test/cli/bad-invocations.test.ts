// Every command run the wrong way ends with a line that says what is wrong (and a hint where the way out is
// known), a non-zero exit, and no stack trace; --debug brings the stack back (the positive control that the
// stack check can see one).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cliMain } from "../helpers/run-fixture.js";

const NO_NATS = "nats://127.0.0.1:1";
const STACK_FRAME = /^\s+at .+(:\d+:\d+\)?|\(node:[^)]*\))$/m;

function run(args: string[], cwd: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, NATS_URL: NO_NATS };
  delete env["ROLLSTREAM_DEBUG"];
  const r = spawnSync(process.execPath, [cliMain, ...args], { cwd, env, encoding: "utf8", timeout: 60_000 });
  return { status: r.status, stderr: r.stderr, stdout: r.stdout };
}

test("each command run badly: a non-zero exit, one clear line, no stack trace", () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-bad-"));
  try {
    writeFileSync(join(dir, "bad.yaml"), "run: x\nrl: { steps: -3 }\n");
    const cases: { args: string[]; exit?: number; says: RegExp }[] = [
      { args: ["eval", "arithmetic", "-n", "5", "-r", "2"], exit: 2, says: /give exactly one of --checkpoint <path> or --base-url <url>\nhint: / },
      { args: ["eval", "no-such-env", "-n", "1", "--checkpoint", dir], says: /environment "no-such-env" not found[^\n]*\nhint: .*env list/ },
      { args: ["eval", "arithmetic", "-n", "1", "--checkpoint", join(dir, "nothing")], says: /is neither an HF model folder/ },
      { args: ["eval", "arithmetic", "-n", "zero", "--checkpoint", dir], exit: 2, says: /expected an integer >= 1/ },
      { args: ["train", "missing.yaml"], exit: 2, says: /missing\.yaml/ },
      { args: ["train", "bad.yaml"], exit: 2, says: /bad\.yaml/ },
      { args: ["config", "check", "missing.yaml"], exit: 2, says: /missing\.yaml/ },
      { args: ["replay", "--run", "nope"], says: /no run nope under runs/ },
      { args: ["replay", "--run", "nope", "--steps", "x"], exit: 2, says: /--steps must be a positive integer/ },
      { args: ["replay"], exit: 2, says: /replay needs --run/ },
      { args: ["inspect", "--run", "nope", "--nats", NO_NATS], says: /cannot reach NATS at nats:\/\/127\.0\.0\.1:1/ },
      { args: ["doctor", "--run", "nope", "--nats", NO_NATS], says: /cannot reach NATS/ },
      { args: ["dashboard"], exit: 2, says: /dashboard needs --run or --config/ },
      { args: ["dashboard", "--run", "x", "--port", "99999"], exit: 2, says: /--port must be 0\.\.65535/ },
      { args: ["sandbox", "exec", "-c", "print(1)", "-s", NO_NATS], says: /cannot reach NATS|sandbox exec:/ },
      { args: ["bench", "nope"], exit: 2, says: /unknown benchmark nope/ },
      { args: ["actor", "bogus"], exit: 2, says: /unknown actor "bogus"/ },
      { args: ["actor", "learner"], exit: 2, says: /actor learner needs the run config: -c <file>/ },
      { args: ["env", "init"], exit: 2, says: /missing required argument 'name'/ },
      { args: ["frobnicate"], exit: 2, says: /unknown command 'frobnicate'/ },
      { args: ["train", "--nats"], exit: 2, says: /argument missing|missing required argument/ },
    ];
    for (const c of cases) {
      const r = run(c.args, dir);
      const what = `rollstream ${c.args.join(" ")}\n--- exit ${r.status}\n--- stderr\n${r.stderr}--- stdout\n${r.stdout}`;
      assert.notEqual(r.status, 0, what);
      if (c.exit !== undefined) assert.equal(r.status, c.exit, what);
      assert.match(r.stderr, c.says, what);
      assert.doesNotMatch(r.stderr, STACK_FRAME, `no stack trace: ${what}`);
      assert.doesNotMatch(r.stdout, STACK_FRAME, `no stack trace: ${what}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("--debug (or ROLLSTREAM_DEBUG=1) shows the stack (the control: the check above would see one)", () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-bad-"));
  try {
    const r = run(["eval", "arithmetic", "-n", "5", "--debug"], dir);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /give exactly one of --checkpoint/);
    assert.match(r.stderr, STACK_FRAME);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
