// The routes around generation: vLLM's GET /health, GET /v1/models, POST /pause?mode=keep|abort|wait,
// POST /resume, GET /is_paused (vllm/entrypoints/serve/dev/rlhf/api_router.py, serve/pause/api_router.py); and
// rollstream's weight route POST /update_weights, which loads an HF folder ({weight_dir}: PRIME-RL's shape, so the
// vllm backend's reload works here too) or a version of the run's object store ({version}: a server started on a
// run), labelled weight_version (default: the version number, or the folder's name); GET /weight_updates lists
// every load since start (the update log that rows' version spans are checked against).
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { ModelConfig } from "../kernels/model-config.js";
import { BadRequest, parseWith } from "./http-errors.js";
import type { LoraRegistry } from "./lora-routes.js";
import type { PolicyTokenEngine } from "./policy-token-engine.js";
import { folderWeights, type StoreWeights } from "./weight-loads.js";

export interface ControlDeps {
  engine: PolicyTokenEngine;
  modelName: string;
  modelConfig: ModelConfig;
  /** Present when the server was started on a run: its weights by version. */
  store?: StoreWeights;
  /** The LoRA adapters loaded (listed by /v1/models with the base as parent). */
  models: LoraRegistry;
  /** The engine is wedged (a step passed its deadline): /health answers 503. */
  healthy(): boolean;
}

const PauseQuery = z.object({ mode: z.enum(["abort", "wait", "keep"]).default("abort"), clear_cache: z.enum(["true", "false"]).optional() });

const UpdateWeights = z
  .object({
    weight_dir: z.string().min(1).optional(),
    version: z.number().int().min(0).optional(),
    weight_version: z.string().min(1).optional(),
    abort_all_requests: z.boolean().default(false),
  })
  .refine((b) => (b.weight_dir === undefined) !== (b.version === undefined), { message: "give exactly one of weight_dir or version", path: ["weight_dir"] });

export function registerControlRoutes(app: FastifyInstance, d: ControlDeps): void {
  app.get("/health", async (_req, reply) => reply.code(d.healthy() ? 200 : 503).send());
  app.get("/v1/models", async () => modelList(d));
  app.post("/pause", async (req) => {
    const q = parseWith(PauseQuery, req.query, "query");
    const aborted = await d.engine.pause(q.mode);
    return { status: "paused", mode: q.mode, num_aborted_requests: aborted };
  });
  app.post("/resume", async () => {
    d.engine.resume();
    return { status: "resumed" };
  });
  app.get("/is_paused", async () => ({ is_paused: d.engine.paused }));
  app.post("/update_weights", async (req) => {
    const b = parseWith(UpdateWeights, req.body, "body");
    let bytes: () => Promise<Uint8Array>;
    let source: string;
    if (b.weight_dir !== undefined) {
      bytes = await folderWeights(b.weight_dir, d.modelConfig);
      source = b.weight_dir;
    } else {
      const store = d.store;
      if (!store) throw new BadRequest("version: this server was not started on a run (--run), so it has no object store; give weight_dir");
      const v = b.version!;
      // Read before the load is queued: a version the store does not have is the caller's 404, not a failed load.
      const read = await store(v).catch((e: Error) => {
        if (/is not in the object store/.test(e.message))
          throw new BadRequest(`version: v${v} is not in the run's object store (pruned, or never written)`, 404);
        throw e;
      });
      bytes = async () => read;
      source = `object store v${v}`;
    }
    const label = b.weight_version ?? (b.version !== undefined ? String(b.version) : (/v?(\d+)$/.exec(b.weight_dir!)?.[1] ?? b.weight_dir!));
    const rec = await d.engine.load(bytes, label, { abortAll: b.abort_all_requests, source });
    return { success: true, weight_version: rec.version, ms: Math.round(rec.ms), num_aborted_requests: rec.aborted };
  });
  app.get("/weight_updates", async () => ({ weight_version: d.engine.version, updates: d.engine.updates }));
}

/** vLLM's ModelList: the base model, then each loaded LoRA adapter with the base as parent. */
function modelList(d: ControlDeps) {
  return {
    object: "list",
    data: [
      {
        id: d.modelName,
        object: "model",
        created: Math.floor(Date.now() / 1000),
        owned_by: "rollstream",
        root: d.modelName,
        parent: null,
        max_model_len: d.modelConfig.maxPositionEmbeddings,
      },
      ...[...d.models.loaded].map(([name, path]) => ({
        id: name,
        object: "model",
        created: Math.floor(Date.now() / 1000),
        owned_by: "rollstream",
        root: path,
        parent: d.modelName,
        max_model_len: null,
      })),
    ],
  };
}
