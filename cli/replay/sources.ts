// Where replayed steps get their samples: the run's stored scored stream, read from a sequence exactly as
// the learner read it, or a bundle's Arrow files. The stream source can also capture what each step read
// (payload bytes and kept rows) for `replay --export`.
import type { RunConfig } from "../../actors/runtime/config.js";
import { decodeRolloutBatch, type BatchSource, type RolloutRow, type ScoredReader } from "../../streams/index.js";
import { StepSelector } from "../../rl/sample-selection.js";
import { bundleRows, type Bundle, type CapturedStep } from "./bundle.js";
import type { RecordedSteps } from "./figures.js";

export interface StepSource {
  /** The samples of the optimizer step that trained policy `version`; null when there are no more. */
  next(version: number): Promise<RolloutRow[] | null>;
  close(): Promise<void>;
}

/** A row's identity for matching a step's kept rows back to their place in the decoded message. */
function fingerprint(r: RolloutRow): string {
  return `${r.taskId}\u0000${r.groupId}\u0000${r.policyVersionMin}\u0000${r.completionIds.join(",")}\u0000${r.samplerLogprobs.join(",")}`;
}

/** Indices of `kept` in `all` (kept is a subsequence of all: the rows the step did not drop as stale). */
export function keptIndices(all: RolloutRow[], kept: RolloutRow[]): number[] {
  const out: number[] = [];
  let i = 0;
  for (const row of kept) {
    const want = fingerprint(row);
    while (i < all.length && fingerprint(all[i]!) !== want) i++;
    if (i === all.length) throw new Error(`a kept row of task ${row.taskId} is not in its message`);
    out.push(i++);
  }
  return out;
}

/**
 * The stream sequences the run's learner recorded for each step, by the version the step trained from. Under
 * rl.staleness pace a step's messages depend on when they arrived, so replay takes exactly those.
 */
export function recordedSeqs(recorded: RecordedSteps): Map<number, number[]> {
  const out = new Map<number, number[]>();
  for (const [step, { record }] of recorded) out.set(step - 1, record.seqs);
  return out;
}

export function streamSource(
  reader: ScoredReader,
  config: RunConfig,
  capture?: { steps: CapturedStep[]; payloadOf: (source: BatchSource) => Promise<Uint8Array> },
  recorded?: Map<number, number[]>,
): StepSource {
  // The learner's own selection rule over the same stream, so replay takes exactly the samples it took.
  const selector = new StepSelector<RolloutRow, BatchSource>(reader);
  return {
    async next(version) {
      const pace = config.rl.staleness === "pace";
      const follow = pace ? recorded?.get(version) : undefined;
      if (pace && !follow)
        throw new Error(
          `the run paces its samples (rl.staleness pace) and rs.<run>.steps records no step from version ${version}: which messages it trained on is not known`,
        );
      const batch = await selector.collect(version, {
        batchSize: config.rl.batchSize,
        maxOffPolicySteps: config.rl.maxOffPolicySteps,
        staleness: config.rl.staleness,
        ...(follow ? { follow } : {}),
        waitMs: 1000,
        giveUpAfterIdleMs: 3000,
      });
      if (!batch) return null;
      if (capture) {
        const batches = [];
        for (const s of batch.sources) {
          const payload = await capture.payloadOf(s);
          batches.push({ seq: s.msg.seq, payload, rows: keptIndices(decodeRolloutBatch(payload).rows, s.rows) });
        }
        capture.steps.push({ version, batches });
      }
      return batch.kept;
    },
    close: () => reader.close(),
  };
}

export function bundleSource(bundle: Bundle): StepSource {
  return { next: async (version) => bundleRows(bundle, version), close: async () => undefined };
}
