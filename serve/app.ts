// `rollstream serve` as one fastify app: vLLM's token route and OpenAI routes, SGLang's native routes, the
// control and weight routes, vLLM's LoRA adapter routes, /metrics. Every route validates its input at the edge (4xx with one line); errors
// past the edge are the server's (500, logged), and the process goes on.
import Fastify, { type FastifyInstance } from "fastify";
import type { ModelConfig } from "../kernels/model-config.js";
import type { Tokenizer } from "../kernels/tokenizer.js";
import { registerChatRoute } from "./chat-route.js";
import { registerCompletionsRoute } from "./completions-route.js";
import { registerControlRoutes } from "./control-routes.js";
import { installErrorHandler } from "./http-errors.js";
import { LoraRegistry, registerLoraRoutes, type TensorLayout } from "./lora-routes.js";
import { registerMetrics } from "./metrics.js";
import type { PolicyTokenEngine } from "./policy-token-engine.js";
import { registerSglangRoutes } from "./sglang-routes.js";
import { registerVllmGenerateRoute } from "./vllm-generate-route.js";
import type { StoreWeights } from "./weight-loads.js";

export interface ServeAppOptions {
  engine: PolicyTokenEngine;
  tokenizer: Tokenizer;
  modelConfig: ModelConfig;
  modelName: string;
  store?: StoreWeights;
  /** The model's tensor layout: LoRA adapters are merged into its flat params. */
  layout: TensorLayout;
  log?: { error(o: object, msg: string): void };
}

/** Token-id prompts of a long context are large JSON bodies. */
const BODY_LIMIT = 64 * 1024 * 1024;

export function buildServeApp(o: ServeAppOptions): FastifyInstance {
  const app = Fastify({ bodyLimit: BODY_LIMIT, forceCloseConnections: true });
  installErrorHandler(app, (e) => o.log?.error({ err: e.message }, "request failed"));
  registerMetrics(app, o.engine);
  const models = new LoraRegistry(o.modelName);
  registerLoraRoutes(app, { engine: o.engine, registry: models, layout: o.layout });
  registerControlRoutes(app, {
    models,
    engine: o.engine,
    modelName: o.modelName,
    modelConfig: o.modelConfig,
    store: o.store,
    healthy: () => o.engine.engine.wedged === null,
  });
  registerVllmGenerateRoute(app, o.engine, { modelName: o.modelName, models });
  const openai = { engine: o.engine, tokenizer: o.tokenizer, modelName: o.modelName, models };
  registerCompletionsRoute(app, openai);
  registerChatRoute(app, openai);
  registerSglangRoutes(app, { engine: o.engine, tokenizer: o.tokenizer, modelConfig: o.modelConfig, models });
  return app;
}
