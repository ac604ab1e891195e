// Structured logs with run/actor fields on every line, to stderr so stdout stays for command output.
import { pino, type Logger } from "pino";

export type { Logger };

/** Keeps the last warn/error line a logger wrote, for the heartbeat (heartbeat.ts): what a person reads first. */
export class LastLogLine {
  line: { level: "warn" | "error" | "fatal"; msg: string; time: string } | null = null;

  record(level: number, args: readonly unknown[]): void {
    const [first, second] = args;
    const fields = typeof first === "object" && first !== null ? (first as Record<string, unknown>) : null;
    const msg = fields ? (typeof second === "string" ? second : "") : String(first);
    // The error is often in the fields ({ err }): the message alone ("task failed") says little.
    const err = fields?.err;
    const why = typeof err === "string" ? err : typeof err === "object" && err !== null && "message" in err ? String(err.message) : "";
    const text = why ? `${msg}: ${why}` : msg;
    this.line = { level: level >= 60 ? "fatal" : level >= 50 ? "error" : "warn", msg: text.slice(0, 500), time: new Date().toISOString() };
  }
}

export function createLogger(fields: { run?: string; actor: string; instance?: string }, level = process.env.LOG_LEVEL ?? "info", last?: LastLogLine): Logger {
  const hooks = last
    ? {
        logMethod(this: Logger, args: Parameters<Logger["info"]>, method: Logger["info"], lvl: number) {
          if (lvl >= 40 && lvl >= this.levelVal) last.record(lvl, args);
          return method.apply(this, args);
        },
      }
    : undefined;
  // pino reads opts.hooks.logMethod when the key is there at all: leave it out without hooks.
  return pino({ level, base: { ...fields, pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime, ...(hooks ? { hooks } : {}) }, pino.destination(2));
}
