// The evaluator: watches policy versions and evaluates each scheduled one (v0, every eval.interval, the
// final) on the held-out splits of every environment (eval, and any other an environment offers), with its own engine on its own threads so the learner
// keeps its share of the machine. Every completion and each environment's result go to rs.<run>.eval
// (msg-ids per version, environment and sample: a version evaluated again after a restart is stored once);
// the version's summary goes to KV eval.results, which says what is done. It exits when the final version
// is evaluated. The checkpoint actor does not prune a scheduled version's weights before it is evaluated.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { loadRunEnvironments } from "../runtime/environments.js";
import { createPolicyModel, createTokenizer } from "../runtime/model-factory.js";
import { exitWedged, PolicyEngine } from "../runtime/policy-engine.js";
import { evalSchedule } from "../../rl/eval-schedule.js";
import { StateKeys, type EvalChannel, type RunState, type WeightsChannel } from "../../streams/index.js";
import { evaluateVersion } from "./held-out.js";

@injectable()
export class EvaluatorActor implements Actor {
  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Eval) private readonly evals: EvalChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx, state } = this;
    const { config, log } = ctx;
    const schedule = evalSchedule(config);
    const envs = [...(await loadRunEnvironments(config)).values()];
    const model = createPolicyModel(config, { threads: config.actors.evaluator.threads });
    const tokenizer = createTokenizer(config);
    const evaluated = ctx.metrics.counter("evaluations_total", "policy versions evaluated");
    const passGauge = ctx.metrics.gauge("eval_pass_at_1", "greedy held-out pass@1 of the newest evaluated version");
    let newest = -1;
    let wake: (() => void) | null = null;
    await state.watch(
      StateKeys.policyVersion,
      (v) => {
        newest = v;
        wake?.();
      },
      ctx.signal,
    );
    const pause = (ms: number) =>
      new Promise<void>((r) => {
        wake = r;
        setTimeout(r, ms);
      }).finally(() => (wake = null));
    ctx.signal.addEventListener("abort", () => wake?.(), { once: true });
    log.info({ schedule }, "evaluating these policy versions");
    let backoffMs = 500;
    try {
      while (!ctx.signal.aborted) {
        const done = (await state.get(StateKeys.evalResults)) ?? {};
        const next = schedule.find((v) => done[String(v)] === undefined);
        if (next === undefined) {
          log.info("every scheduled version evaluated");
          return;
        }
        if (next > newest) {
          // Waiting for the learner is this actor's idle time, not a stall.
          await ctx.health.wait("policy", () => pause(2_000), { detail: `v${next}`, idle: true });
          newest = Math.max(newest, await state.policyVersion().catch(() => newest));
          continue;
        }
        try {
          model.loadSafetensors(
            await ctx.health.wait("weights", () => this.weights.fetch(next, config.actors.inference.weightsDeadlineMs), { detail: `v${next}` }),
          );
          const engine = new PolicyEngine(model, tokenizer, next, {
            maxBatch: 128,
            generateDeadlineMs: config.actors.inference.generateDeadlineMs,
            onWedged: (e) => exitWedged(ctx, e),
          });
          const { samples, results, summary } = await ctx.health.work(`evaluate v${next}`, () => evaluateVersion(engine, envs, config, next, ctx.signal));
          if (ctx.signal.aborted) return;
          // Samples first, the version's summary in KV last: a restart before the KV write evaluates the
          // version again, and the msg-ids keep its messages from being stored twice.
          for (const m of [...samples, ...results]) await this.evals.publish(m);
          await state.put(StateKeys.evalResults, { ...((await state.get(StateKeys.evalResults)) ?? {}), [String(next)]: summary });
          evaluated.inc();
          passGauge.set(summary.passAt1);
          // Other held-out splits (arithmetic's hard) beside the eval split, never in its place.
          const splits = Object.fromEntries(Object.entries(summary.splits ?? {}).map(([name, r]) => [`passAt1_${name}`, r.passAt1]));
          log.info({ version: next, passAt1: summary.passAt1, passAtK: summary.passAtK, n: summary.n, ...splits, seconds: summary.seconds }, "evaluated");
          await ctx.publishMetrics(
            "eval",
            { version: next, passAt1: summary.passAt1, rewardMean: summary.rewardMean, n: summary.n, ...splits, seconds: summary.seconds },
            next,
          );
          backoffMs = 500;
        } catch (e) {
          if (ctx.signal.aborted) return;
          const why = (e as Error).message;
          if (/not in the object store/.test(why) && next < newest) {
            // Gone for good (a run from before the evaluator protected its versions): say so, go on.
            const skipped = { version: next, n: 0, passAt1: 0, passAtK: {}, rewardMean: 0, byEnv: {}, seconds: 0, skipped: why };
            await state.put(StateKeys.evalResults, { ...((await state.get(StateKeys.evalResults)) ?? {}), [String(next)]: skipped });
            log.error({ version: next, err: why }, "version skipped: its weights are gone");
            continue;
          }
          log.warn({ version: next, err: (e as Error).message, retryInMs: backoffMs }, "evaluation failed; retrying");
          await pause(backoffMs);
          backoffMs = Math.min(10_000, backoffMs * 2);
        }
      }
    } finally {
      model.dispose();
    }
  }
}
