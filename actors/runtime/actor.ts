// What every actor gets and what it must provide. The wire itself (channels, KV) is injected per
// channel (tokens.ts), so an actor states in its constructor exactly which subjects it uses.
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { RunConfig } from "./config.js";
import type { ActorMetrics } from "./metrics.js";
import type { Health } from "./heartbeat.js";

export interface ActorContext {
  actor: string;
  /** Distinguishes replicas of one actor (also used in msg-ids and consumer names where needed). */
  instance: string;
  config: RunConfig;
  /** Folder of this run: <outDir>/<run>. */
  runDir: string;
  /** The connection, for services that are not run channels (the sandbox actor's micro service). */
  nc: NatsConnection;
  log: Logger;
  metrics: ActorMetrics;
  /** What it works on and waits for, written to the run's health bucket (heartbeat.ts). */
  health: Health;
  /** Aborted on SIGTERM/SIGINT: finish the current unit of work, then return. */
  signal: AbortSignal;
  /** Publishes a metrics event on rs.<run>.metrics.<actor> (also kept in the events stream). */
  publishMetrics(kind: string, values: Record<string, number>, step?: number, labels?: Record<string, string>): Promise<void>;
}

export interface Actor {
  /** Resolves when the actor's work is done or ctx.signal was aborted and it drained. */
  run(): Promise<void>;
}

export type ActorClass = new (...args: never[]) => Actor;

/** Thrown for failures that should exit with a specific process exit code. */
export class ActorExit extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
    this.name = "ActorExit";
  }
}

/** lease: the run's role is another's (a singleton that lost its lease, a second `train`). */
export const ExitCodes = { ok: 0, error: 1, config: 2, nats: 3, lease: 4, interrupted: 130 } as const;
