// What an environment needs from a code sandbox. Environments know nothing of NATS: the actor runtime
// injects an implementation (the NATS client in streams/sandbox-client.ts implements this shape).
export type SandboxLanguage = "python" | "node" | "bash";

export interface SandboxLimits {
  wallMs?: number;
  cpuMs?: number;
  memoryMb?: number;
  maxProcesses?: number;
  maxOutputBytes?: number;
  maxFileBytes?: number;
}

export interface SandboxExecRequest {
  language: SandboxLanguage;
  /** Program text run by the interpreter. */
  code: string;
  stdin?: string;
  /** Extra files written into the work dir before running, path relative to it -> contents. */
  files?: Record<string, string>;
  limits?: SandboxLimits;
}

export interface SandboxExecResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  outOfMemory: boolean;
  outputTruncated: boolean;
  wallMs: number;
  cpuMs: number;
}

export interface SandboxSession {
  readonly id: string;
  exec(req: SandboxExecRequest): Promise<SandboxExecResult>;
  close(): Promise<void>;
}

export interface CodeSandbox {
  /** One-shot execution in a fresh sandbox. */
  exec(req: SandboxExecRequest): Promise<SandboxExecResult>;
  /** A sandbox kept for one rollout: files and state persist across exec calls until close(). */
  openSession(opts?: { language?: SandboxLanguage; idleTimeoutMs?: number }): Promise<SandboxSession>;
}
