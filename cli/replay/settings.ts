// `replay --set key=value`: the run's config with some loss or advantage settings changed, validated by
// the same schema as any config, so "what would this loss have done on the same data" can only be asked
// of a setting the learner would accept. Values are read as YAML scalars (0.1, true, .inf, ppo_clip).
import { parse as parseYaml } from "yaml";
import { advantageKindOf, ConfigError, parseRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import type { AdvantageKind } from "../../rl/advantages.js";
import { LOSS_DEFAULTS } from "../../kernels/index.js";

/** Settings that act on the recorded samples alone; anything else would have changed what was sampled. */
const ALLOWED = /^rl\.loss\.[A-Za-z][A-Za-z0-9]*$|^rl\.(advantage|normalizeAdvantage|maxAbsAdvantage)$/;

/** A bad --set: a one-line message, no stack. */
export class SettingError extends Error {}

export interface AdvantageSettings {
  kind: AdvantageKind;
  maxAbs: number;
  /** normalize differs from the run's: advantages are recomputed from the recorded rewards. */
  recompute: boolean;
  /** The run's zero-variance filter tolerance when it was on: such a group was trained with zero advantages (past the refill cap), and stays so. */
  zeroVarianceTolerance: number | null;
}

export interface ChangedSettings {
  config: RunConfig;
  /** "key=value" as given, for the header. */
  given: string[];
  /** Each changed section, before and after, in words. */
  summary: string[];
  /** Set when an advantage setting changed. */
  advantages: AdvantageSettings | null;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

function parsePair(pair: string): [string, unknown] {
  const eq = pair.indexOf("=");
  if (eq <= 0) throw new SettingError(`--set ${pair}: expected key=value (e.g. --set rl.loss.name=ppo_clip)`);
  const key = pair.slice(0, eq).trim();
  if (!ALLOWED.test(key)) {
    throw new SettingError(
      `--set ${key}: only rl.loss.* and the advantage settings (rl.advantage, rl.normalizeAdvantage, rl.maxAbsAdvantage) act on recorded samples`,
    );
  }
  try {
    return [key, parseYaml(pair.slice(eq + 1))];
  } catch (e) {
    throw new SettingError(`--set ${key}: value is not a YAML scalar: ${(e as Error).message.split("\n")[0]}`);
  }
}

/** For an unknown rl.loss key: the keys the named loss takes (a parameter of another loss needs its name first). */
function lossKeysHint(problem: string, raw: Obj): string {
  if (!/^rl\.loss\.\w+: unknown key$/.test(problem)) return "";
  const name = isObj(raw.rl) && isObj(raw.rl.loss) ? (raw.rl.loss.name ?? "rl") : "rl";
  const defaults = LOSS_DEFAULTS[name as keyof typeof LOSS_DEFAULTS];
  return defaults ? ` (loss ${name} takes ${Object.keys(defaults).join(", ")}; another loss's parameter needs rl.loss.name first)` : "";
}

export function formatLoss(loss: RunConfig["rl"]["loss"]): string {
  const { name, ...params } = loss;
  const parts = Object.entries(params).map(([k, v]) => `${k} ${v}`);
  return parts.length ? `${name} (${parts.join(", ")})` : name;
}

/**
 * The run's config (its YAML text) with `pairs` applied. A new rl.loss.name starts that loss from its own
 * defaults (the old loss's parameters, e.g. rl's maskLow 0.125, would silently carry over otherwise); other
 * rl.loss.* keys then apply on top.
 */
export function applySettings(configText: string, run: RunConfig, pairs: string[]): ChangedSettings {
  const parsed = pairs.map(parsePair);
  const raw = parseYaml(configText) as unknown;
  if (!isObj(raw)) throw new SettingError("the run's config is not a YAML mapping");
  const rl: Obj = isObj(raw.rl) ? raw.rl : (raw.rl = {});
  const newName = parsed.filter(([k]) => k === "rl.loss.name").at(-1)?.[1];
  if (newName !== undefined && newName !== run.rl.loss.name) rl.loss = { name: newName };
  for (const [key, value] of parsed) {
    const field = key.split(".").slice(1);
    if (field[0] === "loss") {
      const loss: Obj = isObj(rl.loss) ? rl.loss : (rl.loss = {});
      loss[field[1]!] = value;
    } else rl[field[0]!] = value;
  }
  let config: RunConfig;
  try {
    config = parseRunConfig(raw, "--set");
  } catch (e) {
    if (e instanceof ConfigError) throw new SettingError(`--set ${pairs.join(" ")}: ${e.problems.map((p) => p + lossKeysHint(p, raw)).join("; ")}`);
    throw e;
  }
  const summary: string[] = [];
  const lossBefore = formatLoss(run.rl.loss);
  const lossAfter = formatLoss(config.rl.loss);
  if (lossBefore !== lossAfter) summary.push(`rl.loss ${lossAfter} (the run: ${lossBefore})`);
  const kindAfter = advantageKindOf(config.rl);
  const kindBefore = advantageKindOf(run.rl);
  const recompute = kindAfter !== kindBefore;
  if (recompute) {
    const said =
      config.rl.advantage !== run.rl.advantage
        ? `rl.advantage ${config.rl.advantage} (the run: ${run.rl.advantage})`
        : `rl.normalizeAdvantage ${config.rl.normalizeAdvantage} (the run: ${run.rl.normalizeAdvantage})`;
    summary.push(`${said}: advantages recomputed from the recorded rewards (${kindAfter} instead of ${kindBefore})`);
  }
  const bound = config.rl.maxAbsAdvantage !== run.rl.maxAbsAdvantage;
  if (bound)
    summary.push(
      `rl.maxAbsAdvantage ${config.rl.maxAbsAdvantage} (the run: ${run.rl.maxAbsAdvantage}): a group past it is left out, as reward would reject it`,
    );
  if (summary.length === 0) summary.push("no setting differs from the run's");
  return {
    config,
    given: pairs,
    summary,
    advantages:
      recompute || bound
        ? {
            kind: kindAfter,
            maxAbs: config.rl.maxAbsAdvantage,
            recompute,
            zeroVarianceTolerance: run.rl.filter.zeroVariance ? run.rl.filter.tolerance : null,
          }
        : null,
  };
}
