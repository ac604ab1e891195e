// A real run for integration tests: a temp folder, a small config, a real nats-server, and actors
// launched as child processes exactly as `rollstream train` launches them.
import { replay } from "../../cli/commands/replay.js";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, type JetStreamClient, type JetStreamManager, type StoredMsg } from "@nats-io/jetstream";
import { startTestNats, type TestNats } from "./nats.js";
import { ActorLauncher } from "../../deploy/local/launcher.js";
import { parseRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { ensureTopology, type Topology } from "../../streams/topology.js";
import { RunState } from "../../streams/run-state.js";
import { decodeMsgpack, GroupOutcomeSchema, StepRecordSchema, type GroupOutcome, type StepRecord } from "../../streams/index.js";

/** The compiled CLI entry next to this compiled file (dist/ or dist-*). */
export const cliMain = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "cli", "main.js");

export function tinyConfig(run: string, outDir: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    run,
    outDir,
    model: { vocabSize: 288, hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, maxPositionEmbeddings: 48, threads: 1, seed: 5 },
    environments: [{ id: "arithmetic@^1", args: { digits: 1, ops: ["+"], seed: 3 } }],
    rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
    eval: { n: 8 },
    checkpoint: { interval: 2, keepLast: 2, keepVersions: 2 },
    actors: { inference: { replicas: 1, maxInFlight: 4, threads: 1 }, reward: { replicas: 1, maxInFlight: 4 } },
    ...overrides,
  };
}

export interface RunFixture {
  dir: string;
  configPath: string;
  config: RunConfig;
  nats: TestNats;
  nc: NatsConnection;
  js: JetStreamClient;
  topology: Topology;
  state: RunState;
  launcher: ActorLauncher;
  close(): Promise<void>;
}

export async function startRun(
  run: string,
  overrides: Record<string, unknown> = {},
  opts: { maxRestarts?: number; maxPayloadBytes?: number } = {},
): Promise<RunFixture> {
  const dir = mkdtempSync(join(tmpdir(), `rs-${run}-`));
  const raw = tinyConfig(run, dir, overrides);
  const configPath = join(dir, "run.yaml");
  writeFileSync(configPath, stringify(raw));
  const config = parseRunConfig(raw);
  const nats = await startTestNats({ maxPayloadBytes: opts.maxPayloadBytes });
  const nc = await connect({ servers: nats.url });
  const topology = await ensureTopology(nc, run, { taskAckWaitMs: config.nats.taskAckWaitMs });
  const launcher = new ActorLauncher({ binPath: cliMain, configPath, natsUrl: nats.url, logDir: join(dir, "logs"), maxRestarts: opts.maxRestarts ?? 0 });
  return {
    dir,
    configPath,
    config,
    nats,
    nc,
    js: jetstream(nc),
    topology,
    state: new RunState(topology.kv),
    launcher,
    async close() {
      await launcher.stopAll(5000);
      await nc.close();
      await nats.cleanup();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function waitUntil(what: string, cond: () => Promise<boolean> | boolean, timeoutMs: number, logDir?: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  let logs = "";
  if (logDir) {
    const { readdirSync, readFileSync } = await import("node:fs");
    for (const f of readdirSync(logDir)) logs += `\n== ${f}\n${readFileSync(join(logDir, f), "utf8").slice(-3000)}`;
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${logs}`);
}

/** Every message `stream` holds, in sequence order; only those on `subject` when given. */
export async function storedMessages(jsm: JetStreamManager, stream: string, subject?: string): Promise<StoredMsg[]> {
  const info = await jsm.streams.info(stream);
  const out: StoredMsg[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
    if (m && (subject === undefined || m.subject === subject)) out.push(m);
  }
  return out;
}

/** The learner's step records stored in the run's events stream, in stream order. */
export async function storedSteps(run: RunFixture): Promise<StepRecord[]> {
  const t = run.topology;
  return (await storedMessages(t.jsm, t.names.streams.events, t.names.subjects.steps)).map((m) => decodeMsgpack(StepRecordSchema, m.data, "step record"));
}

/** The reward actor's group outcomes stored in the run's events stream, in stream order. */
export async function storedOutcomes(run: RunFixture): Promise<GroupOutcome[]> {
  const t = run.topology;
  return (await storedMessages(t.jsm, t.names.streams.events, t.names.subjects.groups)).map((m) => decodeMsgpack(GroupOutcomeSchema, m.data, "group outcome"));
}

/**
 * `rollstream replay` in this process with --json (`opts` as its CLI options): its exit code, every line it
 * printed, and the per-step JSON objects among them.
 */
export async function replayInProcess(
  opts: Parameters<typeof replay>[0],
): Promise<{ code: number; lines: string[]; rows: { step: number; exact: boolean | null }[] }> {
  const lines: string[] = [];
  const orig = console.log;
  console.log = (...a: unknown[]) => {
    lines.push(a.join(" "));
  };
  let code: number;
  try {
    code = await replay({ ...opts, json: true });
  } finally {
    console.log = orig;
  }
  const rows = lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { step: number; exact: boolean | null });
  return { code, lines, rows };
}

/** One line per consumer of every stream (pending, in flight, redelivered): what a stalled test prints to say where messages sit. */
export async function describeConsumers(jsm: JetStreamManager): Promise<string> {
  const lines: string[] = [];
  try {
    for await (const s of jsm.streams.list()) {
      lines.push(`stream ${s.config.name}: ${s.state.messages} msgs, seq ${s.state.first_seq}-${s.state.last_seq}, leader ${s.cluster?.leader ?? "-"}`);
      for await (const c of jsm.consumers.list(s.config.name)) {
        lines.push(
          `  consumer ${c.name}: pending ${c.num_pending}, ack pending ${c.num_ack_pending}, redelivered ${c.num_redelivered}, waiting ${c.num_waiting}, delivered ${c.delivered.stream_seq}, ack floor ${c.ack_floor.stream_seq}, leader ${c.cluster?.leader ?? "-"}`,
        );
      }
    }
  } catch (e) {
    lines.push(`(listing failed: ${(e as Error).message})`);
  }
  return lines.join("\n");
}

/** A child process's exit code once it has exited (at once if it already has). */
export function exitOf(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once("exit", (code) => resolve(code))));
}
