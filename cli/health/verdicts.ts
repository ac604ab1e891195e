// What healthy means for a run, from its health bucket (streams/health.ts): an instance whose heartbeat is
// older than staleMs is silent (stopped, hung on a blocked event loop, or dead without a goodbye); one that
// has worked on the same item, or waited on the same specific thing, for longer than stuckMs is stuck. A
// wait for input (the next task) is idle, never stuck: its cause is upstream, and upstream has its own
// heartbeat. `rollstream doctor` prints these verdicts; `train` names the unhealthy ones as it runs.
import type { NatsConnection } from "@nats-io/transport-node";
import { HealthBoard, openWire, type EngineFigures, type HealthEntry, type Heartbeat, type LogLine, type RemoteEnvHealth } from "../../streams/index.js";

export interface HealthThresholds {
  /** No heartbeat for longer than this: silent. */
  staleMs: number;
  /** Working on one item, or waiting on one specific thing, for longer than this: stuck. */
  stuckMs: number;
}

export const DEFAULT_THRESHOLDS: HealthThresholds = { staleMs: 10_000, stuckMs: 60_000 };

export type Verdict = "healthy" | "silent" | "stuck" | "blocked" | "exited" | "unreadable";

export interface InstanceHealth {
  key: string;
  actor: string;
  instance: string;
  verdict: Verdict;
  /** The verdict in words: "no heartbeat for 12.3 s", "working on task run:0:12 for 75.0 s". */
  reason: string;
  /** The last heartbeat's state; "exited" once the instance exited cleanly (whatever it was doing before). */
  state?: Heartbeat["state"] | "exited";
  what?: string;
  idle?: boolean;
  since?: string;
  /** How long it has been in `state` on `what`, as of now. */
  forMs?: number;
  heartbeatAgeMs: number;
  pid?: number;
  inFlight?: number;
  idleRatio?: Record<string, number>;
  /** An instance running an inference engine (inference, evaluator): its scheduler's figures. */
  engine?: EngineFigures;
  /** The remote environment servers it talks to, as of their last health check. */
  remoteEnvs?: RemoteEnvHealth[];
  lastLog: LogLine | null;
}

export interface RunHealth {
  healthy: boolean;
  instances: InstanceHealth[];
  /** One line per reason the run is not healthy. */
  problems: string[];
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** "inference-0" as launched by `train`; "inference host-1234" when the instance name does not say the actor. */
export function instanceLabel(actor: string, instance: string): string {
  return instance.startsWith(actor) ? instance : `${actor} ${instance}`;
}

function describe(hb: Heartbeat): string {
  if (hb.state === "starting") return "starting";
  if (hb.state === "draining") return `draining${hb.what ? ` (${hb.what})` : ""}`;
  if (!hb.what) return hb.state;
  return hb.state === "working" ? `working on ${hb.what}` : `waiting on ${hb.what}`;
}

export function classifyInstance(e: HealthEntry, now: number, t: HealthThresholds): InstanceHealth {
  const ageMs = Math.max(0, now - e.written.getTime());
  const hb = e.heartbeat;
  if (!hb) {
    const [actor = e.key, instance = ""] = e.key.split(/\.(.*)/s);
    return { key: e.key, actor, instance, verdict: "unreadable", reason: `unreadable heartbeat: ${e.error}`, heartbeatAgeMs: ageMs, lastLog: null };
  }
  // Measured on the actor's clock up to its heartbeat, then on the server's: a skewed actor clock does not matter.
  const forMs = Math.max(0, Date.parse(hb.time) - Date.parse(hb.since)) + ageMs;
  const base = {
    key: e.key,
    actor: hb.actor,
    instance: hb.instance,
    state: hb.state,
    what: hb.what,
    idle: hb.idle,
    since: hb.since,
    forMs,
    heartbeatAgeMs: ageMs,
    pid: hb.pid,
    inFlight: hb.inFlight,
    idleRatio: hb.idleRatio,
    ...(hb.engine ? { engine: hb.engine } : {}),
    ...(hb.remoteEnvs ? { remoteEnvs: hb.remoteEnvs } : {}),
    lastLog: hb.lastLog,
  };
  // Its last state and item were what it did before it exited: shown as such they read as live work.
  if (e.exited)
    return {
      ...base,
      state: "exited",
      what: undefined,
      idle: undefined,
      forMs: ageMs,
      verdict: "exited",
      reason: `exited cleanly at ${hb.exitedAt ?? hb.time}`,
    };
  if (ageMs > t.staleMs) return { ...base, verdict: "silent", reason: `no heartbeat for ${secs(ageMs)} (last: ${describe(hb)})` };
  if (hb.blocked) return { ...base, verdict: "blocked", reason: hb.blocked };
  const stuckable = hb.state === "working" || hb.state === "draining" || (hb.state === "waiting" && !hb.idle);
  if (stuckable && forMs > t.stuckMs) return { ...base, verdict: "stuck", reason: `${describe(hb)} for ${secs(forMs)}` };
  return { ...base, verdict: "healthy", reason: `${describe(hb)} for ${secs(forMs)}` };
}

/**
 * The run is healthy when every live instance is, and something is running unless the run is done (a
 * finished run's actors drained and removed their keys). Exited instances are reported, never a problem.
 */
export function classifyRun(entries: readonly HealthEntry[], runStatus: string | undefined, now: number, t: HealthThresholds = DEFAULT_THRESHOLDS): RunHealth {
  const instances = entries.map((e) => classifyInstance(e, now, t));
  const problems = instances
    .filter((i) => i.verdict === "silent" || i.verdict === "stuck" || i.verdict === "blocked" || i.verdict === "unreadable")
    .map((i) => `${instanceLabel(i.actor, i.instance)} ${i.verdict}: ${i.reason}`);
  const live = instances.filter((i) => i.verdict !== "exited");
  for (const i of live) {
    for (const r of i.remoteEnvs ?? []) {
      if (!r.healthy) problems.push(`remote environment ${r.env} at ${r.address} does not answer health (seen by ${instanceLabel(i.actor, i.instance)})`);
    }
  }
  if (runStatus === "failed") problems.push("run status is failed");
  else if (runStatus !== "done" && live.length === 0) problems.push(`no actor is running (run status ${runStatus ?? "unknown"}): start or resume the run`);
  return { healthy: problems.length === 0, instances, problems };
}

/**
 * For a live display: one line per silent or stuck actor instance of the run ([] when all are healthy, or
 * the run has no health bucket). Reads the bucket once; call it every few seconds.
 */
export async function healthAlerts(nc: NatsConnection, run: string, thresholds: Partial<HealthThresholds> = {}): Promise<string[]> {
  const board = new HealthBoard(openWire(nc, run).health);
  const entries = await board.read().catch(() => null);
  if (!entries) return [];
  const t = { ...DEFAULT_THRESHOLDS, ...thresholds };
  return entries
    .map((e) => classifyInstance(e, Date.now(), t))
    .filter((i) => i.verdict === "silent" || i.verdict === "stuck" || i.verdict === "blocked")
    .map((i) => {
      const log = i.lastLog ? `; last log ${i.lastLog.level}: ${i.lastLog.msg}` : "";
      return `${instanceLabel(i.actor, i.instance)} ${i.verdict}: ${i.reason}${log}`;
    });
}
