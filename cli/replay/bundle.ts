// A replay bundle: everything `rollstream replay --bundle DIR` needs to re-run recorded steps on another
// machine, with no NATS server and no run folder. The scored batches are the stored Arrow IPC payloads
// byte for byte (blob pointers followed), with the indices of the rows each step kept (the learner drops
// stale rows), so the replayed steps see exactly the samples the run trained on.
//
//   bundle.json      format, run, checkpoint step, model shape, and per step its batch files and rows
//   config.yaml      the run's config as it was written
//   backend.json     the kernel backend the run recorded (KV learner.backend), or null
//   recorded.jsonl   the learner's step records for those steps (StepRecords, one JSON object a line)
//   checkpoint/      the checkpoint the steps start from (step-XXXXXXXX/, sha256 manifest)
//   batches/         seq-<stream seq>.arrow
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { parseRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { decodeRolloutBatch, sha256Hex, StateKeySchemas, type RolloutRow, type StepRecord } from "../../streams/index.js";
import type { RecordedBackend } from "./backend.js";
import { parseStepRecords, recordedStepsOf, type RecordedSteps } from "./figures.js";

export const BUNDLE_FORMAT = "rollstream-replay-bundle-1";
const int = z.number().int().nonnegative();

const ManifestSchema = z.object({
  format: z.literal(BUNDLE_FORMAT),
  run: z.string(),
  createdAt: z.string(),
  checkpoint: int,
  fromSeq: int,
  model: z.record(z.string(), z.unknown()),
  steps: z.array(
    z.object({
      version: int,
      batches: z.array(
        z.object({
          seq: int,
          // Only names this writer makes: a bundle from elsewhere cannot point outside its folder.
          file: z.string().regex(/^batches\/seq-\d+\.arrow$/),
          bytes: int,
          sha256: z.string().regex(/^[0-9a-f]{64}$/),
          rows: z.array(int),
        }),
      ),
    }),
  ),
});
export type BundleManifest = z.infer<typeof ManifestSchema>;

/** One stored message a step read, and which of its rows the step kept. */
export interface CapturedBatch {
  seq: number;
  payload: Uint8Array;
  rows: number[];
}
export interface CapturedStep {
  version: number;
  batches: CapturedBatch[];
}

export interface BundleInput {
  run: string;
  configText: string;
  checkpointDir: string;
  checkpointStep: number;
  fromSeq: number;
  model: ModelConfig;
  backend: RecordedBackend | null;
  recorded: StepRecord[];
  steps: CapturedStep[];
}

export function writeBundle(dir: string, b: BundleInput): { files: number; bytes: number } {
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new Error(`${dir} is not empty: export into a new folder`);
  mkdirSync(join(dir, "batches"), { recursive: true });
  let files = 0;
  let bytes = 0;
  const steps = b.steps.map((s) => ({
    version: s.version,
    batches: s.batches.map((c) => {
      const file = `batches/seq-${c.seq}.arrow`;
      writeFileSync(join(dir, file), c.payload);
      files++;
      bytes += c.payload.length;
      return { seq: c.seq, file, bytes: c.payload.length, sha256: sha256Hex(c.payload), rows: c.rows };
    }),
  }));
  cpSync(b.checkpointDir, join(dir, "checkpoint", basename(b.checkpointDir)), { recursive: true });
  const manifest: BundleManifest = {
    format: BUNDLE_FORMAT,
    run: b.run,
    createdAt: new Date().toISOString(),
    checkpoint: b.checkpointStep,
    fromSeq: b.fromSeq,
    model: { ...b.model },
    steps,
  };
  writeFileSync(join(dir, "config.yaml"), b.configText);
  writeFileSync(join(dir, "backend.json"), `${JSON.stringify(b.backend, null, 2)}\n`);
  writeFileSync(join(dir, "recorded.jsonl"), b.recorded.map((r) => `${JSON.stringify(r)}\n`).join(""));
  writeFileSync(join(dir, "bundle.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  return { files, bytes };
}

export interface Bundle {
  dir: string;
  manifest: BundleManifest;
  configText: string;
  config: RunConfig;
  model: ModelConfig;
  backend: RecordedBackend | null;
  recorded: RecordedSteps;
  /** The checkpoint's training state, checked against its manifest's sha256. */
  state: Uint8Array;
}

function readJson(dir: string, file: string): unknown {
  const path = join(dir, file);
  if (!existsSync(path)) throw new Error(`${dir} is not a replay bundle: ${file} is missing`);
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new Error(`${path}: not JSON (${(e as Error).message})`);
  }
}

export function readBundle(dir: string): Bundle {
  const m = ManifestSchema.safeParse(readJson(dir, "bundle.json"));
  if (!m.success) throw new Error(`${join(dir, "bundle.json")}: ${m.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
  const b = StateKeySchemas["learner.backend"].nullable().safeParse(readJson(dir, "backend.json"));
  if (!b.success) throw new Error(`${join(dir, "backend.json")}: not a recorded backend (${b.error.issues[0]?.message})`);
  const configText = readFileSync(join(dir, "config.yaml"), "utf8");
  const config = parseRunConfig(parseYaml(configText), join(dir, "config.yaml"));
  const file = join(dir, "recorded.jsonl");
  const recorded = recordedStepsOf(existsSync(file) ? parseStepRecords(readFileSync(file, "utf8"), file) : []);
  const { state } = new CheckpointDir(join(dir, "checkpoint"), m.data.run).read(m.data.checkpoint);
  return { dir, manifest: m.data, configText, config, model: m.data.model as unknown as ModelConfig, backend: b.data, recorded, state };
}

/** The rows a bundle's step `version` kept, from its Arrow files (each checked against its sha256). */
export function bundleRows(bundle: Bundle, version: number): RolloutRow[] | null {
  const step = bundle.manifest.steps.find((s) => s.version === version);
  if (!step) return null;
  return step.batches.flatMap((c) => {
    const path = join(bundle.dir, c.file);
    const bytes = new Uint8Array(readFileSync(path));
    if (bytes.length !== c.bytes || sha256Hex(bytes) !== c.sha256) throw new Error(`${path}: does not match bundle.json (size or sha256)`);
    const { rows } = decodeRolloutBatch(bytes);
    return c.rows.map((i) => {
      const row = rows[i];
      if (!row) throw new Error(`${path}: bundle.json names row ${i} of ${rows.length}`);
      return row;
    });
  });
}
