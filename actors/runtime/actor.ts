// What every actor gets and what it must provide.
import type { NatsConnection } from "@nats-io/transport-node";
import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "pino";
import type { RunConfig } from "./config.js";
import type { ActorMetrics } from "./metrics.js";
import type { Topology } from "../../streams/topology.js";
import type { RunState } from "../../streams/run-state.js";

export interface ActorContext {
  actor: string;
  /** Distinguishes replicas of one actor (also used in msg-ids and consumer names where needed). */
  instance: string;
  config: RunConfig;
  /** Folder of this run: <outDir>/<run>. */
  runDir: string;
  nc: NatsConnection;
  js: JetStreamClient;
  topology: Topology;
  state: RunState;
  log: Logger;
  metrics: ActorMetrics;
  /** Aborted on SIGTERM/SIGINT: finish the current unit of work, then return. */
  signal: AbortSignal;
  /** Publishes a metrics event on rs.<run>.metrics.<actor> (also kept in the events stream). */
  publishMetrics(kind: string, values: Record<string, number>, step?: number, labels?: Record<string, string>): Promise<void>;
}

export interface Actor {
  /** Resolves when the actor's work is done or ctx.signal was aborted and it drained. */
  run(): Promise<void>;
}

/** Thrown for failures that should exit with a specific process exit code. */
export class ActorExit extends Error {
  constructor(message: string, readonly code: number) {
    super(message);
    this.name = "ActorExit";
  }
}

export const ExitCodes = { ok: 0, error: 1, config: 2, nats: 3, interrupted: 130 } as const;
