import { errorMessage, type DatasetRow } from "./dataset.js";
import type { ChatMessage } from "./messages.js";
import type { Parser, ParseResult } from "./parser.js";
import { completionMessages, type RolloutResult } from "./rollout.js";
import type { CodeSandbox } from "./sandbox.js";
import type { ScoreResult } from "./score.js";
import { withTimeLimit } from "../util/time-limit.js";

/** What a reward function sees for one rollout. */
export interface RewardInput {
  rollout: RolloutResult;
  row: DatasetRow;
  prompt: ChatMessage[];
  /** Messages after the prompt: model turns and env/tool responses. */
  completion: ChatMessage[];
  answer: string;
  info: Record<string, unknown>;
  state: Record<string, unknown>;
  /** The rubric parser's reading of the completion; null when the rubric has no parser. */
  parsed: ParseResult | null;
  sandbox?: CodeSandbox;
  /** Fires when this function's time limit is reached: stop work (e.g. sandbox calls) early. */
  signal: AbortSignal;
  /**
   * Per-rollout memo shared by all functions of the rubric, so that e.g. `correct` and `pass_rate` run
   * the unit tests once. The first caller's compute runs; the others await the same promise.
   */
  memo<T>(key: string, compute: () => Promise<T>): Promise<T>;
}

export type RewardValue = number | boolean;
export type RewardFunction = (input: RewardInput) => RewardValue | Promise<RewardValue>;
/** Sees every rollout of a group at once (e.g. rank-based or diversity rewards); returns one value each. */
export type GroupRewardFunction = (inputs: RewardInput[]) => RewardValue[] | Promise<RewardValue[]>;

export interface RubricEntry {
  readonly name: string;
  /** 0 = metric: reported but not part of the reward. */
  readonly weight: number;
  readonly fn?: RewardFunction;
  readonly groupFn?: GroupRewardFunction;
}

export interface RubricOptions {
  /** Parser whose result reaches every function as input.parsed; an unparseable reply is recorded in errors. */
  parser?: Parser;
  /** Time limit per function call (per group call for group functions). Default 30 s. */
  timeoutMs?: number;
}

/**
 * Weighted reward functions plus zero-weight metrics. A function that throws, hangs past the time limit
 * or returns a non-finite value scores 0 and is recorded in the score's errors; the other functions and
 * rollouts are scored as usual.
 */
export class Rubric {
  readonly parser?: Parser;
  readonly timeoutMs: number;
  private readonly list: RubricEntry[] = [];

  constructor(opts: RubricOptions = {}) {
    this.parser = opts.parser;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    if (!(this.timeoutMs > 0)) throw new Error(`Rubric: timeoutMs must be > 0, got ${opts.timeoutMs}`);
  }

  get entries(): readonly RubricEntry[] {
    return this.list;
  }

  reward(name: string, fn: RewardFunction, weight = 1): this {
    return this.add({ name, weight, fn });
  }

  metric(name: string, fn: RewardFunction): this {
    return this.add({ name, weight: 0, fn });
  }

  groupReward(name: string, groupFn: GroupRewardFunction, weight = 1): this {
    return this.add({ name, weight, groupFn });
  }

  groupMetric(name: string, groupFn: GroupRewardFunction): this {
    return this.add({ name, weight: 0, groupFn });
  }

  private add(e: RubricEntry): this {
    if (!e.name) throw new Error("Rubric: a reward function needs a name");
    if (!Number.isFinite(e.weight)) throw new Error(`Rubric: weight of "${e.name}" must be finite, got ${e.weight}`);
    if (this.list.some((x) => x.name === e.name)) throw new Error(`Rubric: duplicate reward function name "${e.name}"`);
    this.list.push(e);
    return this;
  }

  async score(rollout: RolloutResult, row: DatasetRow, ctx: { sandbox?: CodeSandbox } = {}): Promise<ScoreResult> {
    return (await this.scoreGroup([rollout], row, ctx))[0]!;
  }

  async scoreGroup(rollouts: RolloutResult[], row: DatasetRow, ctx: { sandbox?: CodeSandbox } = {}): Promise<ScoreResult[]> {
    const results: ScoreResult[] = rollouts.map(() => ({ reward: 0, components: {}, metrics: {}, errors: [] }));
    const inputs = rollouts.map((r, i) => this.makeInput(r, row, ctx.sandbox, results[i]!));

    await Promise.all(
      this.list.map(async (e) => {
        if (e.fn) {
          await Promise.all(
            inputs.map(async (inp, i) => {
              const v = await this.call(e.name, (signal) => e.fn!({ ...inp, signal }));
              this.record(results[i]!, e, v.ok ? v.value : 0, v.ok ? undefined : v.error);
            }),
          );
        } else if (e.groupFn) {
          const v = await this.call(e.name, (signal) => e.groupFn!(inputs.map((inp) => ({ ...inp, signal }))), true);
          let values: unknown[] | undefined;
          let error = v.ok ? undefined : v.error;
          if (v.ok) {
            if (Array.isArray(v.value) && v.value.length === rollouts.length) values = v.value;
            else error = `${e.name}: group function returned ${describeLength(v.value)} values for ${rollouts.length} rollouts`;
          }
          results.forEach((res, i) => {
            const one = values ? toNumber(e.name, values[i]) : { value: 0, error };
            this.record(res, e, one.value, one.error ?? error);
          });
        }
      }),
    );

    for (const res of results) {
      let reward = 0;
      for (const e of this.list) if (e.weight !== 0) reward += e.weight * (res.components[e.name] ?? 0);
      res.reward = reward;
    }
    return results;
  }

  private makeInput(rollout: RolloutResult, row: DatasetRow, sandbox: CodeSandbox | undefined, res: ScoreResult): RewardInput {
    const completion = completionMessages(rollout, row);
    const prompt = rollout.messages.slice(0, rollout.messages.length - completion.length);
    let parsed: ParseResult | null = null;
    if (this.parser) {
      parsed = this.parser.parse(completion);
      if (parsed.answer === null) res.errors.push(`parse: ${parsed.reason ?? "no answer found"}`);
    }
    // The rollout's own metrics (tool-call counts, ...) and errors are part of its score record.
    const m = rollout.state["metrics"];
    if (m && typeof m === "object") {
      for (const [k, v] of Object.entries(m as Record<string, unknown>)) if (typeof v === "number" && Number.isFinite(v)) res.metrics[k] = v;
    }
    const errs = rollout.state["errors"];
    if (Array.isArray(errs)) for (const e of errs) res.errors.push(`rollout: ${String(e)}`);

    const memos = new Map<string, Promise<unknown>>();
    const memo = <T>(key: string, compute: () => Promise<T>): Promise<T> => {
      let p = memos.get(key) as Promise<T> | undefined;
      if (!p) {
        p = compute();
        memos.set(key, p);
      }
      return p;
    };
    return {
      rollout,
      row,
      prompt,
      completion,
      parsed,
      memo,
      sandbox,
      answer: row.answer,
      info: row.info,
      state: rollout.state,
      signal: new AbortController().signal,
    };
  }

  private async call<T>(
    name: string,
    fn: (signal: AbortSignal) => T | Promise<T>,
    raw = false,
  ): Promise<{ ok: true; value: T } | { ok: false; error: string }> {
    try {
      const value = await withTimeLimit(this.timeoutMs, `reward function "${name}"`, fn);
      if (!raw) {
        const n = toNumber(name, value);
        if (n.error) return { ok: false, error: n.error };
      }
      return { ok: true, value };
    } catch (err) {
      return { ok: false, error: `${name}: ${errorMessage(err)}` };
    }
  }

  private record(res: ScoreResult, e: RubricEntry, value: unknown, error: string | undefined): void {
    const n = error ? { value: 0 } : toNumber(e.name, value);
    if (error) res.errors.push(error);
    else if (n.error) res.errors.push(n.error);
    if (e.weight !== 0) res.components[e.name] = n.value;
    else res.metrics[e.name] = n.value;
  }
}

function toNumber(name: string, v: unknown): { value: number; error?: string } {
  if (typeof v === "boolean") return { value: v ? 1 : 0 };
  if (typeof v === "number" && Number.isFinite(v)) return { value: v };
  return { value: 0, error: `${name}: returned ${typeof v === "number" ? v : typeof v}, expected a finite number or boolean` };
}

function describeLength(v: unknown): string {
  return Array.isArray(v) ? String(v.length) : `a non-array (${typeof v})`;
}
