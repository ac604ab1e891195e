// Difficulty pools (rl.pool), after prime-rl's buffer: each example's running pass rate, kept in the run's KV,
// decides how often it is dispatched. The sampler walks each environment's dataset in order (epoch after epoch
// on a finite one); an example whose pass rate lies inside rl.pool.band (or that was never scored) is taken
// when met, one outside it only with probability rl.pool.revisit, else passed over. So problems the policy
// always or never solves stop taking up steps, and come back now and then in case that changed. With
// rl.pool.quotas every step gets a fixed number of regular tasks from each environment.
//
// Deterministic: a choice depends only on the seed, the task index, the cursor and the stats as they stand in
// KV (pool.cursor, pool.stats). The orchestrator chooses from the stored values, publishes the task (msg-id
// dedupe), stores the cursor, and only then applies the new group outcomes to the stats, so a
// restart between any two of those writes chooses the same example again.
import { hash32 } from "./mixing.js";

/** Per environment key, each example's [groups seen, running pass rate]; `seq` is the next group outcome to apply. */
export interface PoolStats {
  seq: number;
  envs: Record<string, Record<string, [number, number]>>;
}
/** The next dataset position to consider: overall (`next`) and per environment key. */
export interface PoolCursor {
  next: number;
  envs: Record<string, number>;
}
/** What the pool needs of an environment. */
interface PoolEnvironment {
  key: string;
}

export interface PoolSettings {
  band: [number, number];
  revisit: number;
  decay: number;
  quotas?: Record<string, number> | undefined;
}

/** One scored group, as its outcome on rs.<run>.groups reports it (seq: the outcome's stream sequence). */
export interface ScoredGroup {
  seq: number;
  envKey: string;
  exampleIndex: number;
  passRate: number;
}

export interface PoolChoice {
  /** Position in the environment's dataset order (epoch × size + example index on a finite dataset). */
  position: number;
  /** Candidates met, the chosen one included. */
  scanned: number;
  /** Every candidate of a whole scan was outside the band and passed over: the last one met is taken so the run goes on. */
  forced: boolean;
}

/** A scan gives up after this many candidates (or a finite dataset's size, if smaller) and takes the last one. */
export const MAX_SCAN = 4096;

export function inBand(stat: [number, number] | undefined, band: [number, number]): boolean {
  return stat === undefined || (stat[1] >= band[0] && stat[1] <= band[1]);
}

/** The next running pass rate: the first group sets it, later ones move it by `decay`. */
export function updatedStat(stat: [number, number] | undefined, passRate: number, decay: number): [number, number] {
  if (!stat) return [1, passRate];
  return [stat[0] + 1, Math.min(1, Math.max(0, (1 - decay) * stat[1] + decay * passRate))];
}

/** A uniform draw in [0, 1) for candidate `position` of task `index`. */
function draw(seed: number, index: number, position: number): number {
  return hash32(hash32(seed, index), position) / 0x1_0000_0000;
}

/**
 * The example for regular task `index` of one environment, from its cursor (the next position in dataset order)
 * and its stats (exampleIndex -> [groups, pass rate]).
 */
export function chooseExample(
  stats: Record<string, [number, number]> | undefined,
  cursor: number,
  size: number,
  seed: number,
  index: number,
  settings: Pick<PoolSettings, "band" | "revisit">,
): PoolChoice {
  const limit = Number.isFinite(size) ? Math.min(size, MAX_SCAN) : MAX_SCAN;
  for (let k = 0; k < limit; k++) {
    const position = cursor + k;
    const exampleIndex = Number.isFinite(size) ? position % size : position;
    const stat = stats?.[String(exampleIndex)];
    if (inBand(stat, settings.band) || draw(seed, index, position) < settings.revisit) return { position, scanned: k + 1, forced: false };
  }
  return { position: cursor + limit - 1, scanned: limit, forced: true };
}

/** The environment of regular task `index` under quotas: slot index mod (prompts per step), quotas taken in config order. */
export function quotaEnvironment<E extends PoolEnvironment>(envs: readonly E[], quotas: Record<string, number>, index: number): E {
  const perStep = Object.values(quotas).reduce((a, b) => a + b, 0);
  let slot = index % perStep;
  for (const e of envs) {
    const q = quotas[e.key] ?? 0;
    if (slot < q) return e;
    slot -= q;
  }
  throw new Error(`rl.pool.quotas (${JSON.stringify(quotas)}) name no environment for slot ${index % perStep}`);
}

/** The quotas' problems against the run's environments (keys that name none), as config-check would print them. */
export function quotaProblems<E extends PoolEnvironment>(envs: readonly E[], quotas: Record<string, number>): string[] {
  const keys = new Set(envs.map((e) => e.key));
  return Object.keys(quotas)
    .filter((k) => !keys.has(k))
    .map((k) => `rl.pool.quotas.${k}: no environment has the key ${JSON.stringify(k)} (keys: ${[...keys].join(", ")})`);
}

/** Applies scored groups (in stream order) to the stats; returns the stats after them. */
export function applyGroups(stats: PoolStats, groups: ScoredGroup[], decay: number): PoolStats {
  const envs: PoolStats["envs"] = { ...stats.envs };
  let seq = stats.seq;
  for (const g of groups) {
    if (g.seq < seq) continue; // applied before a restart
    const env = { ...(envs[g.envKey] ?? {}) };
    env[String(g.exampleIndex)] = updatedStat(env[String(g.exampleIndex)], g.passRate, decay);
    envs[g.envKey] = env;
    seq = g.seq + 1;
  }
  return { seq, envs };
}

export const emptyStats = (): PoolStats => ({ seq: 1, envs: {} });
export const emptyCursor = (): PoolCursor => ({ next: 0, envs: {} });
