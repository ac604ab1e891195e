// The run's state KV checked key by key against what the run's streams, object store and checkpoints say, and
// repaired where they say enough: `rollstream doctor` names every damaged key (a value that is not JSON, does not
// match its schema, or is beyond what the run can have trained), `doctor --repair` and `train` (when it resumes a
// run) rebuild it. A key is rebuilt from the record its owner writes it beside (policy.version and learner.step from
// the newest weights announcement, run.status from the step records against rl.steps, eval.results from the eval
// stream, ...), cleared when absent is a state its owner recovers from, and otherwise named with what to do. Every
// write is a compare-and-set on the damaged revision: a value its owner wrote meanwhile wins.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { StateKeySchemas, StateKeys, type RunChannels, type RunState, type StateKey, type StateRead } from "../../streams/index.js";
import { evalResultsFromStream } from "./eval-record.js";

export interface StateCheckInput {
  channels: RunChannels;
  state: RunState;
  /** From the run's config when it is known (else rl.steps is taken from the step records). */
  config?: { rlSteps: number; environments?: () => Promise<{ key: string; id: string; weight: number }[]> };
  /** The run's folder, where the checkpoint actor keeps the training states (absent when it is not on this machine). */
  runDir?: string;
  /** Actor instances alive now (heartbeats); 0 for `train` before it starts them. */
  alive: number;
}

export type StateFix =
  /** `shown`: the value in words where JSON would be long (eval.results). */
  { kind: "rebuild"; value: unknown; from: string; shown?: string } | { kind: "clear"; why: string } | { kind: "manual"; todo: string };

export interface StateFinding {
  key: StateKey;
  /** The damaged entry's revision: the repair replaces exactly it. */
  revision: number;
  /** The fault, as a line about the run's state naming the bucket, the key and the value. */
  problem: string;
  /** The value as stored and what is wrong with it, in a few words: for one-line reports. */
  was: string;
  why: string;
  fix: StateFix;
}

/** What the run's records say about where it got to. */
interface RunEvidence {
  /** The newest weights announcement: its version and the learner step it was published at. */
  announced: { version: number; step: number } | null;
  /** Versions whose weights are in the object store. */
  stored: number[];
  /** The last step record: its step and the run's total RL steps. */
  lastStep: { step: number; steps: number } | null;
  /** The newest training state: on disk when the run folder has it, else the newest announced to the checkpoint actor. */
  checkpoint: { step: number; from: string } | null;
}

/** Every damaged key with its fix; [] for a sound state. */
export async function examineRunState(input: StateCheckInput): Promise<StateFinding[]> {
  const bad: Omit<StateFinding, "fix">[] = [];
  let bucket = "<bucket>";
  const note = (key: StateKey, r: StateRead<StateKey> | undefined) => {
    if (r) bucket = r.bucket;
    if (r && "error" in r) bad.push({ key, revision: r.revision, problem: r.error.message, was: r.error.raw, why: r.error.reason });
  };
  // policy.version and learner.step are read typed: their valid values can still be implausible.
  const version = await input.state.read(StateKeys.policyVersion);
  const step = await input.state.read(StateKeys.learnerStep);
  for (const key of Object.keys(StateKeySchemas) as StateKey[]) {
    if (key === StateKeys.policyVersion) note(key, version);
    else if (key === StateKeys.learnerStep) note(key, step);
    else note(key, await input.state.read(key));
  }
  const maybeImplausible = (version !== undefined && "value" in version) || (step !== undefined && "value" in step);
  if (bad.length === 0 && !maybeImplausible) return [];
  const ev = await readEvidence(input);
  const rlSteps = input.config?.rlSteps ?? ev.lastStep?.steps ?? null;
  if (version !== undefined && "value" in version) {
    const why = implausibleVersion(version.value, rlSteps, ev);
    const problem = `run state: KV ${version.bucket} policy.version is ${version.value}, ${why}`;
    if (why) bad.push({ key: StateKeys.policyVersion, revision: version.revision, problem, was: String(version.value), why });
  }
  const stepBound = rlSteps === null ? null : Math.max(rlSteps, ev.announced?.step ?? -1, ev.lastStep?.step ?? -1);
  if (step !== undefined && "value" in step && stepBound !== null && step.value > stepBound) {
    const why = `beyond rl.steps ${rlSteps}`;
    bad.push({
      key: StateKeys.learnerStep,
      revision: step.revision,
      problem: `run state: KV ${step.bucket} learner.step is ${step.value}, ${why}`,
      was: String(step.value),
      why,
    });
  }
  const findings: StateFinding[] = [];
  for (const b of bad) findings.push({ ...b, fix: await fixFor(b.key, ev, rlSteps, input, bucket) });
  return findings;
}

/** Why a valid policy.version cannot be the run's, or null when it can. */
function implausibleVersion(v: number, rlSteps: number | null, ev: RunEvidence): string | null {
  if (v < 0) return null;
  // (A run resumed with a smaller rl.steps has announced versions past it: those stay plausible.)
  if (rlSteps !== null && v > Math.max(rlSteps, ev.announced?.version ?? -1)) return `beyond rl.steps ${rlSteps} (no learner of this run can have trained it)`;
  // The learner announces a version before it writes the key, so the key is never ahead of the announcements.
  if (ev.announced !== null) return v > ev.announced.version ? `but the newest weights announced are v${ev.announced.version}` : null;
  return ev.stored.includes(v) ? null : "but no weights of that version were announced or stored";
}

async function readEvidence(input: StateCheckInput): Promise<RunEvidence> {
  const { channels } = input;
  const announced = (await channels.weights.announcements.last().catch(() => null))?.value ?? null;
  const lastStep = (await channels.steps.last().catch(() => null))?.value ?? null;
  const stored = await channels.weights.storedVersions().catch(() => []);
  let checkpoint: RunEvidence["checkpoint"] = null;
  const dir = input.runDir === undefined ? null : join(input.runDir, "checkpoints");
  const onDisk = dir !== null && existsSync(dir) ? new CheckpointDir(dir, "").steps()[0] : undefined;
  if (onDisk !== undefined) checkpoint = { step: onDisk, from: `the newest checkpoint in ${dir}` };
  else {
    const state = (await channels.checkpoints.announcements.last().catch(() => null))?.value;
    if (state) checkpoint = { step: state.step, from: "the newest training state announced on the checkpoints subject" };
  }
  return {
    announced: announced && { version: announced.version, step: announced.step },
    stored,
    lastStep: lastStep && { step: lastStep.step, steps: lastStep.steps },
    checkpoint,
  };
}

/** How `key` is put right, from the evidence. */
async function fixFor(key: StateKey, ev: RunEvidence, rlSteps: number | null, input: StateCheckInput, bucket: string): Promise<StateFix> {
  switch (key) {
    case "policy.version":
      if (ev.announced) return { kind: "rebuild", value: ev.announced.version, from: "the newest weights announcement" };
      if (ev.stored.length) return { kind: "rebuild", value: ev.stored.at(-1)!, from: "the newest weights in the object store" };
      if (ev.checkpoint) return { kind: "rebuild", value: ev.checkpoint.step, from: ev.checkpoint.from };
      return { kind: "clear", why: "no weights were published yet; the learner writes it with its first version" };
    case "learner.step":
      if (ev.announced) return { kind: "rebuild", value: ev.announced.step, from: "the newest weights announcement" };
      if (ev.lastStep) return { kind: "rebuild", value: ev.lastStep.step, from: "the last step record" };
      if (ev.checkpoint) return { kind: "rebuild", value: ev.checkpoint.step, from: ev.checkpoint.from };
      return { kind: "clear", why: "no step was recorded yet (absent is step 0)" };
    case "run.status":
      return runStatusFix(ev, rlSteps, input.alive);
    case "run.phase":
      // The first weights are announced when SFT is over, and the learner writes "rl" right after.
      if (ev.announced) return { kind: "rebuild", value: "rl", from: "the weights announcements" };
      return { kind: "clear", why: "no weights were announced yet; the learner writes the phase when it starts one" };
    case "checkpoint.latest":
      if (ev.checkpoint) return { kind: "rebuild", value: ev.checkpoint.step, from: ev.checkpoint.from };
      return { kind: "clear", why: "no training state was saved yet; the checkpoint actor writes it with the next" };
    case "run.environments":
      if (input.config?.environments) {
        const envs = await input.config.environments().catch(() => null);
        if (envs) return { kind: "rebuild", value: envs, from: "the run's config", shown: envs.map((e) => e.id).join(", ") };
      }
      return { kind: "clear", why: "the orchestrator writes it again when it starts" };
    case "eval.results": {
      const results = await evalResultsFromStream(input.channels);
      const versions = Object.keys(results).map((v) => `v${v}`);
      const shown = versions.length ? `the evaluations of ${versions.join(", ")}` : "no evaluation yet";
      return { kind: "rebuild", value: results, from: "the result messages on the eval subject", shown };
    }
    default:
      return fixOfOwnedKey(key, bucket);
  }
}

/** Keys one actor owns: cleared where it recovers from their absence, else what a person does. */
function fixOfOwnedKey(key: StateKey, bucket: string): StateFix {
  if (key.startsWith("lease.")) return { kind: "clear", why: "its owner takes the lease again" };
  if (key === "learner.starved") return { kind: "clear", why: "the learner writes it again while it waits on samples" };
  if (key === "learner.backend") return { kind: "clear", why: "the learner writes it again when RL starts (replay cannot pin the backend until then)" };
  if (key === "pool.stats") return { kind: "clear", why: "the orchestrator applies the group outcomes again from the start when it next starts" };
  return {
    kind: "manual",
    todo:
      "it is the orchestrator's own position, which no stream records: while the orchestrator runs it writes the key again itself; " +
      `otherwise put the right value (nats kv put ${bucket} ${key} <json>), or start the run over with train --fresh`,
  };
}

/** done once the step records reach rl.steps, else running (a stopped run is resumed by train). */
function runStatusFix(ev: RunEvidence, rlSteps: number | null, alive: number): StateFix {
  const trained = Math.max(ev.lastStep?.step ?? 0, ev.announced?.step ?? 0);
  const of = rlSteps === null ? "" : ` of ${rlSteps}`;
  if (rlSteps !== null && trained >= rlSteps) return { kind: "rebuild", value: "done", from: `the step records (step ${trained}${of})` };
  const actors = alive > 0 ? `${alive} actor instance(s) alive` : "no actor alive: train resumes it";
  return { kind: "rebuild", value: "running", from: `the step records (step ${trained}${of}; ${actors})` };
}

/** One finding in words: the fault, and what the repair does (or what to do). */
export function describeFinding(f: StateFinding): string {
  if (f.fix.kind === "manual") return `${f.problem}: cannot be rebuilt; ${f.fix.todo}`;
  return `${f.problem}: rollstream doctor --repair ${repairOf(f.fix)
    .replace(/^rebuilt/, "rebuilds it")
    .replace(/^cleared/, "clears it")}`;
}

/** What a repair did, in words: "rebuilt as 12 from the newest weights announcement", "cleared (why)". */
export function repairOf(fix: StateFix): string {
  if (fix.kind === "rebuild") return `rebuilt as ${fix.shown ?? shown(fix.value)} from ${fix.from}`;
  if (fix.kind === "clear") return `cleared (${fix.why})`;
  return fix.todo;
}

const shown = (v: unknown) => {
  const text = JSON.stringify(v);
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
};

/** doctor's view: the findings, what is still wrong (as problems), and what --repair put right. */
export interface StateCheck {
  findings: StateFinding[];
  problems: string[];
  repaired: string[];
}

export async function checkRunState(input: StateCheckInput, repair: boolean): Promise<StateCheck> {
  const findings = await examineRunState(input);
  if (!repair) return { findings, problems: findings.map(describeFinding), repaired: [] };
  const r = await repairRunState(input.state, findings);
  const changed = r.changed.map((k) => `run state: ${k} changed while it was being repaired (its owner wrote it): run doctor again to check it`);
  return { findings, problems: [...r.manual.map(describeFinding), ...changed], repaired: r.repaired };
}

export interface RepairReport {
  /** The findings put right. */
  done: StateFinding[];
  /** 'policy.version (was "{oops": not valid JSON) = 12 from the newest weights announcement', one per key put right. */
  repaired: string[];
  /** The findings that need a person (describeFinding says what to do). */
  manual: StateFinding[];
  /** Keys that changed while they were repaired: their owner wrote them, and its value stands. */
  changed: StateKey[];
}

/** Applies every fix it can, each a compare-and-set on the damaged revision. */
export async function repairRunState(state: RunState, findings: StateFinding[]): Promise<RepairReport> {
  const report: RepairReport = { done: [], repaired: [], manual: [], changed: [] };
  for (const f of findings) {
    if (f.fix.kind === "manual") {
      report.manual.push(f);
      continue;
    }
    const value = f.fix.kind === "rebuild" ? StateKeySchemas[f.key].parse(f.fix.value) : undefined;
    if (!(await state.replace(f.key, f.revision, value))) {
      report.changed.push(f.key);
      continue;
    }
    report.done.push(f);
    const was = `${f.key} (was ${f.was}: ${f.why})`;
    report.repaired.push(f.fix.kind === "rebuild" ? `${was} = ${f.fix.shown ?? shown(value)} from ${f.fix.from}` : `${was} cleared: ${f.fix.why}`);
  }
  return report;
}
