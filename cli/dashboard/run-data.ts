// What the dashboard shows, read from the run's own streams and KV and nothing else. Each subject is read
// incrementally from where the last read stopped (ordered consumers, headers only where the payload is not
// needed), so a refresh costs only what arrived since; a rollout group's payload is fetched by sequence
// when someone opens it. Memory stays bounded: metric series keep every point up to a cap, then every
// other point of the older half.
import type { NatsConnection } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import {
  decodeMsgpack,
  Hdr,
  HealthBoard,
  MetricsEventSchema,
  openWire,
  RunChannels,
  RunState,
  StateKeys,
  StreamReader,
  type MetricsEvent,
  type RolloutRow,
} from "../../streams/index.js";
import { Kvm } from "@nats-io/kv";
import { classifyRun, type RunHealth } from "../health/verdicts.js";

const MAX_POINTS = 20_000;

export interface GroupEntry {
  seq: number;
  step: number;
  env: string;
  rows: number;
  policyVersion: number;
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

export interface Overview {
  run: string;
  status: string | null;
  phase: string | null;
  step: number;
  steps: number | null;
  policyVersion: number;
  environments: { key: string; id: string; weight: number }[];
  health: RunHealth | null;
  groups: number;
  deadLetters: number;
}

/** Reads one subject forward, keeping its position between calls. */
class Tail<T> {
  private readonly reader: StreamReader;
  constructor(
    js: JetStreamClient,
    stream: string,
    subject: string,
    private readonly map: (m: { seq: number; data: Uint8Array; headers?: { get(k: string): string }; time: string }) => T | null,
    headersOnly: boolean,
  ) {
    this.reader = new StreamReader(js, { stream, subject, fromSeq: 1, batch: 256, headersOnly });
  }
  private opened = false;
  async more(into: T[]): Promise<void> {
    for (;;) {
      // The first read creates the consumer, which takes a while; later reads only wait for news.
      const m = await this.reader.next(this.opened ? 150 : 1500);
      this.opened = true;
      if (!m) return;
      const v = this.map({
        seq: m.seq,
        data: m.data,
        headers: m.headers,
        time: m.info.timestampNanos ? new Date(m.info.timestampNanos / 1e6).toISOString() : "",
      });
      if (v !== null) into.push(v);
      if (m.info.pending === 0) return;
    }
  }
  close(): Promise<void> {
    return this.reader.close();
  }
}

export class RunData {
  private readonly channels: RunChannels;
  private readonly metricTails = new Map<string, { tail: Tail<MetricsEvent>; events: MetricsEvent[] }>();
  private readonly groupTail: Tail<GroupEntry>;
  private readonly dlqTail: Tail<DeadLetterEntry>;
  readonly groups: GroupEntry[] = [];
  readonly deadLetters: DeadLetterEntry[] = [];
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
      wire.js,
      n.streams.rollouts,
      n.subjects.rolloutsScored,
      (m) => ({
        seq: m.seq,
        step: Number(m.headers?.get(Hdr.step) ?? -1),
        env: m.headers?.get(Hdr.env) ?? "",
        rows: Number(m.headers?.get(Hdr.rows) ?? 0),
        policyVersion: Number(m.headers?.get(Hdr.policyVersion) ?? -1),
        time: m.time,
      }),
      true,
    );
    this.dlqTail = new Tail(
      wire.js,
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
  }

  /** Every metrics event of one actor so far (learner steps, reward groups, evaluator results, ...). */
  async metrics(actor: string): Promise<MetricsEvent[]> {
    let t = this.metricTails.get(actor);
    if (!t) {
      const n = this.channels.wire.names;
      t = {
        tail: new Tail(
          this.channels.wire.js,
          n.streams.events,
          n.subjects.metrics(actor),
          (m) => {
            try {
              return decodeMsgpack(MetricsEventSchema, m.data);
            } catch {
              return null; // a foreign or corrupt event is not plotted
            }
          },
          false,
        ),
        events: [],
      };
      this.metricTails.set(actor, t);
    }
    await t.tail.more(t.events);
    if (t.events.length > MAX_POINTS) {
      const half = Math.floor(t.events.length / 2);
      t.events.splice(0, half, ...t.events.slice(0, half).filter((_, i) => i % 2 === 0));
    }
    return t.events;
  }

  async refresh(): Promise<void> {
    await Promise.all([this.groupTail.more(this.groups), this.dlqTail.more(this.deadLetters)]);
  }

  /** One scored message's rows, decoded (following a blob pointer). */
  async group(seq: number): Promise<RolloutRow[]> {
    const jsm = await this.channels.wire.jsm();
    const m = await jsm.streams.getMessage(this.channels.wire.names.streams.rollouts, { seq });
    if (!m || m.subject !== this.channels.wire.names.subjects.rolloutsScored) throw new Error(`sequence ${seq} is not a scored batch of run ${this.run}`);
    return (await this.channels.scored.decodeMessage({ data: m.data, headers: m.header })).rows;
  }

  async deadLetterPayload(seq: number): Promise<Uint8Array> {
    const jsm = await this.channels.wire.jsm();
    const m = await jsm.streams.getMessage(this.channels.wire.names.streams.events, { seq });
    if (!m) throw new Error(`no dead letter at sequence ${seq}`);
    return m.data;
  }

  async evals(): Promise<Record<string, unknown>> {
    const state = await this.kvState;
    return (await state?.get(StateKeys.evalResults).catch(() => undefined)) ?? {};
  }

  async overview(): Promise<Overview> {
    await this.refresh();
    const state = await this.kvState;
    const get = async <T>(p: Promise<T> | undefined, d: T): Promise<T> => (p ? p.catch(() => d) : d);
    const status = (await get(state?.get(StateKeys.runStatus), undefined)) ?? null;
    const learner = await this.metrics("learner");
    const lastStep = [...learner].reverse().find((e) => e.kind === "step");
    const entries = await new HealthBoard(this.channels.wire.health).read().catch(() => null);
    return {
      run: this.run,
      status,
      phase: (await get(state?.get(StateKeys.runPhase), undefined)) ?? null,
      step: (await get(state?.learnerStep(), 0)) ?? 0,
      steps: lastStep?.values["steps"] ?? null,
      policyVersion: (await get(state?.policyVersion(), -1)) ?? -1,
      environments: (await get(state?.get(StateKeys.environments), undefined)) ?? [],
      health: entries ? classifyRun(entries, status ?? undefined, Date.now()) : null,
      groups: this.groups.length,
      deadLetters: this.deadLetters.length,
    };
  }

  async close(): Promise<void> {
    await Promise.all([this.groupTail.close(), this.dlqTail.close(), ...[...this.metricTails.values()].map((t) => t.tail.close())]);
  }
}
