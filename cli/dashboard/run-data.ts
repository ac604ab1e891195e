// What the dashboard shows, read from the run's own streams and KV and nothing else. Each subject is read
// incrementally from where the last read stopped (ordered consumers, headers only where the payload is not
// needed), so a refresh costs only what arrived since; a rollout group's or an eval sample's payload is
// fetched by sequence when someone opens it. Memory stays bounded: metric series keep every point up to a
// cap, then every other point of the older half; lists keep small index entries, never payloads.
import type { NatsConnection } from "@nats-io/transport-node";
import {
  consumerBacklogs,
  decodeMsgpack,
  EvalMessageSchema,
  Hdr,
  HealthBoard,
  MetricsEventSchema,
  openWire,
  ReplayRecordSchema,
  RunChannels,
  RunState,
  StateAnnouncementSchema,
  StateKeys,
  StepRecordSchema,
  StreamReader,
  summariseIdle,
  WeightsAnnouncementSchema,
  type ConsumerBacklog,
  type EvalMessage,
  type IdleSummary,
  type MetricsEvent,
  type ReplayRecord,
  type RolloutRow,
  type StepRecord,
  type Wire,
} from "../../streams/index.js";
import { Kvm } from "@nats-io/kv";
import type { z } from "zod";
import { classifyRun, type RunHealth } from "../health/verdicts.js";

const MAX_POINTS = 20_000;
/** Queue-depth samples kept (one per overview push of a live run). */
const MAX_QUEUE_SAMPLES = 2_000;

export interface GroupEntry {
  seq: number;
  step: number;
  env: string;
  rows: number;
  policyVersion: number;
  /** Mean, min and max reward of the batch's rows (null for batches stored before these headers existed). */
  rewardMean: number | null;
  rewardMin: number | null;
  rewardMax: number | null;
  time: string;
}

export interface DeadLetterEntry {
  seq: number;
  reason: string;
  subject: string;
  originalSeq: number;
  actor: string;
  time: string;
}

/** An eval message without its completion text (opened by sequence). */
export type EvalEntry =
  | {
      seq: number;
      kind: "sample";
      /** The held-out split ("eval" follows train's distribution; another, e.g. "hard", is reported apart). */
      split: string;
      version: number;
      env: string;
      exampleId: string;
      sampleIndex: number;
      greedy: boolean;
      reward: number;
      stopReason: string;
      completionTokens: number;
    }
  | {
      seq: number;
      kind: "result";
      split: string;
      version: number;
      env: string;
      n: number;
      passAt1: number;
      passAtK: Record<string, number>;
      rewardMean: number;
      seconds: number;
    };

export interface CheckpointEntry {
  seq: number;
  kind: "state" | "weights";
  step: number;
  /** Weights only: the policy version and the phase that made it. */
  version?: number;
  phase?: string;
  object: string;
  bytes: number;
  sha256: string;
  time: string;
}

export interface QueueSample {
  time: number;
  /** pending + unacked per durable consumer. */
  depth: Record<string, number>;
}

export interface Overview {
  run: string;
  status: string | null;
  phase: string | null;
  step: number;
  steps: number | null;
  /** Seconds to the last step at the recent pace, while the run is running. */
  etaSeconds: number | null;
  policyVersion: number;
  latestCheckpoint: number | null;
  environments: { key: string; id: string; weight: number }[];
  health: RunHealth | null;
  groups: number;
  deadLetters: number;
  /** Sequences of the newest group, dead letter, eval message and replay event: the page refreshes what moved. */
  marks: Record<string, number>;
}

interface Stamped {
  seq: number;
  data: Uint8Array;
  headers?: { get(k: string): string };
  time: string;
}

/**
 * Reads one subject forward, keeping its position between calls. Each read first asks the stream for the
 * subject's last sequence (one request) and reads up to it, so an empty or unchanged subject costs no wait
 * and a long one is read in one pass.
 */
/** Keeps a plotted series bounded: past MAX_POINTS, every other point of the older half goes. */
function thin<T>(items: T[]): void {
  if (items.length <= MAX_POINTS) return;
  const half = Math.floor(items.length / 2);
  items.splice(0, half, ...items.slice(0, half).filter((_, i) => i % 2 === 0));
}

/** Decodes a record with its schema; a foreign or corrupt message is not shown. */
function decodedOr<S extends z.ZodType>(schema: S): (m: Stamped) => z.output<S> | null {
  return (m) => {
    try {
      return decodeMsgpack(schema, m.data);
    } catch {
      return null;
    }
  };
}

class Tail<T> {
  private readonly reader: StreamReader;
  /** The highest sequence read so far. */
  private upTo = 0;
  /** One read at a time: two page requests at once must not interleave on one consumer. */
  private running: Promise<void> = Promise.resolve();
  constructor(
    private readonly wire: Wire,
    private readonly stream: string,
    private readonly subject: string,
    private readonly map: (m: Stamped) => T | null,
    headersOnly: boolean,
  ) {
    this.reader = new StreamReader(wire.js, { stream, subject, fromSeq: 1, batch: 256, headersOnly });
  }
  more(into: T[]): Promise<void> {
    this.running = this.running.then(() => this.read(into));
    return this.running;
  }
  private async lastSeq(): Promise<number> {
    const jsm = await this.wire.jsm();
    const m = await jsm.streams.getMessage(this.stream, { last_by_subj: this.subject }).catch(() => null);
    return m?.seq ?? 0;
  }
  private async read(into: T[]): Promise<void> {
    const last = await this.lastSeq();
    while (this.upTo < last) {
      const m = await this.reader.next(5000);
      if (!m) return; // the server went away or the messages were purged: the next refresh tries again
      this.upTo = m.seq;
      const v = this.map({
        seq: m.seq,
        data: m.data,
        headers: m.headers,
        time: m.info.timestampNanos ? new Date(m.info.timestampNanos / 1e6).toISOString() : "",
      });
      if (v !== null) into.push(v);
    }
  }
  async close(): Promise<void> {
    await this.running.catch(() => undefined);
    await this.reader.close();
  }
}

const numHeader = (m: Stamped, name: string): number | null => {
  const v = m.headers?.get(name);
  if (!v) return null;
  const x = Number(v);
  return Number.isFinite(x) ? x : null;
};

function evalEntry(m: Stamped): EvalEntry | null {
  let e: EvalMessage;
  try {
    e = decodeMsgpack(EvalMessageSchema, m.data);
  } catch {
    return null; // a foreign or corrupt message is not listed
  }
  return e.kind === "sample"
    ? {
        seq: m.seq,
        kind: "sample",
        split: e.split ?? "eval",
        version: e.version,
        env: e.env,
        exampleId: e.exampleId,
        sampleIndex: e.sampleIndex,
        greedy: e.greedy,
        reward: e.reward,
        stopReason: e.stopReason,
        completionTokens: e.completionTokens,
      }
    : {
        seq: m.seq,
        kind: "result",
        split: e.split ?? "eval",
        version: e.version,
        env: e.env,
        n: e.n,
        passAt1: e.passAt1,
        passAtK: e.passAtK,
        rewardMean: e.rewardMean,
        seconds: e.seconds,
      };
}

function checkpointEntry(kind: "state" | "weights"): (m: Stamped) => CheckpointEntry | null {
  return (m) => {
    try {
      if (kind === "state") {
        const a = decodeMsgpack(StateAnnouncementSchema, m.data);
        return { seq: m.seq, kind, step: a.step, object: a.object, bytes: a.bytes, sha256: a.sha256, time: m.time };
      }
      const a = decodeMsgpack(WeightsAnnouncementSchema, m.data);
      return { seq: m.seq, kind, step: a.step, version: a.version, phase: a.phase, object: a.object, bytes: a.bytes, sha256: a.sha256, time: m.time };
    } catch {
      return null;
    }
  };
}

export class RunData {
  private readonly channels: RunChannels;
  private readonly metricTails = new Map<string, { tail: Tail<MetricsEvent>; events: MetricsEvent[] }>();
  private readonly stepTail: { tail: Tail<StepRecord>; records: StepRecord[] };
  private readonly replayTail: { tail: Tail<ReplayRecord>; records: ReplayRecord[] };
  private readonly groupTail: Tail<GroupEntry>;
  private readonly dlqTail: Tail<DeadLetterEntry>;
  private readonly evalTail: Tail<EvalEntry>;
  private readonly stateTail: Tail<CheckpointEntry>;
  private readonly weightsTail: Tail<CheckpointEntry>;
  readonly groups: GroupEntry[] = [];
  readonly deadLetters: DeadLetterEntry[] = [];
  readonly evalEntries: EvalEntry[] = [];
  readonly states: CheckpointEntry[] = [];
  readonly weights: CheckpointEntry[] = [];
  readonly queueSamples: QueueSample[] = [];
  private kvState: Promise<RunState | null>;

  constructor(
    nc: NatsConnection,
    readonly run: string,
  ) {
    const wire = openWire(nc, run);
    this.channels = new RunChannels(wire);
    const n = wire.names;
    this.kvState = new Kvm(nc)
      .open(n.kvBucket)
      .then((kv) => new RunState(kv))
      .catch(() => null);
    this.groupTail = new Tail(
      wire,
      n.streams.rollouts,
      n.subjects.rolloutsScored,
      (m) => ({
        seq: m.seq,
        step: Number(m.headers?.get(Hdr.step) ?? -1),
        env: m.headers?.get(Hdr.env) ?? "",
        rows: Number(m.headers?.get(Hdr.rows) ?? 0),
        policyVersion: Number(m.headers?.get(Hdr.policyVersion) ?? -1),
        rewardMean: numHeader(m, Hdr.rewardMean),
        rewardMin: numHeader(m, Hdr.rewardMin),
        rewardMax: numHeader(m, Hdr.rewardMax),
        time: m.time,
      }),
      true,
    );
    this.dlqTail = new Tail(
      wire,
      n.streams.events,
      n.subjects.dlq,
      (m) => ({
        seq: m.seq,
        reason: m.headers?.get(Hdr.error) ?? "",
        subject: m.headers?.get(Hdr.originalSubject) ?? "",
        originalSeq: Number(m.headers?.get(Hdr.originalSeq) ?? 0),
        actor: m.headers?.get(Hdr.actor) ?? "",
        time: m.time,
      }),
      true,
    );
    this.evalTail = new Tail(wire, n.streams.events, n.subjects.eval, evalEntry, false);
    this.stateTail = new Tail(wire, n.streams.events, n.subjects.checkpoints, checkpointEntry("state"), false);
    this.weightsTail = new Tail(wire, n.streams.events, n.subjects.weights, checkpointEntry("weights"), false);
    this.stepTail = { tail: new Tail(wire, n.streams.events, n.subjects.steps, decodedOr(StepRecordSchema), false), records: [] };
    this.replayTail = { tail: new Tail(wire, n.streams.events, n.subjects.replays, decodedOr(ReplayRecordSchema), false), records: [] };
  }

  /** The learner's step records so far, in stream order (a step recomputed after a restore appears again). */
  async steps(): Promise<StepRecord[]> {
    await this.stepTail.tail.more(this.stepTail.records);
    thin(this.stepTail.records);
    return this.stepTail.records;
  }

  /** Every replayed step recorded with the run. */
  async replays(): Promise<ReplayRecord[]> {
    await this.replayTail.tail.more(this.replayTail.records);
    return this.replayTail.records;
  }

  /** Every metrics event of one actor so far (reward groups, inference tasks, SFT steps, ...): display only. */
  async metrics(actor: string): Promise<MetricsEvent[]> {
    let t = this.metricTails.get(actor);
    if (!t) {
      const n = this.channels.wire.names;
      t = {
        tail: new Tail(this.channels.wire, n.streams.events, n.subjects.metrics(actor), decodedOr(MetricsEventSchema), false),
        events: [],
      };
      this.metricTails.set(actor, t);
    }
    await t.tail.more(t.events);
    thin(t.events);
    return t.events;
  }

  async refresh(): Promise<void> {
    await Promise.all([this.groupTail.more(this.groups), this.dlqTail.more(this.deadLetters)]);
  }

  async evalIndex(): Promise<EvalEntry[]> {
    await this.evalTail.more(this.evalEntries);
    return this.evalEntries;
  }

  async checkpoints(): Promise<{ latest: number | null; states: CheckpointEntry[]; weights: CheckpointEntry[] }> {
    await Promise.all([this.stateTail.more(this.states), this.weightsTail.more(this.weights)]);
    const state = await this.kvState;
    const latest = (await state?.get(StateKeys.checkpointLatest).catch(() => undefined)) ?? null;
    return { latest, states: this.states, weights: this.weights };
  }

  /** One scored message's rows, decoded (following a blob pointer). */
  async group(seq: number): Promise<RolloutRow[]> {
    const jsm = await this.channels.wire.jsm();
    const m = await jsm.streams.getMessage(this.channels.wire.names.streams.rollouts, { seq });
    if (!m || m.subject !== this.channels.wire.names.subjects.rolloutsScored) throw new Error(`sequence ${seq} is not a scored batch of run ${this.run}`);
    return (await this.channels.scored.decodeMessage({ data: m.data, headers: m.header })).rows;
  }

  /** One eval sample with its messages. */
  async evalSample(seq: number): Promise<EvalMessage> {
    const jsm = await this.channels.wire.jsm();
    const m = await jsm.streams.getMessage(this.channels.wire.names.streams.events, { seq });
    if (!m || m.subject !== this.channels.wire.names.subjects.eval) throw new Error(`sequence ${seq} is not an eval message of run ${this.run}`);
    return this.channels.eval.decodeMessage({ data: m.data, headers: m.header });
  }

  /** A dead letter's original payload, as stored. */
  async deadLetterPayload(seq: number): Promise<Uint8Array> {
    const jsm = await this.channels.wire.jsm();
    const m = await jsm.streams.getMessage(this.channels.wire.names.streams.events, { seq });
    if (!m || m.subject !== this.channels.wire.names.subjects.dlq) throw new Error(`sequence ${seq} is not a dead letter of run ${this.run}`);
    return m.data;
  }

  async evals(): Promise<Record<string, unknown>> {
    const state = await this.kvState;
    return (await state?.get(StateKeys.evalResults).catch(() => undefined)) ?? {};
  }

  /** Every instance's verdict as the doctor gives it, and each actor's idle ratios, from the heartbeats. */
  async health(): Promise<{ run: RunHealth; idle: IdleSummary[] }> {
    const entries = await new HealthBoard(this.channels.wire.health).read().catch(() => []);
    const status = (await (await this.kvState)?.get(StateKeys.runStatus).catch(() => undefined)) ?? undefined;
    return { run: classifyRun(entries, status, Date.now()), idle: summariseIdle(entries.flatMap((e) => (e.heartbeat ? [e.heartbeat] : []))) };
  }

  /** What each durable consumer has not finished, plus the streams' sizes; sampled into a depth series. */
  async queues(): Promise<{ consumers: ConsumerBacklog[]; streams: { name: string; messages: number; bytes: number }[]; samples: QueueSample[] }> {
    const consumers = await consumerBacklogs(this.channels.wire).catch(() => []);
    const jsm = await this.channels.wire.jsm();
    const streams = [];
    for (const name of Object.values(this.channels.wire.names.streams)) {
      const info = await jsm.streams.info(name).catch(() => null);
      if (info) streams.push({ name, messages: info.state.messages, bytes: info.state.bytes });
    }
    this.sampleQueues(consumers);
    return { consumers, streams, samples: this.queueSamples };
  }

  private sampleQueues(consumers: ConsumerBacklog[]): void {
    if (consumers.length === 0) return;
    this.queueSamples.push({ time: Date.now(), depth: Object.fromEntries(consumers.map((c) => [c.consumer, c.pending + c.ackPending])) });
    if (this.queueSamples.length > MAX_QUEUE_SAMPLES) this.queueSamples.splice(0, this.queueSamples.length - MAX_QUEUE_SAMPLES);
  }

  async overview(): Promise<Overview> {
    await this.refresh();
    const state = await this.kvState;
    const get = async <T>(p: Promise<T> | undefined, d: T): Promise<T> => (p ? p.catch(() => d) : d);
    const status = (await get(state?.get(StateKeys.runStatus), undefined)) ?? null;
    const stepsDone = await this.steps();
    const lastStep = stepsDone.at(-1);
    const entries = await new HealthBoard(this.channels.wire.health).read().catch(() => null);
    const step = (await get(state?.learnerStep(), 0)) ?? 0;
    const steps = lastStep?.steps ?? null;
    // The pace of the last (up to) 20 steps: an early SFT phase or a slow start does not skew it.
    const recent = stepsDone.slice(-21);
    let etaSeconds: number | null = null;
    if (status === "running" && steps !== null && recent.length >= 2) {
      const perStep = (recent.at(-1)!.time - recent[0]!.time) / (recent.length - 1) / 1000;
      etaSeconds = Math.max(0, Math.round((steps - step) * perStep));
    }
    const replays = (await this.replays()).length;
    return {
      run: this.run,
      status,
      phase: (await get(state?.get(StateKeys.runPhase), undefined)) ?? null,
      step,
      steps,
      etaSeconds,
      policyVersion: (await get(state?.policyVersion(), -1)) ?? -1,
      latestCheckpoint: (await get(state?.get(StateKeys.checkpointLatest), undefined)) ?? null,
      environments: (await get(state?.get(StateKeys.environments), undefined)) ?? [],
      health: entries ? classifyRun(entries, status ?? undefined, Date.now()) : null,
      groups: this.groups.length,
      deadLetters: this.deadLetters.length,
      marks: {
        groups: this.groups.at(-1)?.seq ?? 0,
        deadLetters: this.deadLetters.at(-1)?.seq ?? 0,
        learner: stepsDone.length,
        replays,
      },
    };
  }

  async close(): Promise<void> {
    await Promise.all(
      [
        this.groupTail,
        this.dlqTail,
        this.evalTail,
        this.stateTail,
        this.weightsTail,
        this.stepTail.tail,
        this.replayTail.tail,
        ...[...this.metricTails.values()].map((t) => t.tail),
      ].map((t) => t.close()),
    );
  }
}
