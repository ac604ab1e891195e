// Runs one actor as a process: config -> NATS -> topology -> the run's lease for a singleton (actor-lease.ts)
// -> container -> actor.run(), with a clean drain on SIGTERM/SIGINT and meaningful exit codes (0 done, 1 error,
// 2 bad config, 3 NATS, 4 lease lost, 130 interrupted).
import "reflect-metadata";
import { closeRunResources } from "./environments.js";
import { hostname } from "node:os";
import { resolve } from "node:path";
import { mkdirSync } from "node:fs";
import { container as rootContainer, type InjectionToken } from "tsyringe";
import { ConfigError, loadRunConfig, type RunConfig } from "./config.js";
import { createLogger, LastLogLine } from "./logger.js";
import { ActorMetrics } from "./metrics.js";
import { connectNats, natsUrlFor } from "./nats-connect.js";
import { Tokens } from "./tokens.js";
import { Health } from "./heartbeat.js";
import { sandboxWithHealth } from "./sandbox-health.js";
import { ActorExit, ExitCodes, type Actor, type ActorClass, type ActorContext } from "./actor.js";
import { exitOnLostLease, holdActorLease, isSingleton } from "./actor-lease.js";
import { armed } from "./failpoints.js";
import {
  ensureTopology,
  HealthBoard,
  INFRA_RETRY_DELAYS_MS,
  MessageValidationError,
  NatsSandboxClient,
  RunChannels,
  RunState,
  type HeldLease,
  type Topology,
} from "../../streams/index.js";

export interface RunActorOptions {
  /** The run config's file, or the config itself (the sandbox actor serves every run and needs none). */
  configPath: string | RunConfig;
  natsUrl?: string;
  instance?: string;
  metricsPort?: number;
}

/** A process's context plus the channels its actor may have injected. */
export interface ActorWiring {
  ctx: ActorContext;
  topology: Topology;
  channels: RunChannels;
  state: RunState;
}

export async function buildContext(actor: string, config: RunConfig, opts: { natsUrl?: string; instance?: string; signal: AbortSignal }): Promise<ActorWiring> {
  const instance = opts.instance ?? `${hostname()}-${process.pid}`;
  const lastLog = new LastLogLine();
  const log = createLogger({ run: config.run, actor, instance }, undefined, lastLog);
  const nc = await connectNats(natsUrlFor(config.nats.url, opts.natsUrl), `rollstream-${actor}-${instance}`, { waitForServer: true });
  const topology = await ensureTopology(nc, config.run, {
    replicas: config.nats.replicas,
    rolloutsMaxBytes: config.nats.rolloutsMaxBytes,
    eventsMaxBytes: config.nats.eventsMaxBytes,
    taskAckWaitMs: config.nats.taskAckWaitMs,
  });
  const channels = new RunChannels(topology.wire);
  const metricsOut = channels.metrics(actor);
  const runDir = resolve(config.outDir, config.run);
  mkdirSync(runDir, { recursive: true });
  const metrics = new ActorMetrics(actor, config.run);
  const board = new HealthBoard(topology.wire.health);
  const onBeatError = (e: Error) => log.debug({ err: e.message }, "heartbeat not written");
  const health = new Health({ actor, instance, board, lastLog: () => lastLog.line, metrics, onBeatError });
  opts.signal.addEventListener("abort", () => health.draining(), { once: true });
  let metricsSeq = 0;
  const ctx: ActorContext = {
    actor,
    instance,
    config,
    runDir,
    nc,
    log,
    metrics,
    health,
    signal: opts.signal,
    async publishMetrics(kind, values, step, labels) {
      // Display only, but a run's record all the same: a publish whose ack did not come in time — a loaded
      // server, or this process stopped and resumed with the ack unread — is retried under the same msg-id
      // (stored once), not fatal.
      const event = { actor, kind, time: Date.now(), step, values, labels };
      const msgId = `metrics:${actor}:${instance}:${process.pid}:${++metricsSeq}`;
      for (let attempt = 1; ; attempt++) {
        try {
          await metricsOut.publish(event, { msgId });
          return;
        } catch (e) {
          if (e instanceof MessageValidationError || attempt >= 5 || opts.signal.aborted) throw e;
          log.warn({ kind, attempt, err: (e as Error).message }, "metrics event not acknowledged; publishing again");
          await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
        }
      }
    },
  };
  return { ctx, topology, channels, state: new RunState(topology.kv, INFRA_RETRY_DELAYS_MS) };
}

/** Resolves the actor class from a child container that holds this process's context and channels. */
export function resolveActor(cls: ActorClass, w: ActorWiring): Actor {
  const c = rootContainer.createChildContainer();
  c.register(Tokens.Context, { useValue: w.ctx });
  c.register(Tokens.RunState, { useValue: w.state });
  c.register(Tokens.Tasks, { useValue: w.channels.tasks });
  c.register(Tokens.RawRollouts, { useValue: w.channels.rawRollouts });
  c.register(Tokens.Scored, { useValue: w.channels.scored });
  c.register(Tokens.Weights, { useValue: w.channels.weights });
  c.register(Tokens.Checkpoints, { useValue: w.channels.checkpoints });
  c.register(Tokens.Restore, { useValue: w.channels.restore });
  c.register(Tokens.DeadLetters, { useValue: w.channels.deadLetters });
  c.register(Tokens.Groups, { useValue: w.channels.groups });
  c.register(Tokens.Steps, { useValue: w.channels.steps });
  c.register(Tokens.Eval, { useValue: w.channels.eval });
  c.register(Tokens.HealthBoard, { useValue: new HealthBoard(w.topology.wire.health) });
  c.register(Tokens.Sandbox, { useFactory: () => sandboxWithHealth(new NatsSandboxClient(w.ctx.nc), w.ctx.health) });
  return c.resolve(cls as unknown as InjectionToken<Actor>);
}

export async function runActorProcess(actor: string, cls: ActorClass, opts: RunActorOptions): Promise<number> {
  let config: RunConfig;
  try {
    config = typeof opts.configPath === "string" ? loadRunConfig(opts.configPath) : opts.configPath;
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

  let wiring: ActorWiring;
  try {
    wiring = await buildContext(actor, config, { natsUrl: opts.natsUrl, instance: opts.instance, signal: abort.signal });
  } catch (e) {
    process.stderr.write(`${actor}: ${(e as Error).message}\n`);
    return ExitCodes.nats;
  }
  const { ctx } = wiring;
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
  ctx.health.start();
  try {
    return await runHoldingLease(cls, wiring, () => interrupted);
  } finally {
    await closeRunResources();
    await ctx.metrics.close();
    await ctx.nc.drain().catch(() => undefined);
  }
}

/** Runs the actor, a singleton only once it holds its lease (given back when it ends); returns the exit code. */
async function runHoldingLease(cls: ActorClass, wiring: ActorWiring, interrupted: () => boolean): Promise<number> {
  const { ctx } = wiring;
  let lease: HeldLease | null = null;
  try {
    // The failpoint is the fault tests' control: a second singleton that ignores the lease does train.
    if (isSingleton(ctx.actor) && !armed("lease.ignore", ctx.actor)) {
      lease = await holdActorLease(ctx, wiring.state.kv, (why) => exitOnLostLease(ctx, why));
      if (!lease) {
        ctx.log.info("stopped while standing by");
        await ctx.health.exit();
        return ExitCodes.interrupted;
      }
    }
    await resolveActor(cls, wiring).run();
    ctx.log.info(interrupted() ? "drained after signal" : "done");
    await lease?.release();
    await ctx.health.exit();
    return interrupted() ? ExitCodes.interrupted : ExitCodes.ok;
  } catch (e) {
    ctx.log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, "actor failed");
    // Its restart (a new process) may take over at once rather than after the TTL.
    await lease?.release();
    await ctx.health.stop(); // the key stays, with the error as its last log line
    return e instanceof ActorExit ? e.code : ExitCodes.error;
  }
}
