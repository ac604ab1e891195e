// `train`'s last step, the summary: how the run ends and the exit code that says so. 1 when an actor failed
// for good, 130 on Ctrl-C (the same command resumes), else 0 once the final evaluations are in, the run is
// marked done and the last checkpoint written. Every path stops what train started before it prints.
import { setTimeout as sleep } from "node:timers/promises";
import { evalSchedule } from "../../rl/eval-schedule.js";
import { HealthBoard, openWire, StateKeys, type HeldOutResult } from "../../streams/index.js";
import { printSummary, type EvalFeed } from "./evals.js";
import type { OutageReport } from "./outage.js";
import type { TrainSession } from "./session.js";

/** A run that already finished: its summary again, and nothing started. */
export async function reportFinishedRun(s: TrainSession): Promise<number> {
  process.stdout.write(`run ${s.config.run} already finished (use --fresh to start over)\n`);
  const more = moreStepsLine(s.config.run, await s.state.get(StateKeys.learnerStep).catch(() => undefined), s.config.rl.steps);
  if (more) process.stdout.write(`${more}\n`);
  printSummary(s.config, (await s.state.get(StateKeys.evalResults)) ?? {});
  await s.cleanup();
  return 0;
}

/**
 * One line when the config now asks for more RL steps than a finished run trained, else null. A finished run is
 * not extended: its learning-rate schedule ran to its own rl.steps, and its checkpoints are training state, not a
 * model.path folder.
 */
export function moreStepsLine(run: string, stepsDone: number | undefined, stepsWanted: number): string | null {
  if (stepsDone === undefined || stepsWanted <= stepsDone) return null;
  return `the config now asks for rl.steps ${stepsWanted} but run ${run} finished at step ${stepsDone}: a finished run cannot be extended; start it over with --fresh, or give the longer run another name (run:)`;
}

/** Ends a run whose watch returned (waitForRl): stops what train started, prints the summary, gives the exit code. */
export async function endRun(s: TrainSession, outage: OutageReport, evals: EvalFeed | null): Promise<number> {
  if (s.fatal) {
    s.say(`run stopped: ${s.fatal}`);
    await s.cleanup();
    return 1;
  }
  if (s.interrupted) {
    await s.cleanup();
    process.stdout.write(`run ${s.config.run} stopped; run the same command to resume from the last checkpoint\n`);
    return 130;
  }
  s.say(`RL finished: ${s.config.rl.steps} steps`);
  const results = evals ? await finalEvals(s, evals) : {};
  await runMarkedDone(s);
  if (outage.outages.length) s.say(`rode through ${outage.outages.length} NATS outage(s): ${outage.outages.map((x) => `${x.toFixed(1)} s`).join(", ")}`);
  await s.cleanup();
  printSummary(s.config, results);
  if (s.idleLines.length)
    process.stdout.write(["time spent waiting, per actor (size the inference : training split by it):", ...s.idleLines.map((l) => `  ${l}`)].join("\n") + "\n");
  return 0;
}

/** How long `train` waits for the held-out evaluations still missing after RL, and how often it says so. */
export const FINAL_EVALS = { waitMs: 10 * 60_000, noteEveryMs: 60_000 };

/**
 * The evaluator exits once the final version is evaluated: its results, waited for (up to FINAL_EVALS.waitMs)
 * while it works. Every noteEveryMs the versions still missing are said, and when the wait ends without them.
 */
export async function finalEvals(
  s: Pick<TrainSession, "config" | "interrupted" | "fatal" | "say">,
  evals: Pick<EvalFeed, "show">,
  o = FINAL_EVALS,
): Promise<Record<string, HeldOutResult>> {
  const schedule = evalSchedule(s.config);
  let results: Record<string, HeldOutResult> = {};
  const start = Date.now();
  let note = start + o.noteEveryMs;
  while (!s.interrupted && !s.fatal) {
    results = await evals.show().catch(() => results);
    const missing = schedule.filter((v) => results[String(v)] === undefined).map((v) => `v${v}`);
    if (missing.length === 0) break;
    const waited = `${Math.round((Date.now() - start) / 1000)} s`;
    if (Date.now() - start >= o.waitMs) {
      s.say(`held-out evaluation of ${missing.join(", ")} not done after ${waited}: stopped waiting (see the run folder's logs/evaluator-0.log)`);
      break;
    }
    if (Date.now() >= note) {
      s.say(`waiting for the evaluator: ${missing.join(", ")} not evaluated yet (${waited} of at most ${Math.round(o.waitMs / 1000)} s)`);
      note += o.noteEveryMs;
    }
    await sleep(Math.min(500, o.noteEveryMs));
  }
  return results;
}

/**
 * Gives the orchestrator and the checkpoint actor up to 30 s to mark the run done and write the final state,
 * and as long as it takes while the checkpoint actor says it is blocked (a full disk): that wait is said once,
 * and ends when the state is written or on Ctrl-C.
 */
async function runMarkedDone(s: TrainSession): Promise<void> {
  let deadline = Date.now() + 30_000;
  while (Date.now() < deadline && (await s.state.get(StateKeys.runStatus).catch(() => undefined)) !== "done") await sleep(250);
  let said = false;
  for (let n = 0; !s.interrupted; n++) {
    if (((await s.state.get(StateKeys.checkpointLatest).catch(() => undefined)) ?? -1) >= s.config.rl.steps) return;
    const blocked = n % 8 === 0 ? await checkpointBlocked(s) : null;
    if (blocked) deadline = Date.now() + 30_000;
    if (blocked && !said) s.say(`waiting for the final checkpoint: ${blocked}`);
    said ||= blocked !== null;
    if (Date.now() > deadline) return;
    await sleep(250);
  }
}

/** Why the checkpoint actor says it cannot go on, or null. */
async function checkpointBlocked(s: TrainSession): Promise<string | null> {
  const entries = await new HealthBoard(openWire(s.nc, s.config.run).health).read().catch(() => []);
  return entries.find((e) => !e.exited && e.heartbeat?.actor === "checkpoint" && e.heartbeat.blocked)?.heartbeat?.blocked ?? null;
}
