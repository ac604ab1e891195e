// Run health (DESIGN §2, "every actor sends heartbeats"): each actor process writes what it is doing to
// the run's `rs-<run>-health` KV bucket every couple of seconds, key `<actor>.<instance>`, as JSON that
// `nats kv get` prints readably. A clean exit deletes that key and leaves the process's final accounting
// under `exited.<actor>.<instance>`, so the idle ratios of actors that finish early (the learner, the
// orchestrator) can still be summarised when the run ends. `rollstream doctor` and `train` read it.
import { Bucket, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { z } from "zod";
import { isInfrastructureError } from "./infrastructure-error.js";
import { formatIssues } from "./msgpack-codec.js";
import { openWire } from "./wire.js";

const iso = z.iso.datetime();
const ms = z.number().nonnegative();

/** The last warn/error line the process logged: what a person reads first when it is silent or stuck. */
export const LogLineSchema = z.object({ level: z.enum(["warn", "error", "fatal"]), msg: z.string(), time: iso });
export type LogLine = z.infer<typeof LogLineSchema>;

/** An inference engine's scheduler as of its last step (inference and evaluator heartbeats; also in Prometheus). */
export const EngineFiguresSchema = z.object({
  /** Sequences admitted (a group's completions count one each) and sequences waiting for room or weights. */
  running: z.number().int().nonnegative(),
  waiting: z.number().int().nonnegative(),
  /** KV blocks held by sequences, kept idle for prefix hits, and free; they add up to the pool. */
  kvBlocksUsed: z.number().int().nonnegative(),
  kvBlocksCached: z.number().int().nonnegative(),
  kvBlocksFree: z.number().int().nonnegative(),
  /** Tokens sampled per second over the last few seconds. */
  decodeTokensPerSec: z.number().nonnegative(),
  /** Share of admitted prompt tokens not prefilled: found in the prefix cache or shared within a group. */
  prefixHitRate: z.number().min(0).max(1),
  preemptions: z.number().int().nonnegative(),
  /** The weights version tokens are sampled under. */
  version: z.number().int(),
});
export type EngineFigures = z.infer<typeof EngineFiguresSchema>;

/** One remote environment server as of its last health check. */
export const RemoteEnvHealthSchema = z.object({
  env: z.string(),
  address: z.string(),
  healthy: z.boolean(),
  checkedAt: iso,
  inFlight: z.number().int().nonnegative(),
});
export type RemoteEnvHealth = z.infer<typeof RemoteEnvHealthSchema>;

export const HeartbeatSchema = z.object({
  actor: z.string().min(1),
  instance: z.string().min(1),
  pid: z.number().int().positive(),
  state: z.enum(["starting", "working", "waiting", "draining"]),
  /** What it works on ("task run:0:12", "train step 12") or waits for ("weights v7", "samples for step 12 (3 of 8)"). */
  what: z.string(),
  /** Waiting for input (the next task, the next announcement): an idle actor, which is never stuck. */
  idle: z.boolean(),
  /** When it started working on / waiting for `what`. */
  since: iso,
  /** Messages of its durable consumer being handled now. */
  inFlight: z.number().int().nonnegative(),
  /** Time spent working, and waiting per reason ("tasks", "weights", "samples", "sandbox"), since the process started. */
  busyMs: ms,
  waitMs: z.record(z.string(), ms),
  /** waitMs per reason as a share of busy + waiting time. */
  idleRatio: z.record(z.string(), z.number().min(0).max(1)),
  lastLog: LogLineSchema.nullable(),
  /** When this heartbeat was written, and how often they come. */
  time: iso,
  intervalMs: z.number().int().positive(),
  /** Why it cannot go on, while that lasts ("disk full: …"): a verdict of its own, whatever it does meanwhile. */
  blocked: z.string().optional(),
  /** An actor that runs an inference engine: its scheduler's figures. */
  engine: EngineFiguresSchema.optional(),
  /** The remote environment servers it talks to (verifiers env-server, OpenEnv): did each answer its last health check. */
  remoteEnvs: z.array(RemoteEnvHealthSchema).optional(),
  /** Set only in `exited.*` records: when the process exited cleanly. */
  exitedAt: iso.optional(),
});
export type Heartbeat = z.infer<typeof HeartbeatSchema>;

/** One key of the bucket as read back: the heartbeat, or why it could not be read. */
export interface HealthEntry {
  key: string;
  /** An `exited.*` record: the process is gone and said goodbye. */
  exited: boolean;
  heartbeat: Heartbeat | null;
  error?: string;
  /** Server time of the write: how long the instance has been silent, whatever its own clock says. */
  written: Date;
}

const EXITED = "exited.";

/** KV keys allow [-/_=.A-Za-z0-9]; an instance named after a host keeps its dots. */
export function healthKey(actor: string, instance: string): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9_=.-]/g, "_").replace(/^\.+|\.+$/g, "_");
  return `${clean(actor)}.${clean(instance)}`;
}

function parseHeartbeat(bytes: Uint8Array): { heartbeat: Heartbeat | null; error?: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return { heartbeat: null, error: "value is not JSON" };
  }
  const r = HeartbeatSchema.safeParse(raw);
  return r.success ? { heartbeat: r.data } : { heartbeat: null, error: formatIssues(r.error) };
}

export class HealthBoard {
  constructor(private readonly kv: () => Promise<KV>) {}

  /** Writes this instance's heartbeat (validated: a bad value is our bug, and must not reach readers). */
  async beat(hb: Heartbeat): Promise<void> {
    const value = HeartbeatSchema.parse(hb);
    await (await this.kv()).put(healthKey(hb.actor, hb.instance), JSON.stringify(value));
  }

  /** A clean exit: the live key goes, the final accounting stays under `exited.<key>`. */
  async exit(hb: Heartbeat): Promise<void> {
    const kv = await this.kv();
    const key = healthKey(hb.actor, hb.instance);
    await kv.put(`${EXITED}${key}`, JSON.stringify(HeartbeatSchema.parse({ ...hb, exitedAt: hb.exitedAt ?? new Date().toISOString() })));
    await kv.delete(key);
  }

  /** Whether the run has a health bucket at all (a run started before heartbeats existed has none). */
  async exists(): Promise<boolean> {
    try {
      await (await this.kv()).status();
      return true;
    } catch (e) {
      if (isInfrastructureError(e)) throw e; // unknown yet: not the same as no bucket
      return false;
    }
  }

  /**
   * Whether the run has an instance of `actor` that has not exited cleanly: one running, or one that died
   * (its live key stays until the bucket's age limit, an hour). Its keys only: no value is read.
   */
  async hasLive(actor: string): Promise<boolean> {
    const prefix = healthKey(actor, "");
    for (const key of await listKeys(await this.kv())) if (key.startsWith(prefix)) return true;
    return false;
  }

  /** Every live and exited record; a live instance's older `exited.*` record (an earlier life) is left out. */
  async read(): Promise<HealthEntry[]> {
    const kv = await this.kv();
    const keys = await listKeys(kv);
    const entries: HealthEntry[] = [];
    for (const key of [...keys].sort()) {
      const e = await kv.get(key);
      if (e?.operation !== "PUT" || e.value.length === 0) continue;
      entries.push({ key, exited: key.startsWith(EXITED), written: e.created, ...parseHeartbeat(e.value) });
    }
    const live = new Set(entries.filter((e) => !e.exited).map((e) => e.key));
    return entries.filter((e) => !e.exited || !live.has(e.key.slice(EXITED.length)));
  }
}

/**
 * The bucket's keys from one stream-info request with a subject filter, answered by the stream's leader.
 * Why not `kv.keys()`: it opens an ordered consumer, which lives on one server and can be placed on one
 * that has just died (the learner's rollout reader starved that way: stream-reader.ts), and doctor is run
 * exactly then. The keys' values are then read with direct gets, which any replica answers.
 */
async function listKeys(kv: KV): Promise<Set<string>> {
  const keys = new Set<string>();
  if (!(kv instanceof Bucket)) {
    for await (const k of await kv.keys()) keys.add(k); // a rewritten key can be listed twice: the set keeps one
    return keys;
  }
  const prefix = `$KV.${kv.bucket}.`;
  const info = await kv.jsm.streams.info(kv.stream, { subjects_filter: `${prefix}>` });
  for (const subject of Object.keys(info.state.subjects ?? {})) if (subject.startsWith(prefix)) keys.add(subject.slice(prefix.length));
  return keys;
}

/** Idle ratios of one actor, its instances summed. */
export interface IdleSummary {
  actor: string;
  instances: number;
  busyMs: number;
  waitMs: Record<string, number>;
  /** waitMs per reason as a share of busy + waiting time. */
  idle: Record<string, number>;
}

export function summariseIdle(beats: readonly Heartbeat[]): IdleSummary[] {
  const by = new Map<string, IdleSummary>();
  for (const hb of beats) {
    const s = by.get(hb.actor) ?? { actor: hb.actor, instances: 0, busyMs: 0, waitMs: {}, idle: {} };
    s.instances++;
    s.busyMs += hb.busyMs;
    for (const [reason, w] of Object.entries(hb.waitMs)) s.waitMs[reason] = (s.waitMs[reason] ?? 0) + w;
    by.set(hb.actor, s);
  }
  for (const s of by.values()) {
    const total = s.busyMs + Object.values(s.waitMs).reduce((a, b) => a + b, 0);
    for (const [reason, w] of Object.entries(s.waitMs)) s.idle[reason] = total > 0 ? w / total : 0;
  }
  return [...by.values()].sort((a, b) => a.actor.localeCompare(b.actor));
}

/**
 * Idle ratios per actor from the run's health bucket: live instances and those that exited cleanly (their
 * final accounting). Empty when the run has no health bucket.
 */
export async function readIdleRatios(nc: NatsConnection, run: string): Promise<IdleSummary[]> {
  const board = new HealthBoard(openWire(nc, run).health);
  const entries = await board.read().catch(() => []);
  return summariseIdle(entries.flatMap((e) => (e.heartbeat ? [e.heartbeat] : [])));
}

/** One line per actor: "learner      busy 71%  samples 29%" (waits largest first, shares under 0.5% left out). */
export function formatIdleRatios(summaries: readonly IdleSummary[]): string[] {
  const pct = (x: number) => `${Math.round(x * 100)}%`;
  return summaries.map((s) => {
    const total = s.busyMs + Object.values(s.waitMs).reduce((a, b) => a + b, 0);
    const waits = Object.entries(s.idle)
      .filter(([, r]) => r >= 0.005)
      .sort((a, b) => b[1] - a[1])
      .map(([reason, r]) => `${reason} ${pct(r)}`);
    const name = s.instances > 1 ? `${s.actor} ×${s.instances}` : s.actor;
    return `${name.padEnd(14)} busy ${pct(total > 0 ? s.busyMs / total : 0)}${waits.length ? `  waiting: ${waits.join(", ")}` : ""}`;
  });
}
