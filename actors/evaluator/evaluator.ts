// The evaluator: watches policy versions and evaluates each scheduled one (v0, every eval.interval, the
// final) on the held-out splits of every environment (eval, and any other an environment offers), with its own engine on its own threads so the learner
// keeps its share of the machine. Every completion and each environment's result go to rs.<run>.eval
// (msg-ids per version, environment and sample: a version evaluated again after a restart is stored once);
// the version's summary goes to KV eval.results, which says what is done. It exits when the final version
// is evaluated. The checkpoint actor does not prune a scheduled version's weights before it is evaluated.
import type { Counter, Gauge } from "prom-client";
import { inject, injectable } from "tsyringe";
import type { PolicyModel } from "../../kernels/index.js";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../runtime/environments.js";
import { startRemoteRuntime, type RemoteRuntime } from "../runtime/remote-envs.js";
import { createPolicyModel, createTokenizer } from "../runtime/model-factory.js";
import { engineOptionsOf, exitWedged, PolicyEngine } from "../runtime/policy-engine.js";
import { reportEngineFigures } from "../runtime/engine-meter.js";
import { evalSchedule } from "../../rl/eval-schedule.js";
import { StateKeys, type EvalChannel, type HeldOutResult, type PolicyVersions, type RunState, type WeightsChannel } from "../../streams/index.js";
import { policyVersionsOf, reportStateValueError } from "../runtime/run-state-errors.js";
import { evaluateVersion } from "./held-out.js";

/**
 * The newest policy version to evaluate up to, kept by a watch on KV and read through PolicyVersions: a value that
 * is not JSON or beyond rl.steps is reported as a fault of the run's state and the newest announced version stands
 * in for it. A pause that a change of the key or the actor's stop ends early.
 */
class PolicyWatch {
  newest = -1;
  private wake: (() => void) | null = null;

  private constructor(readonly versions: PolicyVersions) {}

  static async open(state: RunState, versions: PolicyVersions, signal: AbortSignal): Promise<PolicyWatch> {
    const w = new PolicyWatch(versions);
    // Any change, valid or not, is read again through refresh(): the watch only ends the pause.
    await state.watch(
      StateKeys.policyVersion,
      () => w.wake?.(),
      signal,
      () => w.wake?.(),
    );
    signal.addEventListener("abort", () => w.wake?.(), { once: true });
    await w.refresh();
    return w;
  }

  /** Reads the newest trustworthy version; keeps the one it had when nothing can be trusted or the read fails. */
  async refresh(): Promise<void> {
    const v = await this.versions.newest().catch(() => null);
    if (v !== null) this.newest = v;
  }

  pause(ms: number): Promise<void> {
    return new Promise<void>((r) => {
      this.wake = r;
      setTimeout(r, ms);
    }).finally(() => (this.wake = null));
  }
}

/** What every evaluation uses: the environments, one model and engine for the actor's life, its meters. */
interface Evaluation {
  envs: LoadedEnvironment[];
  model: PolicyModel;
  /** The inference actor's engine (continuous batching, shared prefixes), on the evaluator's own threads. */
  engine: PolicyEngine;
  /** The policy over HTTP for remote environments whose server calls the model (verifiers). */
  remote: RemoteRuntime;
  evaluated: Counter;
  passGauge: Gauge;
}

@injectable()
export class EvaluatorActor implements Actor {
  /** Bad values of the run's state already reported (key -> revision). */
  private readonly reported = new Map<string, number>();

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Eval) private readonly evals: EvalChannel,
  ) {}

  /** Evaluates the first scheduled version not yet in eval.results once the policy reached it; retries a failure with backoff. */
  async run(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const schedule = evalSchedule(config);
    const ev = await this.prepare();
    const stopFigures = reportEngineFigures(ctx, () => ev.engine.figures());
    const policy = await PolicyWatch.open(state, policyVersionsOf(ctx, state, this.weights), ctx.signal);
    log.info({ schedule }, "evaluating these policy versions");
    let backoffMs = 500;
    try {
      while (!ctx.signal.aborted) {
        const done = await this.results(policy);
        if (done === null) continue;
        const next = schedule.find((v) => done[String(v)] === undefined);
        if (next === undefined) {
          log.info("every scheduled version evaluated");
          return;
        }
        await policy.refresh();
        if (next > policy.newest) {
          // Waiting for the learner is this actor's idle time, not a stall.
          await ctx.health.wait("policy", () => policy.pause(2_000), { detail: `v${next}`, idle: true });
          continue;
        }
        try {
          if (!(await this.evaluate(ev, next))) return;
          backoffMs = 500;
        } catch (e) {
          if (ctx.signal.aborted) return;
          if (await this.passOver(next, policy, e)) continue;
          log.warn({ version: next, err: (e as Error).message, retryInMs: backoffMs }, "evaluation failed; retrying");
          await policy.pause(backoffMs);
          backoffMs = Math.min(10_000, backoffMs * 2);
        }
      }
    } finally {
      stopFigures();
      await ev.engine.dispose();
      ev.model.dispose();
    }
  }

  /**
   * eval.results, or null after a pause when it holds a bad value: reported as a fault of the run's state, and never
   * written over — the evaluations it records would be lost — until it is repaired (`rollstream doctor --repair`
   * rebuilds it from rs.<run>.eval).
   */
  private async results(policy: PolicyWatch): Promise<Record<string, HeldOutResult> | null> {
    const read = await this.state.read(StateKeys.evalResults);
    if (read === undefined) return {};
    if ("value" in read) return read.value;
    reportStateValueError(
      this.ctx,
      read.error,
      this.reported,
      "the evaluator waits until it is repaired (rollstream doctor --repair rebuilds it from the eval stream)",
    );
    await this.ctx.health.wait("run state", () => policy.pause(5_000), { detail: StateKeys.evalResults });
    return null;
  }

  private async prepare(): Promise<Evaluation> {
    const { ctx } = this;
    const { config, metrics } = ctx;
    const model = createPolicyModel(config, { threads: config.actors.evaluator.threads, log: ctx.log });
    const envs = [...(await loadRunEnvironments(config)).values()];
    return {
      envs,
      // A port of its own: the inference actor may hold the configured one.
      remote: await startRemoteRuntime(ctx, envs, { port: 0 }),
      model,
      engine: new PolicyEngine(model, createTokenizer(config), 0, { ...engineOptionsOf(config), onWedged: (e) => exitWedged(ctx, e) }),
      evaluated: metrics.counter("evaluations_total", "policy versions evaluated"),
      passGauge: metrics.gauge("eval_pass_at_1", "greedy held-out pass@1 of the newest evaluated version"),
    };
  }

  /** Evaluates `version` and stores what it saw and its summary; false when the actor was stopped meanwhile (nothing stored). */
  private async evaluate(ev: Evaluation, version: number): Promise<boolean> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const weights = () => this.weights.fetch(version, config.actors.inference.weightsDeadlineMs);
    // Between evaluations nothing runs: the weights are in use at once (rollback: versions may come in any order).
    ev.engine.swapWeights(version, await ctx.health.wait("weights", weights, { detail: `v${version}` }), true);
    const { samples, results, summary } = await ctx.health.work(`evaluate v${version}`, () =>
      evaluateVersion(ev.engine, ev.envs, config, version, ctx.signal, ev.remote.endpoint),
    );
    if (ctx.signal.aborted) return false;
    // Samples first, the version's summary in KV last: a restart before the KV write evaluates the
    // version again, and the msg-ids keep its messages from being stored twice.
    for (const m of [...samples, ...results]) await this.evals.publish(m);
    await state.put(StateKeys.evalResults, { ...((await state.get(StateKeys.evalResults)) ?? {}), [String(version)]: summary });
    ev.evaluated.inc();
    ev.passGauge.set(summary.passAt1);
    // Other held-out splits (arithmetic's hard) beside the eval split, never in its place.
    const splits = Object.fromEntries(Object.entries(summary.splits ?? {}).map(([name, r]) => [`passAt1_${name}`, r.passAt1]));
    log.info({ version, passAt1: summary.passAt1, passAtK: summary.passAtK, n: summary.n, ...splits, seconds: summary.seconds }, "evaluated");
    await ctx.publishMetrics(
      "eval",
      { version, passAt1: summary.passAt1, rewardMean: summary.rewardMean, n: summary.n, ...splits, seconds: summary.seconds },
      version,
    );
    return true;
  }

  /**
   * What to make of a version whose weights are not in the object store; true when it is passed over for now.
   * Gone for good — recorded as skipped, said, and passed over — only on the weights stream's word, never on KV's: a
   * later version was announced (the learner moved past it), or it is the final version and was announced (no later
   * one comes to move past it, and waiting would hold `train` for its whole deadline in silence). A version KV calls
   * current that no announcement backs is a fault of the run's state (`nats kv put` by hand): reported, and the
   * evaluator waits on the announced versions until the key changes. Nothing is recorded for it.
   */
  private async passOver(version: number, policy: PolicyWatch, e: unknown): Promise<boolean> {
    const why = (e as Error).message;
    if (!/not in the object store/.test(why)) return false;
    const announced = await policy.versions.lastAnnounced();
    const publishedFinal = version === this.ctx.config.rl.steps && announced !== null && announced >= version;
    if (announced !== null && (announced > version || publishedFinal)) {
      await this.recordSkipped(version, `weights gone: ${why}`);
      return true;
    }
    const newest = announced === null ? "no weights version is announced" : `the newest weights announced are v${announced}`;
    policy.versions.distrustLastRead(`but ${newest} (none for v${version}): not trusted; the evaluator waits for v${version} to be announced`);
    await policy.pause(2_000);
    return true;
  }

  private async recordSkipped(version: number, why: string): Promise<void> {
    const skipped = { version, n: 0, passAt1: 0, passAtK: {}, rewardMean: 0, byEnv: {}, seconds: 0, skipped: why };
    await this.state.put(StateKeys.evalResults, { ...((await this.state.get(StateKeys.evalResults)) ?? {}), [String(version)]: skipped });
    this.ctx.log.error({ version, err: why }, "version skipped: its weights are gone");
  }
}
