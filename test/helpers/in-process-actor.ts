// One actor run inside the test's process, bound to the test's nats-server the way lifecycle.ts binds a process's
// actor (resolveActor): no child process to start, and its log lines collected so a test can read what it said.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import type { ActorClass, ActorContext } from "../../actors/runtime/actor.js";
import type { RunConfig } from "../../actors/runtime/config.js";
import { Health } from "../../actors/runtime/heartbeat.js";
import { resolveActor } from "../../actors/runtime/lifecycle.js";
import { ActorMetrics } from "../../actors/runtime/metrics.js";
import { HealthBoard, RunChannels, RunState, type Topology } from "../../streams/index.js";

export interface InProcessActor {
  /** Every log line so far, parsed (pino's JSON: level 50 is error, `msg` the message). */
  logs: { level: number; msg: string; [k: string]: unknown }[];
  /** Ends with the actor's run(): rejected if it threw. */
  running: Promise<void>;
  /** Aborts the actor and waits for it to drain. */
  stop(): Promise<void>;
}

export function startInProcess(
  name: string,
  cls: ActorClass,
  o: { nc: NatsConnection; config: RunConfig; topology: Topology; runDir?: string },
): InProcessActor {
  const logs: InProcessActor["logs"] = [];
  const abort = new AbortController();
  const log = pino({ level: "debug" }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const ctx: ActorContext = {
    actor: name,
    instance: `${name}-test`,
    config: o.config,
    runDir: o.runDir ?? mkdtempSync(join(tmpdir(), `rs-${name}-`)),
    nc: o.nc,
    log,
    metrics: new ActorMetrics(name, o.config.run),
    health: new Health({ actor: name, instance: `${name}-test`, board: new HealthBoard(o.topology.wire.health), lastLog: () => null }),
    signal: abort.signal,
    publishMetrics: async () => undefined,
  };
  const channels = new RunChannels(o.topology.wire);
  const running = resolveActor(cls, { ctx, topology: o.topology, channels, state: new RunState(o.topology.kv) }).run();
  running.catch(() => undefined); // read by the test through `running`; never an unhandled rejection
  return {
    logs,
    running,
    async stop() {
      abort.abort();
      await running.catch(() => undefined);
    },
  };
}
