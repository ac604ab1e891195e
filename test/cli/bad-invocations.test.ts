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

/** `body` in a fresh temp folder, removed after. */
function inTempDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), "rs-bad-"));
  try {
    body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("sandbox exec and stats: the hint names their own server option, -s/--server", () => {
  inTempDir((dir) => {
    // sandbox exec/stats take -s/--server (there is no --nats): the hint names that.
    for (const args of [
      ["sandbox", "exec", "-c", "print(1)", "-s", NO_NATS],
      ["sandbox", "stats", "-s", NO_NATS],
    ]) {
      const r = run(args, dir);
      const what = `rollstream ${args.join(" ")}\n${r.stderr}`;
      assert.notEqual(r.status, 0, what);
      assert.match(r.stderr, /cannot reach NATS[^\n]*\nhint: start one with `nats-server -js`, or name one with -s\/--server \/ NATS_URL\n/, what);
      assert.doesNotMatch(r.stderr, /--nats/, what);
    }
    // Control: the commands that do take --nats keep naming it.
    const inspect = run(["inspect", "--run", "nope", "--nats", NO_NATS], dir);
    assert.match(inspect.stderr, /hint: .*name one with --nats \/ NATS_URL/);
  });
});

test("a config path that names no file: one line, no config file at <path>", () => {
  inTempDir((dir) => {
    // A config path that names no file: one line, the same from every command that reads a config.
    const missing = join(dir, "missing.yaml");
    for (const [args, line] of [
      [["train", missing], `no config file at ${missing}\n`],
      [["config", "check", missing], `no config file at ${missing}\n`],
      [["config", "show", missing], `no config file at ${missing}\n`],
      [["doctor", "--config", missing], `doctor: no config file at ${missing}\n`],
    ] as const) {
      const r = run([...args], dir);
      assert.equal(r.status, 2, `rollstream ${args.join(" ")}\n${r.stderr}`);
      assert.equal(r.stderr, line);
    }
  });
});

test("an environment id one typo away from an installed one: did you mean", () => {
  inTempDir((dir) => {
    // An environment id one typo away from a built-in one: "did you mean"; a name near nothing gets none.
    const typo = run(["eval", "arithmetc", "-n", "1", "--checkpoint", dir], dir);
    assert.notEqual(typo.status, 0);
    assert.match(typo.stderr, /^rollstream: environment "arithmetc" not found; did you mean "arithmetic"\? \(searched /);
    writeFileSync(join(dir, "typo.yaml"), "run: x\nenvironments:\n  - id: logc@^1\n");
    const check = run(["config", "check", "typo.yaml"], dir);
    assert.equal(check.status, 2);
    assert.match(check.stderr, /environments\.0 \(logc@\^1\): environment "logc" not found; did you mean "logic"\?/);
    const far = run(["eval", "no-such-env", "-n", "1", "--checkpoint", dir], dir);
    assert.match(far.stderr, /environment "no-such-env" not found \(searched /);
  });
});
