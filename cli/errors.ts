// How the CLI ends on an error: one line saying what went wrong, a hint where we know the usual way out,
// a non-zero exit (2 for a bad invocation, 1 for anything else), and a stack trace only with --debug
// (or ROLLSTREAM_DEBUG=1) — a user who typed a command wrong wants the sentence, not our call stack.
import { CommanderError } from "commander";

/** A command used the wrong way: a missing or malformed option, a name that does not exist. Exit 2. */
export class UsageError extends Error {}

/** Hints for errors whose way out is always the same, matched on the message ({server}: the command's server option). */
const HINTS: [RegExp, string][] = [
  [/cannot reach NATS/, "start one with `nats-server -js`, or name one with {server} / NATS_URL"],
  [/no sandbox service is running/, "start one with `rollstream actor sandbox` (needs bubblewrap: `apt-get install bubblewrap`), then try again"],
  [/environment "[^"]*" not found/, "`rollstream env list` shows what resolves; install the package, or add its folder to ROLLSTREAM_ENV_PATH"],
  [/--checkpoint <path> or --base-url/, "e.g. --checkpoint runs/demo/checkpoints/<step> (a run's checkpoint) or --base-url http://127.0.0.1:8000/v1"],
  [/Cannot find (package|module)/, "run `npm ci` (and `npm run build`) in the rollstream folder"],
];

/** The hint for `message`, naming the server option as the command spells it (`--nats` but for `sandbox`'s `-s/--server`). */
export function hintFor(message: string, serverOption = "--nats"): string | undefined {
  return HINTS.find(([re]) => re.test(message))?.[1].replace("{server}", serverOption);
}

export function debugEnabled(argv: readonly string[] = process.argv): boolean {
  return argv.includes("--debug") || process.env["ROLLSTREAM_DEBUG"] === "1";
}

/** Writes the error the way the CLI reports every error; returns the exit code. */
export function reportError(e: unknown, debug = debugEnabled()): number {
  if (e instanceof CommanderError) {
    // Commander already printed its one line (or the help / version, exit 0).
    return e.exitCode === 0 ? 0 : 2;
  }
  const err = e instanceof Error ? e : new Error(String(e));
  const first = err.message.split("\n")[0] || err.name;
  const rest = err.message
    .split("\n")
    .slice(1)
    .filter((l) => /^\s+- /.test(l)); // listed problems (config errors) stay
  process.stderr.write(`rollstream: ${first}\n${rest.map((l) => `${l}\n`).join("")}`);
  const hint = hintFor(err.message);
  if (hint) process.stderr.write(`hint: ${hint}\n`);
  if (debug && err.stack) process.stderr.write(`${err.stack}\n`);
  else if (!hint) process.stderr.write("(--debug shows where it happened)\n");
  return err instanceof UsageError || err.name === "ConfigError" ? 2 : 1;
}
