import { EXTRA_SPLIT_NAME, validatedDataset, type Dataset, type DatasetRow, type DatasetSplit, type SplitName } from "./dataset.js";
import type { RolloutContext, RolloutResult } from "./rollout.js";
import type { Rubric } from "./rubric.js";
import type { CodeSandbox } from "./sandbox.js";
import type { ScoreResult } from "./score.js";
import { singleTurnRollout } from "./single-turn.js";

export interface Environment {
  /** From the module's package.json. */
  readonly name: string;
  readonly version: string;
  /**
   * True when rollouts or scoring run code through the injected CodeSandbox; `rollstream train` starts
   * the sandbox actor only then. Optional (absent = false) so hand-built or older modules still load.
   */
  readonly needsSandbox?: boolean;
  /**
   * The held-out splits an evaluation reports: "eval" first, then any the environment offers besides
   * (e.g. "hard"). Optional (absent = ["eval"]) so hand-built or older modules still load: read it
   * through heldOutSplits(env).
   */
  readonly heldOutSplits?: readonly string[];
  /** "train", "eval", or one of heldOutSplits; any other name throws. */
  dataset(split: SplitName): Dataset;
  rollout(ctx: RolloutContext, row: DatasetRow): Promise<RolloutResult>;
  /** The rubric, including group-level reward functions. */
  scoreGroup(rollouts: RolloutResult[], row: DatasetRow, ctx: { sandbox?: CodeSandbox }): Promise<ScoreResult[]>;
  /** A gold assistant reply (worked solution) for the SFT stage, when the env can make one. */
  sftTarget?(row: DatasetRow): string;
  /**
   * A remote environment (environments/remote/): its rollouts need ctx.endpoint (the server calls the model
   * itself), its server answers `health` (the runtime's heartbeat asks), and `close` lets go of its connection.
   */
  readonly remote?: RemoteEnvironmentInfo;
  health?(): Promise<boolean>;
  close?(): Promise<void>;
}

export interface RemoteEnvironmentInfo {
  protocol: "verifiers" | "openenv";
  /** Where its server is (tcp:// or ws://). */
  address: string;
  /** True when its rollouts need ctx.endpoint. */
  needsEndpoint: boolean;
}

/** A module's single entry point. */
export type LoadEnvironment = (args: Record<string, unknown>) => Environment | Promise<Environment>;

/** How rollouts and run metadata name an environment: "name@version". */
export function envId(env: Pick<Environment, "name" | "version">): string {
  return `${env.name}@${env.version}`;
}

/** The held-out splits of an environment, "eval" first. */
export function heldOutSplits(env: Pick<Environment, "heldOutSplits">): readonly string[] {
  return env.heldOutSplits ?? ["eval"];
}

export interface EnvironmentDefinition {
  name: string;
  version: string;
  /** Default false: set it when the rubric or rollout uses `ctx.sandbox`. */
  needsSandbox?: boolean;
  dataset(split: DatasetSplit): Dataset;
  /**
   * Held-out splits besides eval, by name, each distributed differently from train on purpose (a "hard"
   * split) and disjoint from train like eval. An evaluation reports each under its own name beside eval.
   */
  extraSplits?: Record<string, () => Dataset>;
  rubric: Rubric;
  /** Default: singleTurnRollout. */
  rollout?(ctx: RolloutContext, row: DatasetRow): Promise<RolloutResult>;
  sftTarget?(row: DatasetRow): string;
}

/**
 * Assembles an Environment from its parts. Dataset rows are validated on access, so a bad row is
 * reported with the environment's name@version, split and index.
 */
export function createEnvironment(def: EnvironmentDefinition): Environment {
  if (!def.name) throw new Error("createEnvironment: name is required");
  if (!def.version) throw new Error(`createEnvironment: environment "${def.name}" has no version`);
  const id = envId(def);
  const extra = def.extraSplits ?? {};
  for (const name of Object.keys(extra)) {
    if (name === "train" || name === "eval" || !EXTRA_SPLIT_NAME.test(name)) {
      throw new Error(
        `createEnvironment: environment ${id} names an extra split "${name}": use lower-case letters, digits, - or _, and neither train nor eval`,
      );
    }
  }
  const datasets = new Map<string, Dataset>();
  const rollout = def.rollout ?? ((ctx: RolloutContext, row: DatasetRow) => singleTurnRollout(ctx, row));
  const env: Environment = {
    name: def.name,
    version: def.version,
    needsSandbox: def.needsSandbox ?? false,
    heldOutSplits: ["eval", ...Object.keys(extra)],
    dataset(split: SplitName): Dataset {
      const base: DatasetSplit | null = split === "train" ? "train" : split === "eval" ? "eval" : null;
      const make = base ? () => def.dataset(base) : Object.hasOwn(extra, split) ? extra[split] : undefined;
      if (!make) throw new Error(`environment ${id}: unknown split "${String(split)}" (${["train", "eval", ...Object.keys(extra)].join(", ")})`);
      let d = datasets.get(split);
      if (!d) {
        d = validatedDataset(id, split, make());
        datasets.set(split, d);
      }
      return d;
    },
    rollout: (ctx, row) => rollout(ctx, row),
    scoreGroup: (rollouts, row, ctx) => def.rubric.scoreGroup(rollouts, row, ctx),
  };
  if (def.sftTarget) {
    const sft = def.sftTarget;
    env.sftTarget = (row) => sft(row);
  }
  return env;
}
