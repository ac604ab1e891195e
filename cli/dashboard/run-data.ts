// What the dashboard shows, read from the run's own streams and KV and nothing else. Each subject is read
// incrementally from where the last read stopped (ordered consumers, headers only where the payload is not
// needed), so a refresh costs only what arrived since; a rollout group's or an eval sample's payload is
// fetched by sequence when someone opens it. Memory stays bounded: metric series keep every point up to a
// cap, then every other point of the older half; lists keep small index entries, never payloads.
// Everything read is kept (kept.ts): when the run's server goes away — a finished `train` stops its own —
// every method answers within a few seconds with what was read before, and the overview says so.
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
  withDeadline,
  WeightsAnnouncementSchema,
  type ConsumerBacklog,
  type EvalMessage,
  type HealthEntry,
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
import { Kept, Link, MAX_WAIT_MS, STALL_MS, type ServerState } from "./kept.js";

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
  /** null until the first policy version is published (during an SFT stage, say). */
  policyVersion: number | null;
  latestCheckpoint: number | null;
  environments: { key: string; id: string; weight: number }[];
  health: RunHealth | null;
  groups: number;
  deadLetters: number;
  /** The SFT stage's progress, from the learner's "sft" metrics events; null for a run without one. */
  sft: { step: number; steps: number; loss: number } | null;
  /**
   * Whether the run's server answers. "unreachable": the connection is down (since `since`, ISO time),
   * "not answering": connected but a read made no progress for a while; either way the figures are the ones
   * read before. `ended`: the run is over (done or failed) or its server is gone.
   */
  server: { state: ServerState; since: string | null; ended: boolean };
  /** Reads still catching up (a long run's first read): the page reads again until they are done. */
  reading: boolean;
  /** Sequences of the newest group, dead letter, eval message and replay event: the page refreshes what moved. */
  marks: Record<string, number>;
}

/** The run's KV keys the overview shows; a key that cannot be read keeps its last value. */
interface KvSnapshot {
  status: string | null;
  phase: string | null;
  step: number;
  policyVersion: number | null;
  latestCheckpoint: number | null;
  environments: { key: string; id: string; weight: number }[];
}

const NO_KV: KvSnapshot = { status: null, phase: null, step: 0, policyVersion: null, latestCheckpoint: null, environments: [] };

interface Stamped {
  seq: number;
  data: Uint8Array;
  headers?: { get(k: string): string };
  time: string;
}

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

/**
 * Reads one subject forward, keeping its position and every entry read. Each read first asks the stream for
 * the subject's last sequence (one request) and reads up to it, so an empty or unchanged subject costs no
 * wait and a long one is read in one pass; each message read is progress (callers keep waiting for it).
 */
class Tail<T> extends Kept<T[]> {
  private readonly reader: StreamReader;
  /** The highest sequence read so far. */
  private upTo = 0;
  constructor(
    link: Link,
    private readonly wire: Wire,
    private readonly stream: string,
    private readonly subject: string,
    private readonly map: (m: Stamped) => T | null,
    headersOnly: boolean,
  ) {
    super(link, []);
    this.reader = new StreamReader(wire.js, { stream, subject, fromSeq: 1, batch: 256, headersOnly });
  }
  private async lastSeq(): Promise<number> {
    const jsm = await this.wire.jsm();
    const m = await jsm.streams.getMessage(this.stream, { last_by_subj: this.subject }).catch(() => null);
    return m?.seq ?? 0;
  }
  protected override async load(into: T[]): Promise<T[]> {
    const last = await this.lastSeq();
    while (this.upTo < last) {
      const m = await this.reader.next(5000, this.link.closing.signal);
      if (!m) break; // the server went away, the messages were purged, or the dashboard closes: the next read tries again
      this.progress();
      this.upTo = m.seq;
      const v = this.map({
        seq: m.seq,
        data: m.data,
        headers: m.headers,
        time: m.info.timestampNanos ? new Date(m.info.timestampNanos / 1e6).toISOString() : "",
      });
      if (v !== null) into.push(v);
    }
    return into;
  }
  /** Drops the consumer; its deletion on a server that is gone is not waited for. */
  close(): Promise<void> {
    return this.reader.close();
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

/** The server did not give a payload: it is unreachable, or did not answer in time (routes answer 503). */
export class ServerGoneError extends Error {
  override readonly name = "ServerGoneError";
}

const ENDED_STATUSES = new Set(["done", "failed"]);

export class RunData {
  private readonly channels: RunChannels;
  private readonly link: Link;
  private readonly metricTails = new Map<string, Tail<MetricsEvent>>();
  private readonly stepTail: Tail<StepRecord>;
  private readonly replayTail: Tail<ReplayRecord>;
  private readonly groupTail: Tail<GroupEntry>;
  private readonly dlqTail: Tail<DeadLetterEntry>;
  private readonly evalTail: Tail<EvalEntry>;
  private readonly stateTail: Tail<CheckpointEntry>;
  private readonly weightsTail: Tail<CheckpointEntry>;
  private readonly keys: Kept<KvSnapshot>;
  private readonly evalResults: Kept<Record<string, unknown>>;
  private readonly healthEntries: Kept<HealthEntry[] | null>;
  private readonly backlog: Kept<{ consumers: ConsumerBacklog[]; streams: { name: string; messages: number; bytes: number }[] }>;
  readonly queueSamples: QueueSample[] = [];
  /** Opened on first use (and again after a failure: the server may not have been up yet). */
  private runState: Promise<RunState> | null = null;

  constructor(
    private readonly nc: NatsConnection,
    readonly run: string,
  ) {
    const wire = openWire(nc, run);
    this.channels = new RunChannels(wire);
    const link = new Link(nc);
    this.link = link;
    const n = wire.names;
    this.groupTail = new Tail(
      link,
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
      link,
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
    this.evalTail = new Tail(link, wire, n.streams.events, n.subjects.eval, evalEntry, false);
    this.stateTail = new Tail(link, wire, n.streams.events, n.subjects.checkpoints, checkpointEntry("state"), false);
    this.weightsTail = new Tail(link, wire, n.streams.events, n.subjects.weights, checkpointEntry("weights"), false);
    this.stepTail = new Tail(link, wire, n.streams.events, n.subjects.steps, decodedOr(StepRecordSchema), false);
    this.replayTail = new Tail(link, wire, n.streams.events, n.subjects.replays, decodedOr(ReplayRecordSchema), false);
    this.keys = new Kept(link, NO_KV, (prev) => this.readKv(prev));
    this.evalResults = new Kept<Record<string, unknown>>(link, {}, async () => (await (await this.state()).get(StateKeys.evalResults)) ?? {});
    this.healthEntries = new Kept<HealthEntry[] | null>(link, null, () => new HealthBoard(wire.health).read());
    this.backlog = new Kept(link, { consumers: [], streams: [] }, () => this.readBacklog());
    void this.watchStatus().catch(() => undefined);
  }

  /**
   * The moment the run ends, read everything: `train` stops its own server soon after, and what was not read
   * by then is gone from this dashboard (the overview's poll alone may come too late). A plain KV watch is
   * enough: when it fails the poll still sees the end, a little later.
   */
  private async watchStatus(): Promise<void> {
    const signal = this.link.closing.signal;
    const w = await (await this.state()).kv.watch({ key: StateKeys.runStatus });
    if (signal.aborted) return w.stop();
    signal.addEventListener("abort", () => w.stop(), { once: true });
    for await (const e of w) {
      if (e.operation === "PUT" && ENDED_STATUSES.has(new TextDecoder().decode(e.value).replaceAll('"', ""))) this.readAll();
    }
  }

  get groups(): readonly GroupEntry[] {
    return this.groupTail.value;
  }

  get deadLetters(): readonly DeadLetterEntry[] {
    return this.dlqTail.value;
  }

  private state(): Promise<RunState> {
    this.runState ??= new Kvm(this.nc).open(this.channels.wire.names.kvBucket).then((kv) => new RunState(kv));
    this.runState.catch(() => {
      this.runState = null;
    });
    return this.runState;
  }

  private async readKv(prev: KvSnapshot): Promise<KvSnapshot> {
    const state = await this.state();
    // A key that is not set is null; one that cannot be read now keeps what was read before.
    const read = <T>(p: Promise<T | undefined>, before: T | null): Promise<T | null> => p.then((v) => v ?? null).catch(() => before);
    const [status, phase, step, policyVersion, latestCheckpoint, environments] = await Promise.all([
      read(state.get(StateKeys.runStatus), prev.status),
      read(state.get(StateKeys.runPhase), prev.phase),
      read(state.get(StateKeys.learnerStep), prev.step),
      read(state.get(StateKeys.policyVersion), prev.policyVersion),
      read(state.get(StateKeys.checkpointLatest), prev.latestCheckpoint),
      read(state.get(StateKeys.environments), prev.environments),
    ]);
    // The run just ended: its server may stop any moment (train stops its own), so read everything now.
    if (status && ENDED_STATUSES.has(status) && !ENDED_STATUSES.has(prev.status ?? "")) this.readAll();
    return { status, phase, step: step ?? 0, policyVersion, latestCheckpoint, environments: environments ?? [] };
  }

  private async readBacklog(): Promise<{ consumers: ConsumerBacklog[]; streams: { name: string; messages: number; bytes: number }[] }> {
    const consumers = await consumerBacklogs(this.channels.wire).catch(() => []);
    const jsm = await this.channels.wire.jsm();
    const streams = [];
    for (const name of Object.values(this.channels.wire.names.streams)) {
      const info = await jsm.streams.info(name).catch(() => null);
      if (info) streams.push({ name, messages: info.state.messages, bytes: info.state.bytes });
    }
    this.sampleQueues(consumers);
    return { consumers, streams };
  }

  /** Starts a read of everything the page shows, waiting for none of them. */
  private readAll(): void {
    for (const actor of ["learner", "reward", "inference"]) this.metricTail(actor);
    for (const k of [...this.tails(), this.keys, this.evalResults, this.healthEntries, this.backlog]) k.start();
  }

  private tails(): Tail<unknown>[] {
    return [
      this.groupTail,
      this.dlqTail,
      this.evalTail,
      this.stateTail,
      this.weightsTail,
      this.stepTail,
      this.replayTail,
      ...this.metricTails.values(),
    ] as Tail<unknown>[];
  }

  private metricTail(actor: string): Tail<MetricsEvent> {
    let t = this.metricTails.get(actor);
    if (!t) {
      const n = this.channels.wire.names;
      t = new Tail(this.link, this.channels.wire, n.streams.events, n.subjects.metrics(actor), decodedOr(MetricsEventSchema), false);
      this.metricTails.set(actor, t);
    }
    return t;
  }

  /** The learner's step records so far, in stream order (a step recomputed after a restore appears again). */
  async steps(): Promise<StepRecord[]> {
    const records = await this.stepTail.get();
    thin(records);
    return records;
  }

  /** Every replayed step recorded with the run. */
  replays(): Promise<ReplayRecord[]> {
    return this.replayTail.get();
  }

  /** Every metrics event of one actor so far (reward groups, inference tasks, SFT steps, ...): display only. */
  async metrics(actor: string): Promise<MetricsEvent[]> {
    const events = await this.metricTail(actor).get();
    thin(events);
    return events;
  }

  async refresh(): Promise<void> {
    await Promise.all([this.groupTail.get(), this.dlqTail.get()]);
  }

  evalIndex(): Promise<EvalEntry[]> {
    return this.evalTail.get();
  }

  async checkpoints(): Promise<{ latest: number | null; states: CheckpointEntry[]; weights: CheckpointEntry[] }> {
    const [states, weights, kv] = await Promise.all([this.stateTail.get(), this.weightsTail.get(), this.keys.get()]);
    return { latest: kv.latestCheckpoint, states, weights };
  }

  /** One stored message by sequence, for a payload the page opens (never kept: see the file's comment). */
  private async message(stream: string, seq: number) {
    if (!this.link.up) throw new ServerGoneError(`the run's server is unreachable: ${this.unreachableHint()}`);
    const get = this.channels.wire.jsm().then((jsm) => jsm.streams.getMessage(stream, { seq }));
    return withDeadline(get, STALL_MS, `reading sequence ${seq} of ${stream}`).catch((e: Error) => {
      if (e.name === "DeadlineError") throw new ServerGoneError(`the run's server did not answer: ${e.message}`);
      throw e;
    });
  }

  private unreachableHint(): string {
    return `payloads are read on demand; restart the dashboard (\`rollstream dashboard --run ${this.run}\`) to serve the run's stored streams`;
  }

  /** One scored message's rows, decoded (following a blob pointer). */
  async group(seq: number): Promise<RolloutRow[]> {
    const m = await this.message(this.channels.wire.names.streams.rollouts, seq);
    if (!m || m.subject !== this.channels.wire.names.subjects.rolloutsScored) throw new Error(`sequence ${seq} is not a scored batch of run ${this.run}`);
    const decoded = this.channels.scored.decodeMessage({ data: m.data, headers: m.header });
    return (await withDeadline(decoded, MAX_WAIT_MS, `reading scored batch ${seq}`)).rows;
  }

  /** One eval sample with its messages. */
  async evalSample(seq: number): Promise<EvalMessage> {
    const m = await this.message(this.channels.wire.names.streams.events, seq);
    if (!m || m.subject !== this.channels.wire.names.subjects.eval) throw new Error(`sequence ${seq} is not an eval message of run ${this.run}`);
    return this.channels.eval.decodeMessage({ data: m.data, headers: m.header });
  }

  /** A dead letter's original payload, as stored. */
  async deadLetterPayload(seq: number): Promise<Uint8Array> {
    const m = await this.message(this.channels.wire.names.streams.events, seq);
    if (!m || m.subject !== this.channels.wire.names.subjects.dlq) throw new Error(`sequence ${seq} is not a dead letter of run ${this.run}`);
    return m.data;
  }

  evals(): Promise<Record<string, unknown>> {
    return this.evalResults.get();
  }

  /** Every instance's verdict as the doctor gives it, and each actor's idle ratios, from the heartbeats. */
  async health(): Promise<{ run: RunHealth; idle: IdleSummary[] }> {
    const [entries, kv] = await Promise.all([this.healthEntries.get(), this.keys.get()]);
    const list = entries ?? [];
    return {
      run: classifyRun(list, kv.status ?? undefined, Date.now()),
      idle: summariseIdle(list.flatMap((e) => (e.heartbeat ? [e.heartbeat] : []))),
    };
  }

  /** What each durable consumer has not finished, plus the streams' sizes; sampled into a depth series. */
  async queues(): Promise<{ consumers: ConsumerBacklog[]; streams: { name: string; messages: number; bytes: number }[]; samples: QueueSample[] }> {
    const b = await this.backlog.get();
    return { ...b, samples: this.queueSamples };
  }

  private sampleQueues(consumers: ConsumerBacklog[]): void {
    if (consumers.length === 0) return;
    this.queueSamples.push({ time: Date.now(), depth: Object.fromEntries(consumers.map((c) => [c.consumer, c.pending + c.ackPending])) });
    if (this.queueSamples.length > MAX_QUEUE_SAMPLES) this.queueSamples.splice(0, this.queueSamples.length - MAX_QUEUE_SAMPLES);
  }

  /** Whether the run's server answers, as far as the dashboard can tell (see Overview.server). */
  private server(status: string | null): Overview["server"] {
    const stalled = [this.keys, this.healthEntries, ...this.tails()].some((k) => k.stalledMs > STALL_MS);
    const state: ServerState = !this.link.up ? "unreachable" : stalled ? "not answering" : "connected";
    return {
      state,
      since: state === "unreachable" ? new Date(this.link.since).toISOString() : null,
      ended: (status !== null && ENDED_STATUSES.has(status)) || state === "unreachable",
    };
  }

  async overview(): Promise<Overview> {
    const learner = this.metricTail("learner");
    const [kv, stepsDone, replays, entries, learnerEvents] = await Promise.all([
      this.keys.get(),
      this.steps(),
      this.replays(),
      this.healthEntries.get(),
      learner.get(),
      this.refresh(),
    ]);
    const { status, step } = kv;
    const lastStep = stepsDone.at(-1);
    const steps = lastStep?.steps ?? null;
    // The pace of the last (up to) 20 steps: an early SFT phase or a slow start does not skew it.
    const recent = stepsDone.slice(-21);
    let etaSeconds: number | null = null;
    const server = this.server(status);
    if (status === "running" && !server.ended && steps !== null && recent.length >= 2) {
      const perStep = (recent.at(-1)!.time - recent[0]!.time) / (recent.length - 1) / 1000;
      etaSeconds = Math.max(0, Math.round((steps - step) * perStep));
    }
    let sft: MetricsEvent | undefined;
    for (let i = learnerEvents.length - 1; i >= 0 && !sft; i--) if (learnerEvents[i]!.kind === "sft") sft = learnerEvents[i];
    return {
      run: this.run,
      status,
      phase: kv.phase,
      step,
      steps,
      etaSeconds,
      policyVersion: kv.policyVersion,
      latestCheckpoint: kv.latestCheckpoint,
      environments: kv.environments,
      health: entries ? classifyRun(entries, status ?? undefined, Date.now()) : null,
      groups: this.groups.length,
      deadLetters: this.deadLetters.length,
      sft: sft ? { step: sft.values["sftStep"] ?? sft.step ?? 0, steps: sft.values["sftSteps"] ?? 0, loss: sft.values["loss"] ?? Number.NaN } : null,
      server,
      reading: this.tails().some((t) => t.busy),
      marks: {
        groups: this.groups.at(-1)?.seq ?? 0,
        deadLetters: this.deadLetters.at(-1)?.seq ?? 0,
        learner: stepsDone.length,
        sft: learnerEvents.length,
        replays: replays.length,
      },
    };
  }

  /** Stops every reader at once; consumers on a server that is gone are not waited for (they expire there). */
  async close(): Promise<void> {
    this.link.closing.abort();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(this.tails().map((t) => t.close())),
      new Promise((r) => {
        timer = setTimeout(r, 500);
      }),
    ]);
    clearTimeout(timer);
  }
}
