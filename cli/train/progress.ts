// The live view of a run: every metrics event goes to runs/<run>/metrics.jsonl and every learner StepRecord
// to runs/<run>/steps.jsonl, and a progress display shows step, reward, pass rate, tokens/s, staleness and
// queue depths. Without a TTY it prints a line every few seconds instead of redrawing.
import { AppendLog, type DiskFullWatcher } from "../../deploy/local/append-log.js";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { JetStreamManager } from "@nats-io/jetstream";
import cliProgress from "cli-progress";
import { decodeMsgpack, MetricsEventSchema, StepRecordSchema, type MetricsEvent, type RunNames, type StepRecord } from "../../streams/index.js";

export interface ProgressState {
  phase: "starting" | "sft" | "rl" | "done";
  sftStep: number;
  sftSteps: number;
  sftLoss: number;
  step: number;
  steps: number;
  rewardMean: number;
  passRate: number;
  loss: number;
  stalenessMean: number;
  droppedStaleTotal: number;
  genTokensPerSec: number;
  trainTokensPerSec: number;
  tasksPending: number;
  groupsPending: number;
  dlq: number;
}

export class RunProgress {
  readonly state: ProgressState = {
    phase: "starting",
    sftStep: 0,
    sftSteps: 0,
    sftLoss: NaN,
    step: 0,
    steps: 0,
    rewardMean: NaN,
    passRate: NaN,
    loss: NaN,
    stalenessMean: 0,
    droppedStaleTotal: 0,
    genTokensPerSec: 0,
    trainTokensPerSec: 0,
    tasksPending: 0,
    groupsPending: 0,
    dlq: 0,
  };
  private subs: Subscription[] = [];
  private timer: NodeJS.Timeout | null = null;
  private genWindow: Array<{ t: number; tokens: number }> = [];
  private bar: cliProgress.SingleBar | null = null;
  private barPhase: string | null = null;
  private lastPlain = 0;
  private readonly metricsFile: AppendLog;
  private readonly stepsFile: AppendLog;
  readonly tty = process.stdout.isTTY === true;

  constructor(
    private readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly names: RunNames,
    files: { metrics: string; steps: string },
    rlSteps: number,
    diskFull: DiskFullWatcher,
  ) {
    this.state.steps = rlSteps;
    this.metricsFile = new AppendLog(files.metrics, diskFull);
    this.stepsFile = new AppendLog(files.steps, diskFull);
  }

  start(): void {
    this.follow(this.names.subjects.metricsAll, (data) => {
      const e = decodeMsgpack(MetricsEventSchema, data, "metrics event");
      this.metricsFile.write(`${JSON.stringify(e)}\n`);
      this.apply(e);
    });
    this.follow(this.names.subjects.steps, (data) => {
      const r = decodeMsgpack(StepRecordSchema, data, "step record");
      this.stepsFile.write(`${JSON.stringify(r)}\n`);
      this.applyStep(r);
    });
    this.timer = setInterval(() => void this.poll(), 1000);
  }

  /** Hands every message of `subject` to `take`; one that does not decode is passed over (the stream keeps it). */
  private follow(subject: string, take: (data: Uint8Array) => void): void {
    const sub = this.nc.subscribe(subject);
    this.subs.push(sub);
    (async () => {
      for await (const m of sub) {
        try {
          take(m.data);
        } catch {
          /* not ours to judge here: the actors dead-letter what they read */
        }
      }
    })().catch(() => undefined);
  }

  private apply(e: MetricsEvent): void {
    const v = e.values;
    const s = this.state;
    if (e.actor === "learner" && e.kind === "sft") {
      s.phase = "sft";
      s.sftStep = v.sftStep ?? s.sftStep;
      s.sftSteps = v.sftSteps ?? s.sftSteps;
      s.sftLoss = v.loss ?? s.sftLoss;
      s.trainTokensPerSec = v.tokensPerSec ?? s.trainTokensPerSec;
    } else if (e.actor === "inference" && e.kind === "task") {
      if (s.phase === "starting" || s.phase === "sft") s.phase = "rl";
      this.genWindow.push({ t: e.time, tokens: v.generatedTokens ?? 0 });
    }
  }

  private applyStep(r: StepRecord): void {
    const s = this.state;
    s.phase = "rl";
    s.step = r.step;
    s.rewardMean = r.rewardMean;
    s.passRate = r.passRate;
    s.loss = r.loss;
    s.stalenessMean = r.stalenessMean;
    s.droppedStaleTotal = r.droppedStaleTotal;
    s.trainTokensPerSec = r.tokensPerSec;
  }

  private async poll(): Promise<void> {
    const now = Date.now();
    this.genWindow = this.genWindow.filter((x) => now - x.t < 10_000);
    const span = this.genWindow.length > 1 ? Math.max(1, now - this.genWindow[0]!.t) : 10_000;
    this.state.genTokensPerSec = (this.genWindow.reduce((a, x) => a + x.tokens, 0) * 1000) / span;
    try {
      const ti = await this.jsm.consumers.info(this.names.streams.tasks, this.names.consumers.inference);
      this.state.tasksPending = ti.num_pending + ti.num_ack_pending;
      const ri = await this.jsm.consumers.info(this.names.streams.rollouts, this.names.consumers.reward);
      this.state.groupsPending = ri.num_pending + ri.num_ack_pending;
      const ev = await this.jsm.streams.info(this.names.streams.events, { subjects_filter: this.names.subjects.dlq });
      this.state.dlq = ev.state.subjects?.[this.names.subjects.dlq] ?? 0;
    } catch {
      /* server busy or restarting: keep the last figures */
    }
    this.render();
  }

  render(): void {
    const s = this.state;
    const fmt = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : "-");
    if (!this.tty) {
      if (Date.now() - this.lastPlain < 5000) return;
      this.lastPlain = Date.now();
      if (s.phase === "sft")
        process.stdout.write(`[sft] step ${s.sftStep}/${s.sftSteps} loss ${fmt(s.sftLoss)} train ${s.trainTokensPerSec.toFixed(0)} tok/s\n`);
      else if (s.phase === "rl") {
        process.stdout.write(
          `[rl] step ${s.step}/${s.steps} reward ${fmt(s.rewardMean)} pass ${fmt(s.passRate)} gen ${s.genTokensPerSec.toFixed(0)} tok/s ` +
            `train ${s.trainTokensPerSec.toFixed(0)} tok/s staleness ${fmt(s.stalenessMean, 2)} dropped ${s.droppedStaleTotal} ` +
            `queues tasks ${s.tasksPending} groups ${s.groupsPending} dlq ${s.dlq}\n`,
        );
      }
      return;
    }
    if (s.phase !== this.barPhase && (s.phase === "sft" || s.phase === "rl")) {
      // The SFT stage is over once RL starts, even if its last progress event is still in flight.
      if (this.barPhase === "sft" && this.bar) this.bar.update(s.sftSteps);
      this.bar?.stop();
      this.barPhase = s.phase;
      this.bar = new cliProgress.SingleBar(
        {
          format:
            s.phase === "sft"
              ? "SFT {bar} {value}/{total} | loss {loss} | {train} tok/s"
              : "RL  {bar} {value}/{total} | reward {reward} | pass {pass} | gen {gen} tok/s | train {train} tok/s | stale {stale} (dropped {dropped}) | queues {tasks}/{groups} | dlq {dlq}",
          hideCursor: true,
          clearOnComplete: false,
        },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(s.phase === "sft" ? s.sftSteps : s.steps, 0);
    }
    if (!this.bar) return;
    const payload = {
      loss: fmt(s.sftLoss),
      reward: fmt(s.rewardMean),
      pass: fmt(s.passRate),
      gen: s.genTokensPerSec.toFixed(0),
      train: s.trainTokensPerSec.toFixed(0),
      stale: fmt(s.stalenessMean, 2),
      dropped: s.droppedStaleTotal,
      tasks: s.tasksPending,
      groups: s.groupsPending,
      dlq: s.dlq,
    };
    this.bar.update(s.phase === "sft" ? s.sftStep : s.step, payload);
  }

  /** Prints a line above the progress bar (or plainly without a TTY). */
  say(line: string): void {
    if (this.bar && this.tty) {
      this.bar.stop();
      this.barPhase = null;
      this.bar = null;
    }
    process.stdout.write(line + "\n");
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const sub of this.subs) sub.unsubscribe();
    this.metricsFile.close();
    this.stepsFile.close();
    this.bar?.stop();
  }
}
