// Which policy versions the evaluator evaluates: v0 (what RL starts from), every eval.interval versions,
// and the final one. Shared by the evaluator (what to do), the checkpoint actor (which weights it must
// not prune before they are evaluated) and `train` (what to wait for and print).

export function evalSchedule(config: { eval: { interval: number }; rl: { steps: number } }): number[] {
  const out = new Set<number>([0, config.rl.steps]);
  const every = config.eval.interval;
  if (every > 0) for (let v = every; v < config.rl.steps; v += every) out.add(v);
  return [...out].sort((a, b) => a - b);
}

/**
 * The versions the weights pruning must keep for the evaluator: those scheduled and not yet evaluated, while
 * the run has an evaluator (running, or dead and not yet cleared). A run without one (train --no-eval, a
 * deployment without it) keeps none, else every scheduled version would stay in the store for good.
 */
export function versionsHeldForEvaluator(
  config: { eval: { interval: number }; rl: { steps: number } },
  evaluated: Readonly<Record<string, unknown>>,
  evaluatorPresent: boolean,
): Set<number> {
  if (!evaluatorPresent) return new Set();
  return new Set(evalSchedule(config).filter((v) => evaluated[String(v)] === undefined));
}
