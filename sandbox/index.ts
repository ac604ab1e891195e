// The sandbox actor's public surface: settings, the NATS service, and the executor underneath it
// (usable without NATS, e.g. in tests or a single-process deployment).
export { SandboxSettingsSchema, SandboxLimitsSettingsSchema, SandboxLimitCapsSchema, parseSandboxSettings } from "./settings.js";
export type { SandboxSettings, SandboxSettingsInput } from "./settings.js";
export { startSandboxService } from "./service.js";
export type { SandboxServiceHandle } from "./service.js";
export { SandboxExecutor, createLocalSandbox } from "./executor.js";
export type { IsolationReport } from "./executor.js";
export { SandboxRequestError } from "./errors.js";
export { SandboxFailure } from "./sandbox-process.js";
export { deniedSyscalls } from "./seccomp.js";
