// What a runtime adds for remote environments (environments/remote/): the policy over HTTP for servers that call
// the model themselves, and their servers' health, asked every healthCheckMs and written in the heartbeat. A
// server that stops answering is logged once when it goes and once when it comes back.
import type { Environment, ModelEndpoint } from "../../environments/api/index.js";
import type { RemoteEnvHealth } from "../../streams/index.js";
import type { ActorContext } from "./actor.js";
import { EndpointServer } from "./model-endpoint/endpoint-server.js";
import { modelConfigOf } from "./model-factory.js";
import { closeAtExit, type LoadedEnvironment } from "./environments.js";

export interface RemoteRuntime {
  /** Present when some environment's server calls the model (verifiers). */
  endpoint?: ModelEndpoint;
  close(): Promise<void>;
}

export async function startRemoteRuntime(ctx: ActorContext, envs: Iterable<LoadedEnvironment>, over: { port?: number } = {}): Promise<RemoteRuntime> {
  const remote = [...envs].filter((l) => l.env.remote);
  if (remote.length === 0) return { close: async () => undefined };
  const settings = { ...ctx.config.actors.inference.endpoint, ...over };
  const shape = modelConfigOf(ctx.config);
  const endpoint = remote.some((l) => l.env.remote!.needsEndpoint)
    ? await EndpointServer.start({
        host: settings.host,
        port: settings.port,
        advertiseHost: settings.advertiseHost,
        limits: { vocabSize: shape.vocabSize, contextTokens: shape.maxPositionEmbeddings },
        log: (e) => ctx.log.error({ err: e.message }, "generate route failed"),
      })
    : undefined;
  if (endpoint) ctx.log.info({ baseUrl: endpoint.baseUrl }, "serving /inference/v1/generate for remote environments");
  const stopHealth = watchHealth(ctx, remote, settings.healthCheckMs, () => endpoint?.openSessions ?? 0);
  const close = async () => {
    unregister();
    stopHealth();
    await endpoint?.close();
  };
  const unregister = closeAtExit(close);
  return { endpoint, close };
}

function watchHealth(ctx: ActorContext, remote: LoadedEnvironment[], everyMs: number, inFlight: () => number): () => void {
  const last = new Map<string, RemoteEnvHealth>();
  const gauge = ctx.metrics.gauge("remote_env_up", "1 when the remote environment's server answered its last health check", ["env"]);
  const check = async (l: LoadedEnvironment & { env: Environment }) => {
    const healthy = (await l.env.health?.().catch(() => false)) ?? true;
    const before = last.get(l.key);
    if (before && before.healthy !== healthy) {
      if (healthy) ctx.log.info({ env: l.id, address: l.env.remote!.address }, "remote environment server answers health again");
      else ctx.log.warn({ env: l.id, address: l.env.remote!.address }, "remote environment server does not answer health");
    }
    gauge.set({ env: l.id }, healthy ? 1 : 0);
    last.set(l.key, { env: l.id, address: l.env.remote!.address, healthy, checkedAt: new Date().toISOString(), inFlight: inFlight() });
  };
  const tick = () => void Promise.all(remote.map(check));
  tick();
  const timer = setInterval(tick, everyMs);
  ctx.health.remoteEnvs(() => [...last.values()]);
  return () => {
    clearInterval(timer);
    ctx.health.remoteEnvs(null);
  };
}
