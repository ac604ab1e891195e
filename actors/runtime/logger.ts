// Structured logs with run/actor fields on every line, to stderr so stdout stays for command output.
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(fields: { run?: string; actor: string; instance?: string }, level = process.env.LOG_LEVEL ?? "info"): Logger {
  return pino({ level, base: { ...fields, pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination(2));
}
