import { z } from "zod";
import { chatMessageSchema, type ChatMessage } from "./messages.js";

export interface DatasetRow {
  id: string;
  prompt: ChatMessage[];
  /** The gold answer the rubric compares against ("" when a task has none, e.g. code graded by tests). */
  answer: string;
  info: Record<string, unknown>;
}

export interface Dataset {
  /** Number of rows; Infinity for endless generators. */
  readonly size: number;
  /** Deterministic for an index: the same index always gives the same row. */
  row(index: number): DatasetRow;
}

export const datasetRowSchema = z.object({
  id: z.string().min(1),
  prompt: z.array(chatMessageSchema).min(1),
  answer: z.string(),
  info: z.record(z.string(), z.unknown()),
});

/**
 * The two splits every environment has: "train", and "eval", the held-out split. "eval" follows the train
 * distribution on problems train never draws, so its pass rate measures what training taught.
 */
export type DatasetSplit = "train" | "eval";

/**
 * A split by name: train, eval, or a further held-out split an environment offers, named for how it differs
 * from train (arithmetic's "hard": multi-digit operands with a carry). Reported beside eval, never instead.
 */
export type SplitName = DatasetSplit | (string & {});

/** How an extra held-out split may be named: lower case, not train or eval. */
export const EXTRA_SPLIT_NAME = /^[a-z][a-z0-9_-]{0,31}$/;

/** A dataset over a fixed array of rows. */
export function listDataset(rows: readonly DatasetRow[]): Dataset {
  return {
    size: rows.length,
    row(index: number): DatasetRow {
      checkIndex(index, rows.length);
      return rows[index]!;
    },
  };
}

/** A dataset computed from the index, e.g. an endless task generator (size Infinity). */
export function generatorDataset(size: number, make: (index: number) => DatasetRow): Dataset {
  if (!(size >= 0)) throw new Error(`generatorDataset: size must be >= 0 or Infinity, got ${size}`);
  return {
    size,
    row(index: number): DatasetRow {
      checkIndex(index, size);
      return make(index);
    },
  };
}

/**
 * Wraps a dataset so every row is validated; a bad row throws an error naming the environment, split
 * and index instead of failing later somewhere far from its cause.
 */
export function validatedDataset(envId: string, split: SplitName, inner: Dataset): Dataset {
  return {
    size: inner.size,
    row(index: number): DatasetRow {
      let raw: unknown;
      try {
        raw = inner.row(index);
      } catch (err) {
        throw new Error(`environment ${envId}: dataset "${split}" row ${index} failed: ${errorMessage(err)}`);
      }
      const parsed = datasetRowSchema.safeParse(raw);
      if (!parsed.success) {
        const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(row)"}: ${i.message}`).join("; ");
        throw new Error(`environment ${envId}: dataset "${split}" row ${index} is invalid: ${issues}`);
      }
      return parsed.data as DatasetRow;
    },
  };
}

function checkIndex(index: number, size: number): void {
  if (!Number.isInteger(index) || index < 0 || index >= size) {
    throw new Error(`dataset index ${index} out of range [0, ${size})`);
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
