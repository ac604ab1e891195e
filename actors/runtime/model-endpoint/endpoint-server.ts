// The policy over HTTP for remote environments (environments/api/model-endpoint.ts): serve/'s vLLM generate route
// (registerVllmGenerateRoute, POST /inference/v1/generate) on a fastify server of its own, each request served by
// the ModelClient of the rollout named in its X-Rollstream-Rollout header (the train client sends its configured
// headers with every call) and recorded there, so the env server's trace can be checked against what the engine
// really generated, and every token keeps the policy version the engine recorded for it. The route's engine is
// one; which rollout a request belongs to travels beside it in an AsyncLocalStorage entered once the body is
// parsed (preHandler), so the route stays the one `rollstream serve` mounts.
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import type { EndpointCall, EndpointSession, ModelClient, ModelEndpoint, SamplingArgs } from "../../../environments/api/index.js";
import { BadRequest, installErrorHandler } from "../../../serve/http-errors.js";
import type { TokenEngine } from "../../../serve/token-engine.js";
import { registerVllmGenerateRoute } from "../../../serve/vllm-generate-route.js";
import { generateForSession, type EndpointSessionState } from "./session-engine.js";

export const ROLLOUT_HEADER = "x-rollstream-rollout";

export interface EndpointServerOptions {
  /** Address to listen on (default 127.0.0.1: the env server runs beside us; set 0.0.0.0 for another host). */
  host?: string;
  port?: number;
  /** The host the env server reaches us at, when it differs from `host` (a pod's address). */
  advertiseHost?: string;
  model?: string;
  /** The policy's vocabulary and context window: a prompt outside them is a 400. */
  limits: { vocabSize: number; contextTokens: number };
  log?: (e: Error) => void;
}

export class EndpointServer implements ModelEndpoint {
  private constructor(
    private readonly app: FastifyInstance,
    /** Open rollouts by their header value; the route's hook reads it. */
    private readonly sessions: Map<string, EndpointSessionState>,
    readonly baseUrl: string,
    readonly model: string,
  ) {}

  static async start(opts: EndpointServerOptions): Promise<EndpointServer> {
    const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024 });
    const host = opts.host ?? "127.0.0.1";
    const current = new AsyncLocalStorage<EndpointSessionState>();
    const sessions = new Map<string, EndpointSessionState>();
    installErrorHandler(app, opts.log ?? (() => undefined));
    app.addHook("preHandler", (req, _reply, done) => {
      const key = req.headers[ROLLOUT_HEADER];
      if (typeof key !== "string")
        return done(new BadRequest(`no ${ROLLOUT_HEADER} header: this endpoint serves the rollouts of a run, each under its own header`));
      const s = sessions.get(key);
      if (!s) return done(new BadRequest(`rollout ${key} is not open here (finished, cancelled, or never started)`));
      current.run(s, done);
    });
    const engine: TokenEngine = {
      limits: opts.limits,
      generate: (req) => generateForSession(current.getStore()!, req),
    };
    const model = opts.model ?? "rollstream-policy";
    registerVllmGenerateRoute(app, engine, { modelName: model });
    await app.listen({ host, port: opts.port ?? 0 });
    const addr = app.server.address();
    const port = typeof addr === "object" && addr ? addr.port : opts.port;
    const shown = opts.advertiseHost ?? (host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host);
    return new EndpointServer(app, sessions, `http://${shown}:${port}`, model);
  }

  open(model: ModelClient, sampling: SamplingArgs): EndpointSession {
    const key = randomUUID();
    const calls: EndpointCall[] = [];
    this.sessions.set(key, { model, sampling, calls });
    return { headers: { [ROLLOUT_HEADER]: key }, calls, close: () => this.sessions.delete(key) };
  }

  /** Rollouts open now (heartbeat). */
  get openSessions(): number {
    return this.sessions.size;
  }

  async close(): Promise<void> {
    this.sessions.clear();
    await this.app.close();
  }
}
