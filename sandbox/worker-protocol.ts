// Messages between the sandbox service's event loop and the worker thread that owns its sandboxes
// (executor-thread.ts / executor-worker.ts). Everything crosses by structured clone: requests and
// results are plain data already (validated at the NATS edge), errors travel as their kind, code and
// message and are rebuilt on the other side so the service maps them to the same error replies.
import type { SandboxBatchRequest, SandboxExecRequest } from "../environments/api/sandbox.js";
import type { IsolationReport } from "./executor.js";
import type { SessionOptions } from "./sessions.js";
import type { SandboxSettingsInput } from "./settings.js";

export interface WorkerInit {
  settings: SandboxSettingsInput;
  logLevel: string;
}

export type WorkerCall =
  | { id: number; op: "exec"; req: SandboxExecRequest }
  | { id: number; op: "execBatch"; req: SandboxBatchRequest }
  | { id: number; op: "openSession"; sessionId: string; opts: SessionOptions }
  | { id: number; op: "sessionExec"; sessionId: string; req: SandboxExecRequest }
  | { id: number; op: "closeSession"; sessionId: string }
  | { id: number; op: "setOutputCeiling"; bytes: number }
  | { id: number; op: "drain"; ms: number }
  | { id: number; op: "sandboxPids" }
  | { id: number; op: "close" };

/** A request error keeps its reply code; a sandbox failure or anything else is a 500 on the service side. */
export type WireError = { kind: "request"; code: number; message: string } | { kind: "failure" | "other"; message: string };

export type WorkerEvent =
  | { t: "ready"; isolation: IsolationReport; stats: Record<string, number> }
  | { t: "startFailed"; message: string }
  | { t: "reply"; id: number; value: unknown; stats: Record<string, number> }
  | { t: "error"; id: number; error: WireError; stats: Record<string, number> }
  | { t: "stats"; stats: Record<string, number> }
  | { t: "log"; line: string };
