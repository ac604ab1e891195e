// `rollstream sandbox exec --lang python -c 'print(1)'`: runs code through the sandbox service (a
// quick try, and a health check of a deployment); `rollstream sandbox stats` shows every replica.
import { hintFor } from "../errors.js";
import { readFileSync } from "node:fs";
import { constants as osConstants } from "node:os";
import type { Command } from "commander";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Svcm } from "@nats-io/services";
import type { SandboxExecRequest, SandboxLanguage } from "../../environments/api/sandbox.js";
import { NatsSandboxClient, SANDBOX_SERVICE_NAME } from "../../streams/index.js";

const LANGS: SandboxLanguage[] = ["python", "node", "bash"];

/** Where the commands print (tests pass their own). */
export interface SandboxCliIo {
  out(text: string): void;
  err(text: string): void;
}

const processIo: SandboxCliIo = { out: (t) => void process.stdout.write(t), err: (t) => void process.stderr.write(t) };

interface ExecOpts {
  lang: string;
  code?: string;
  input?: string;
  server?: string;
  wallMs?: string;
  memoryMb?: string;
  json?: boolean;
  timeout?: string;
}

function serverUrl(explicit?: string): string {
  return explicit ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
}

async function connectTo(url: string): Promise<NatsConnection> {
  try {
    return await connect({ servers: url, timeout: 3000, maxReconnectAttempts: 0 });
  } catch (e) {
    throw new Error(`cannot reach NATS at ${url}: ${(e as Error).message} (set NATS_URL or --server)`);
  }
}

function readStdin(): string {
  return readFileSync(0, "utf8");
}

function positiveInt(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

/** The shell convention: the program's exit code, 128+N when killed by signal N, 124 on timeout. */
export function exitCodeFor(r: { exitCode: number | null; signal: string | null; timedOut: boolean }): number {
  if (r.timedOut) return 124;
  if (r.exitCode !== null) return r.exitCode;
  const n = r.signal ? (osConstants.signals as Record<string, number>)[r.signal] : undefined;
  return n ? 128 + n : 1;
}

async function execCommand(file: string | undefined, opts: ExecOpts, io: SandboxCliIo): Promise<number> {
  if (!LANGS.includes(opts.lang as SandboxLanguage)) throw new Error(`--lang must be one of ${LANGS.join(", ")}, got ${JSON.stringify(opts.lang)}`);
  let code = opts.code;
  if (code === undefined && file !== undefined) code = file === "-" ? readStdin() : readFileSync(file, "utf8");
  if (code === undefined) throw new Error("give the program with -c CODE, a FILE, or - to read it from stdin");
  const req: SandboxExecRequest = { language: opts.lang as SandboxLanguage, code };
  if (opts.input !== undefined) req.stdin = opts.input;
  const wallMs = positiveInt("--wall-ms", opts.wallMs);
  const memoryMb = positiveInt("--memory-mb", opts.memoryMb);
  if (wallMs !== undefined || memoryMb !== undefined) req.limits = { wallMs, memoryMb };
  const nc = await connectTo(serverUrl(opts.server));
  try {
    const client = new NatsSandboxClient(nc, { timeoutMs: positiveInt("--timeout", opts.timeout) ?? 30_000 });
    const r = await client.exec(req);
    if (opts.json) {
      io.out(`${JSON.stringify(r)}\n`);
    } else {
      io.out(r.stdout);
      io.err(r.stderr);
      const flags = [r.timedOut && "timed out", r.outOfMemory && "out of memory", r.outputTruncated && "output truncated"].filter(Boolean);
      const status = r.exitCode !== null ? `exit ${r.exitCode}` : `killed by ${r.signal ?? "signal"}`;
      io.err(`[sandbox] ${status} · ${r.wallMs.toFixed(1)} ms wall · ${r.cpuMs.toFixed(1)} ms cpu${flags.length ? ` · ${flags.join(", ")}` : ""}\n`);
    }
    return exitCodeFor(r);
  } finally {
    await nc.close();
  }
}

async function statsCommand(opts: { server?: string }, io: SandboxCliIo): Promise<number> {
  const nc = await connectTo(serverUrl(opts.server));
  try {
    // @nats-io/services pins its own nats-core types; the connection is the same object at run time.
    const client = new Svcm(nc as unknown as ConstructorParameters<typeof Svcm>[0]).client();
    let n = 0;
    for await (const s of await client.stats(SANDBOX_SERVICE_NAME)) {
      n++;
      io.out(`${s.name} ${s.version} id=${s.id} started=${s.started}\n`);
      for (const e of s.endpoints ?? []) {
        io.out(`  ${e.name.padEnd(14)} ${e.subject.padEnd(48)} requests=${e.num_requests} errors=${e.num_errors}\n`);
      }
      const data = s.endpoints?.[0]?.data;
      if (data && typeof data === "object") {
        io.out(
          `  ${Object.entries(data as Record<string, unknown>)
            .map(([k, v]) => `${k}=${String(v)}`)
            .join(" ")}\n`,
        );
      }
    }
    if (n === 0) {
      io.err(`no ${SANDBOX_SERVICE_NAME} replica answered\nhint: ${hintFor("no sandbox service is running")}\n`);
      return 1;
    }
    return 0;
  } finally {
    await nc.close();
  }
}

export function registerSandboxCommands(program: Command, io: SandboxCliIo = processIo): void {
  const sandbox = program.command("sandbox").description("talk to the sandbox service (rs.sandbox.*)");
  sandbox
    .command("exec [file]")
    .description("run a program in a fresh sandbox and print its output; the exit code mirrors the program's")
    .option("-l, --lang <language>", `language: ${LANGS.join(", ")}`, "python")
    .option("-c, --code <code>", "program text (instead of FILE)")
    .option("-i, --input <text>", "text given to the program on stdin")
    .option("-s, --server <url>", "NATS server (default: NATS_URL, then nats://127.0.0.1:4222)")
    .option("--wall-ms <ms>", "wall-clock limit")
    .option("--memory-mb <mb>", "memory limit")
    .option("--timeout <ms>", "how long to wait for a reply beyond the wall limit", "30000")
    .option("--json", "print the whole result as JSON")
    .action(async (file: string | undefined, opts: ExecOpts) => {
      try {
        process.exitCode = await execCommand(file, opts, io);
      } catch (e) {
        io.err(`sandbox exec: ${(e as Error).message}\n`);
        const hint = hintFor((e as Error).message, "-s/--server");
        if (hint) io.err(`hint: ${hint}\n`);
        process.exitCode = 2;
      }
    });
  sandbox
    .command("stats")
    .description("show every sandbox replica with its endpoints and counters")
    .option("-s, --server <url>", "NATS server (default: NATS_URL, then nats://127.0.0.1:4222)")
    .action(async (opts: { server?: string }) => {
      try {
        process.exitCode = await statsCommand(opts, io);
      } catch (e) {
        io.err(`sandbox stats: ${(e as Error).message}\n`);
        const hint = hintFor((e as Error).message, "-s/--server");
        if (hint) io.err(`hint: ${hint}\n`);
        process.exitCode = 2;
      }
    });
}
