// The replay loop: from a restored learner, train each recorded step again on the samples the run trained
// on, and report it against the run's record. Without --set the claim is bit-exactness: a step that differs
// on the run's own backend fails the replay (exit 1), one that differs on another backend is reported
// with its largest relative difference. With --set the model follows the changed setting from the
// checkpoint on, and each step's recorded and replayed figures are shown side by side.
import { packSettingsOf, type RunConfig } from "../../actors/runtime/config.js";
import type { PolicyModel } from "../../kernels/index.js";
import { runTrainStep } from "../../kernels/train-step.js";
import type { LoraAdapters } from "../../kernels/lora.js";
import { withAdvantages } from "./advantages.js";
import { compareFigures, FIGURE_LABEL, figuresOf, type Figure, type Figures } from "./figures.js";
import { stepLine, tableHeader, tableRow, type ReplayOutput } from "./output.js";
import type { ChangedSettings } from "./settings.js";
import type { StepSource } from "./sources.js";

export interface ReplayLoop {
  model: PolicyModel;
  /** The run's LoRA adapters as the checkpoint held them (they take each step), or null. */
  lora: LoraAdapters | null;
  source: StepSource;
  /** The checkpoint's step: the first replayed step trains policy version `fromStep`. */
  fromStep: number;
  steps: number;
  /** The run's config, or the changed one under --set. */
  config: RunConfig;
  changed: ChangedSettings | null;
  recorded: Map<number, { figures: Figures }>;
  backendMatched: boolean | null;
  out: ReplayOutput;
  /** Keeps each replayed step with the run (the dashboard's replay page), when the run's streams are at hand. */
  record?: (
    step: number,
    replayed: Figures,
    recorded: Figures | undefined,
    extra: { samples: number; leftOut: number; backendMatched?: number },
  ) => Promise<void>;
}

/** Runs the steps; returns the exit code. */
export async function replaySteps(r: ReplayLoop): Promise<number> {
  const { out, config, changed } = r;
  if (changed && !out.json) for (const line of tableHeader()) out.say(line);
  let done = 0;
  let differing = 0;
  let compared = 0;
  let worst: { d: number; figure: Figure; step: number } | null = null;
  for (; done < r.steps; done++) {
    const version = r.fromStep + done;
    let rows = await r.source.next(version);
    if (!rows) {
      out.say(`no more recorded samples after ${done} steps`);
      break;
    }
    let leftOut = 0;
    if (changed?.advantages) ({ rows, leftOut } = withAdvantages(rows, changed.advantages));
    const step = version + 1;
    let report: Awaited<ReturnType<typeof runTrainStep>>;
    try {
      report = await runTrainStep(r.model, rows, config.rl.loss, config.rl.optimizer, version, config.rl.steps, packSettingsOf(config), r.lora);
    } catch (e) {
      out.say(`step ${step}: cannot be trained${changed ? " with this setting" : ""}: ${(e as Error).message}`);
      return 1;
    }
    const replayed = figuresOf(report);
    const recorded = r.recorded.get(step)?.figures;
    await r.record?.(step, replayed, recorded, { samples: rows.length, leftOut });
    if (changed) {
      if (out.json) out.object({ step, samples: rows.length, leftOut, recorded: recorded ?? null, replayed });
      else out.say(tableRow(step, recorded, replayed, leftOut));
      continue;
    }
    const c = compareFigures(replayed, recorded);
    if (c.exact !== null) compared++;
    if (c.exact === false) {
      differing++;
      if (!worst || c.maxRelDiff! > worst.d) worst = { d: c.maxRelDiff!, figure: c.figure!, step };
    }
    if (out.json) {
      out.object({
        step,
        loss: replayed.loss,
        recordedLoss: recorded?.loss ?? null,
        gradNorm: replayed.gradNorm,
        samples: rows.length,
        exact: c.exact,
        maxRelDiff: c.maxRelDiff,
        maxRelDiffFigure: c.figure,
        absDiff: c.absDiff,
        backendMatched: r.backendMatched,
      });
    } else out.say(stepLine(step, replayed, recorded, c, r.backendMatched, rows.length));
  }
  if (changed) return 0;
  const largest = worst ? `largest relative difference ${worst.d.toExponential(2)} (${FIGURE_LABEL[worst.figure]}, step ${worst.step})` : "";
  if (differing === 0) out.say(`${done} step${done === 1 ? "" : "s"} replayed, ${compared} with a record: every recorded figure bit-exact`);
  else if (r.backendMatched === false) out.say(`${differing} of ${done} steps differ, on a backend other than the run's: ${largest}`);
  else out.say(`${differing} of ${done} steps differ on ${r.backendMatched ? "the run's own backend" : "this backend"}: ${largest}`);
  return differing > 0 && r.backendMatched !== false ? 1 : 0;
}
