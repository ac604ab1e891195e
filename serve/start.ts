// Starts `rollstream serve` on a model source: the PolicyEngine with the run's engine settings (or the flags'),
// the app, listening; returns what stops it. Used by the CLI command and by tests that want a real server in
// process.
import { appendFileSync } from "node:fs";
import { basename, resolve } from "node:path";
import type { FastifyInstance } from "fastify";
import { engineOptionsOf, PolicyEngine, type WeightUpdate } from "../actors/runtime/policy-engine.js";
import { buildServeApp } from "./app.js";
import { openServedModel, type ServeSource } from "./model-source.js";
import { PolicyTokenEngine } from "./policy-token-engine.js";

export interface ServeSettings {
  source: ServeSource;
  host: string;
  /** 0: any free port. */
  port: number;
  modelName?: string;
  /** The first weights' label (default: the run checkpoint's step, the run's version, or 0). */
  weightVersion?: string;
  threads?: number;
  seed?: number;
  weightUpdate?: WeightUpdate;
  maxSeqs?: number;
  kvBlocks?: number;
  /** A file each weight load is appended to as a JSON line (it outlives the process, unlike GET /weight_updates). */
  updateLog?: string;
  log: { info(o: object, msg: string): void; error(o: object, msg: string): void };
  /** The engine is wedged (a step past its deadline): default, exit so a supervisor starts a fresh process. */
  onWedged?(e: Error): void;
}

export interface RunningServer {
  app: FastifyInstance;
  engine: PolicyTokenEngine;
  url: string;
  close(): Promise<void>;
}

export async function startServe(s: ServeSettings): Promise<RunningServer> {
  const served = await openServedModel(s.source, { threads: s.threads, label: s.weightVersion });
  const fromRun = served.runConfig ? engineOptionsOf(served.runConfig) : {};
  const policy = new PolicyEngine(served.model, served.tokenizer, 0, {
    ...fromRun,
    seed: s.seed ?? served.runConfig?.rl.seed ?? 0,
    ...(s.weightUpdate ? { weightUpdate: s.weightUpdate } : {}),
    ...(s.maxSeqs ? { maxSeqs: s.maxSeqs } : {}),
    ...(s.kvBlocks ? { kvBlocks: s.kvBlocks } : {}),
    onWedged: (e) => (s.onWedged ?? exitWedged(s.log))(e),
    onWeightsError: (e, v) => s.log.error({ version: v, err: e.message }, "weights could not be loaded; keeping the current ones"),
  });
  const modelName = s.modelName ?? (s.source.kind === "folder" ? basename(resolve(s.source.path)) : served.runConfig!.run);
  const engine = new PolicyTokenEngine(policy, {
    vocabSize: served.tokenizer.vocabSize,
    contextTokens: served.modelConfig.maxPositionEmbeddings,
    label: served.label,
    source: served.source,
    startupWeights: () => served.model.toSafetensors(),
    onUpdate: (r) => {
      s.log.info({ ...r }, "weights in use");
      if (s.updateLog) appendFileSync(s.updateLog, `${JSON.stringify({ ...r, pid: process.pid })}\n`);
    },
  });
  const app = buildServeApp({
    engine,
    tokenizer: served.tokenizer,
    modelConfig: served.modelConfig,
    modelName,
    store: served.store,
    log: s.log,
    layout: { tensors: served.model.tensors(), numParams: served.model.numParams },
  });
  await app.listen({ host: s.host, port: s.port });
  const port = (app.server.address() as { port: number }).port;
  const url = `http://${s.host.includes(":") ? `[${s.host}]` : s.host}:${port}`;
  s.log.info({ url, model: modelName, weightVersion: served.label, source: served.source }, "rollstream serve listening");
  return {
    app,
    engine,
    url,
    close: async () => {
      await app.close();
      await policy.dispose();
      served.model.dispose();
      await served.close();
    },
  };
}

function exitWedged(log: ServeSettings["log"]): (e: Error) => void {
  return (e) => {
    log.error({ err: e.message }, "an engine step passed its deadline; exiting so a fresh process takes over");
    setTimeout(() => process.exit(1), 200);
  };
}
