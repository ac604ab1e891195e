// The policy over HTTP for remote environments (environments/api/model-endpoint.ts): a fastify server with vLLM's
// generate route, each request served by the ModelClient of the rollout named in its X-Rollstream-Rollout header
// and recorded there, so the env server's trace can be checked against what the engine really generated, and
// every token keeps the policy version the engine recorded for it.
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance } from "fastify";
import type { EndpointCall, EndpointSession, ModelClient, ModelEndpoint, SamplingArgs } from "../../../environments/api/index.js";
import { registerGenerateRoute, type GenerateSession } from "./generate-route.js";

export const ROLLOUT_HEADER = "x-rollstream-rollout";

export interface EndpointServerOptions {
  /** Address to listen on (default 127.0.0.1: the env server runs beside us; set 0.0.0.0 for another host). */
  host?: string;
  port?: number;
  /** The host the env server reaches us at, when it differs from `host` (a pod's address). */
  advertiseHost?: string;
  model?: string;
  signal?: AbortSignal;
}

export class EndpointServer implements ModelEndpoint {
  private readonly sessions = new Map<string, GenerateSession>();
  private constructor(
    private readonly app: FastifyInstance,
    readonly baseUrl: string,
    readonly model: string,
  ) {}

  static async start(opts: EndpointServerOptions = {}): Promise<EndpointServer> {
    const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024 });
    const host = opts.host ?? "127.0.0.1";
    let server: EndpointServer | undefined;
    registerGenerateRoute(app, {
      signal: opts.signal,
      sessionOf: (req) => {
        const key = req.headers[ROLLOUT_HEADER];
        if (typeof key !== "string") return `no ${ROLLOUT_HEADER} header: this endpoint serves the rollouts of a run, each under its own header`;
        return server!.sessions.get(key) ?? `rollout ${key} is not open here (finished, cancelled, or never started)`;
      },
    });
    await app.listen({ host, port: opts.port ?? 0 });
    const addr = app.server.address();
    const port = typeof addr === "object" && addr ? addr.port : opts.port;
    const shown = opts.advertiseHost ?? (host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host);
    server = new EndpointServer(app, `http://${shown}:${port}`, opts.model ?? "rollstream-policy");
    return server;
  }

  open(model: ModelClient, sampling: SamplingArgs): EndpointSession {
    const key = randomUUID();
    const calls: EndpointCall[] = [];
    this.sessions.set(key, { model, sampling, record: (promptIds, generation, ms) => calls.push({ promptIds, generation, ms }) });
    return {
      headers: { [ROLLOUT_HEADER]: key },
      calls,
      close: () => this.sessions.delete(key),
    };
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
