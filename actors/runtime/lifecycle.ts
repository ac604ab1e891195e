// Runs one actor as a process: config -> NATS -> topology -> container -> actor.run(), with a clean
// drain on SIGTERM/SIGINT and meaningful exit codes (0 done, 1 error, 2 bad config, 3 NATS, 130 interrupted).
import "reflect-metadata";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { mkdirSync } from "node:fs";
import { container as rootContainer, type InjectionToken } from "tsyringe";
import { jetstream } from "@nats-io/jetstream";
import { ConfigError, loadRunConfig, type RunConfig } from "./config.js";
import { createLogger } from "./logger.js";
import { ActorMetrics } from "./metrics.js";
import { connectNats, natsUrlFor } from "./nats-connect.js";
import { Tokens } from "./tokens.js";
import { ActorExit, ExitCodes, type Actor, type ActorContext } from "./actor.js";
import { ensureTopology } from "../../streams/topology.js";
import { RunState } from "../../streams/run-state.js";
import { encodeMsgpack } from "../../streams/msgpack-codec.js";
import { MetricsEventSchema } from "../../streams/messages.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";

export interface RunActorOptions {
  configPath: string;
  natsUrl?: string;
  instance?: string;
  metricsPort?: number;
}

export async function buildContext(actor: string, config: RunConfig, opts: { natsUrl?: string; instance?: string; signal: AbortSignal }): Promise<ActorContext> {
  const instance = opts.instance ?? `${hostname()}-${process.pid}`;
  const log = createLogger({ run: config.run, actor, instance });
  const nc = await connectNats(natsUrlFor(config.nats.url, opts.natsUrl), `rollstream-${actor}-${instance}`);
  const topology = await ensureTopology(nc, config.run, { replicas: config.nats.replicas, rolloutsMaxBytes: config.nats.rolloutsMaxBytes, taskAckWaitMs: config.nats.taskAckWaitMs });
  const js = jetstream(nc);
  const metrics = new ActorMetrics(actor, config.run);
  const runDir = resolve(config.outDir, config.run);
  mkdirSync(runDir, { recursive: true });
  const subject = topology.names.subjects.metrics(actor);
  return {
    actor,
    instance,
    config,
    runDir,
    nc,
    js,
    topology,
    state: new RunState(topology.kv),
    log,
    metrics,
    signal: opts.signal,
    async publishMetrics(kind, values, step, labels) {
      const data = encodeMsgpack(MetricsEventSchema, { actor, kind, time: Date.now(), step, values, labels });
      await js.publish(subject, data, { headers: makeHeaders({ contentType: ContentType.msgpack, run: config.run, step, actor, kind }) });
    },
  };
}

export type ActorClass = new (...args: never[]) => Actor;

/** Resolves the actor class from a child container that holds this process's context. */
export function resolveActor(cls: ActorClass, ctx: ActorContext): Actor {
  const c = rootContainer.createChildContainer();
  c.register(Tokens.Context, { useValue: ctx });
  c.register(Tokens.Config, { useValue: ctx.config });
  c.register(Tokens.Logger, { useValue: ctx.log });
  c.register(Tokens.Nats, { useValue: ctx.nc });
  c.register(Tokens.Metrics, { useValue: ctx.metrics });
  return c.resolve(cls as unknown as InjectionToken<Actor>);
}

export async function runActorProcess(actor: string, cls: ActorClass, opts: RunActorOptions): Promise<number> {
  let config: RunConfig;
  try {
    config = loadRunConfig(opts.configPath);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    return e instanceof ConfigError ? ExitCodes.config : ExitCodes.error;
  }
  const abort = new AbortController();
  let interrupted = false;
  const onSignal = (sig: string) => {
    if (abort.signal.aborted) {
      process.stderr.write(`${actor}: second ${sig}, exiting now\n`);
      process.exit(ExitCodes.interrupted);
    }
    interrupted = true;
    abort.abort();
  };
  process.on("SIGTERM", () => onSignal("SIGTERM"));
  process.on("SIGINT", () => onSignal("SIGINT"));

  let ctx: ActorContext;
  try {
    ctx = await buildContext(actor, config, { natsUrl: opts.natsUrl, instance: opts.instance, signal: abort.signal });
  } catch (e) {
    process.stderr.write(`${actor}: ${(e as Error).message}\n`);
    return ExitCodes.nats;
  }
  const port = opts.metricsPort ?? 0;
  if (port > 0) {
    try {
      const p = await ctx.metrics.serve(port);
      ctx.log.info({ port: p }, "metrics at /metrics");
    } catch (e) {
      ctx.log.warn({ err: (e as Error).message, port }, "metrics endpoint not started");
    }
  }
  ctx.log.info("starting");
  let code: number = ExitCodes.ok;
  try {
    await resolveActor(cls, ctx).run();
    ctx.log.info(interrupted ? "drained after signal" : "done");
    if (interrupted) code = ExitCodes.interrupted;
  } catch (e) {
    code = e instanceof ActorExit ? e.code : ExitCodes.error;
    ctx.log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, "actor failed");
  } finally {
    await ctx.metrics.close();
    await ctx.nc.drain().catch(() => undefined);
  }
  return code;
}
