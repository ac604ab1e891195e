// Settings of the sandbox actor (the `sandbox:` section of the run config). Every field has a
// documented default, so `{}` is a valid configuration for a single machine.
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

const pos = () => z.number().int().positive();
const nonneg = () => z.number().int().nonnegative();

/** Limits applied to one command. A request may lower or raise them, never beyond `maxLimits`. */
export const SandboxLimitsSettingsSchema = z.object({
  wallMs: pos().default(10_000).describe("wall-clock time of one command; the whole process tree is killed after it (default 10 s)"),
  cpuMs: pos().default(10_000).describe("CPU time (RLIMIT_CPU, whole seconds, rounded up) (default 10 s)"),
  memoryMb: pos().default(512).describe("RLIMIT_DATA per process: heap and other private writable memory (default 512 MiB)"),
  maxProcesses: pos().default(64).describe("RLIMIT_NPROC inside the sandbox; counts threads too (default 64)"),
  maxOutputBytes: pos()
    .default(1 << 20)
    .describe("bytes kept of stdout and of stderr each; more kills the command and sets outputTruncated (default 1 MiB)"),
  maxFileBytes: pos()
    .default(64 << 20)
    .describe("RLIMIT_FSIZE: largest file a command may write (default 64 MiB)"),
  maxOpenFiles: pos().default(256).describe("RLIMIT_NOFILE (default 256)"),
});

export const SandboxLimitCapsSchema = z.object({
  wallMs: pos().default(600_000).describe("largest wallMs a request may ask for (default 10 min)"),
  cpuMs: pos().default(600_000).describe("largest cpuMs a request may ask for (default 10 min)"),
  memoryMb: pos().default(8192).describe("largest memoryMb a request may ask for (default 8 GiB)"),
  maxProcesses: pos().default(1024).describe("largest maxProcesses a request may ask for (default 1024)"),
  maxOutputBytes: pos()
    .default(4 << 20)
    .describe("largest maxOutputBytes (default 4 MiB; also kept under the server's max_payload)"),
  maxFileBytes: pos()
    .default(1 << 30)
    .describe("largest maxFileBytes (default 1 GiB; the work dir's size still bounds it)"),
});

export const RuntimeSettingsSchema = z.object({
  binary: z
    .string()
    .default("auto")
    .describe(
      "interpreter path on the host; `auto` finds it (python: /usr/bin/python3, then python3 on PATH; node: /usr/bin/node, /usr/local/bin/node, then this process's node)",
    ),
  poolSize: nonneg().optional().describe("warm sandboxes kept ready for this runtime (default: the top-level poolSize)"),
  enabled: z.boolean().default(true).describe("serve this runtime (python is always needed: it runs the in-sandbox supervisor)"),
});

export const IsolationSettingsSchema = z.object({
  seccomp: z
    .enum(["auto", "required", "off"])
    .default("auto")
    .describe("syscall deny-list filter: auto = use it when this machine supports it, required = refuse to start without it"),
  hostUidBase: nonneg()
    .default(1_500_000_000)
    .describe("when the service runs as root, each live sandbox runs under its own host uid from [base, base+count) (default 1500000000)"),
  hostUidCount: pos().default(65_536).describe("size of that uid range (default 65536)"),
  diskMb: pos()
    .default(64)
    .describe(
      "size of each sandbox's private tmpfs work dir (/workspace), and of its /tmp (default 64 MiB each). tmpfs is memory: a replica may use up to (2 x diskMb + shmMb) x live sandboxes of RAM for files, so bound the replica with a memory limit (k8s/systemd) too",
    ),
  shmMb: pos().default(16).describe("size of /dev/shm in the sandbox (default 16 MiB)"),
  freshNamespaces: z
    .boolean()
    .default(false)
    .describe(
      "give each one-shot execution its own mount and ipc namespaces (made in the supervisor's template user namespace, or with perExecutionUid in one of its own) and a fresh tmpfs /workspace, /tmp and /dev/shm, on top of the reset between executions (needs seccomp). Costs CPU an execution (setting up and tearing down its namespaces; sandbox/README.md has the figure), so off by default. Sessions keep one set: their files persist",
    ),
  perExecutionUid: z
    .boolean()
    .default(true)
    .describe(
      "with freshNamespaces, as root: each one-shot execution (and batch case) of a sandbox runs under a host uid of its own, not the sandbox's, from [execUidBase, ...): RLIMIT_NPROC, signals and file ownership are then per execution. The supervisor keeps CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SYS_RESOURCE in the sandbox's user namespace to switch, limit (prlimit) and reap; every execution drops them (default true)",
    ),
  execUidBase: nonneg()
    .default(1_600_000_000)
    .describe(
      "first host uid of the per-execution uids: the sandbox with host uid hostUidBase + n gets [execUidBase + n x k, + k), k = min(maxExecsPerSandbox, 4096), one per execution, reused in turn after k (default 1600000000)",
    ),
  addressSpaceHeadroomMb: pos()
    .default(1024)
    .describe(
      "RLIMIT_AS = memoryMb + this: room for reservations (node's heap cage, thread stacks) while still capping shared mappings (default 1 GiB; node gets 2x)",
    ),
});

export const SandboxSettingsSchema = z.object({
  poolSize: nonneg().default(4).describe("warm sandboxes kept started per runtime (python, node), waiting for a program (default 4)"),
  maxConcurrent: pos()
    .default(() => Math.max(4, 4 * availableParallelism()))
    .describe("commands running at once; more wait in a FIFO queue (default 4 x CPU cores)"),
  maxQueued: pos().default(10_000).describe("commands waiting for a slot before new ones are refused with 503 (default 10000)"),
  maxExecsPerSandbox: pos()
    .default(1000)
    .describe(
      "one-shot requests a pool sandbox serves, one after another, before it is replaced; after each its supervisor resets it (every process killed, /workspace, /tmp and /dev/shm emptied, IPC objects removed, its own state checked) and a sandbox whose reset is not clean is replaced at once. 1 = a fresh sandbox per request (default 1000)",
    ),
  maxParallelStarts: pos().default(4).describe("sandboxes being started at once (pool refill and cold starts) (default 4)"),
  settleMs: z
    .number()
    .min(0)
    .default(10)
    .describe(
      "a request goes to the most recently used idle sandbox that has been back this long (its supervisor is still forking and preparing the next interpreter right after an execution), else to the most recent one; 0 = always the most recent (default 10)",
    ),
  maxSessions: pos().default(256).describe("open sessions per replica; more are refused with 503 (default 256)"),
  sessionIdleMs: pos()
    .default(300_000)
    .describe("a session with no command for this long is closed (default 5 min); a client may ask for less or more, up to maxSessionIdleMs"),
  maxSessionIdleMs: pos().default(3_600_000).describe("largest idle timeout a session may ask for (default 1 h)"),
  limits: SandboxLimitsSettingsSchema.prefault({}).describe("default limits of one command"),
  maxLimits: SandboxLimitCapsSchema.prefault({}).describe("caps on the limits a request may ask for"),
  workRoot: z
    .string()
    .default(() => join(tmpdir(), "rollstream-sandbox"))
    .describe(
      "root-owned folder for the service's runtime files (supervisor, /etc stubs, seccomp filter); sandboxes' work dirs are private tmpfs mounts, never here (default <tmpdir>/rollstream-sandbox)",
    ),
  runtimes: z
    .object({
      python: RuntimeSettingsSchema.prefault({}),
      node: RuntimeSettingsSchema.prefault({}),
    })
    .prefault({})
    .describe("interpreters offered to programs; bash is always offered when /bin/bash exists"),
  isolation: IsolationSettingsSchema.prefault({}),
  cpus: z
    .string()
    .regex(/^\d+(-\d+)?(,\d+(-\d+)?)*$/, "a CPU list like 0-3,8")
    .optional()
    .describe(
      "CPUs the sandboxes run on, as a list like 0-3,8 (default: every CPU the service may use). Keeps them off cores the learner or inference needs. A placement policy, not a boundary: a program may move itself to other CPUs",
    ),
  drainMs: nonneg().default(5_000).describe("on stop, how long running commands may finish before their sandboxes are killed (default 5 s)"),
});

export type SandboxSettings = z.output<typeof SandboxSettingsSchema>;
export type SandboxSettingsInput = z.input<typeof SandboxSettingsSchema>;
export type SandboxLimitsSettings = z.output<typeof SandboxLimitsSettingsSchema>;

/** Parses settings, throwing an Error that names every bad field. */
export function parseSandboxSettings(input: unknown): SandboxSettings {
  const r = SandboxSettingsSchema.safeParse(input ?? {});
  if (!r.success) {
    const issues = r.error.issues.map((i) => `sandbox.${i.path.join(".")}: ${i.message}`).join("; ");
    throw new Error(`invalid sandbox settings: ${issues}`);
  }
  return r.data;
}
