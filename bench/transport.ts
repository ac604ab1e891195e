// Rollout batches through JetStream (encode -> publish -> consume -> decode) against a raw loopback TCP
// copy of the same bytes, both measured in this run. The producer runs in a worker thread with its own
// connection, as the reward actor does in its own process; the consumer (learner side) runs here.
//
//   node dist/bench/transport.js [--batches N] [--rows N] [--tokens N] [--memory]
//
// Last line printed: one JSON object of the figures.
import { mkdtempSync, rmSync } from "node:fs";
import { spawn } from "node:child_process";
import { createServer, connect as netConnect, type AddressInfo, type Socket } from "node:net";
import { cpus, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { AckPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { startNatsServer } from "../deploy/local/nats-server.js";
import { alignPayload, ContentType, Hdr, makeHeaders, MSG_ID_HEADER } from "../streams/headers.js";
import { decodeRolloutBatch, encodeRolloutBatch } from "../streams/arrow-codec.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutBatchMetaInput, type RolloutRow } from "../streams/rollout-schema.js";

export interface TransportBenchOptions {
  /** Batches (messages) per measurement. Default 40 (10 with quick). */
  batches?: number;
  /** Samples per batch. Default 256. */
  rows?: number;
  /** Tokens per sample: 1/8 prompt, the rest completion. Default 1024 (128 + 896). */
  tokens?: number;
  /** JetStream storage of the bench stream; the rollouts stream is file-backed. Default "file". */
  storage?: "file" | "memory";
  /** Bytes the consumer keeps in flight (DESIGN §3: well under the 64 MB slow-consumer cap). Default 32 MB. */
  inFlightBytes?: number;
  /** Publishes awaiting their ack at once. Default 4. */
  publishWindow?: number;
  /** Pad headers so payloads arrive 8-byte aligned, as the reward actor does (the other setting is measured too). Default true. */
  align?: boolean;
  quick?: boolean;
  log?: (line: string) => void;
}

// Two streams: the full pipeline, and the same payload bytes with no codec work (the transport alone).
const ROUTES = {
  codec: { stream: "RS_BENCH_ROLLOUTS", subject: "rs.bench.rollouts.scored" },
  bytesOnly: { stream: "RS_BENCH_BYTES", subject: "rs.bench.bytes" },
} as const;
const CORE_SUBJECT = "rs.bench.core";
const MB = 1e6;

/** Deterministic batch of rows with realistic shapes (not realistic values: the codec doesn't care). */
export function syntheticRolloutRows(rows: number, promptTokens: number, completionTokens: number, seed = 1): RolloutRow[] {
  let s = seed >>> 0 || 1;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0);
  return Array.from({ length: rows }, (_, i) => {
    const promptIds = new Int32Array(promptTokens);
    for (let j = 0; j < promptTokens; j++) promptIds[j] = next() % 151_000;
    const completionIds = new Int32Array(completionTokens);
    const completionMask = new Uint8Array(completionTokens);
    const samplerLogprobs = new Float32Array(completionTokens);
    for (let j = 0; j < completionTokens; j++) {
      completionIds[j] = next() % 151_000;
      completionMask[j] = (next() & 15) === 0 ? 0 : 1;
      samplerLogprobs[j] = -(next() / 4294967296) * 8;
    }
    const g = i >> 4;
    return {
      taskId: `task-${seed}-${g}`,
      groupId: `task-${seed}-${g}`,
      env: "gsm8k@1",
      exampleId: `gsm8k/${(seed * 1000 + g) % 7473}`,
      exampleIndex: (seed * 1000 + g) % 7473,
      promptIds,
      completionIds,
      completionMask,
      samplerLogprobs,
      turnOffsets: Int32Array.of(0),
      policyVersionMin: 7,
      policyVersionMax: 8,
      // A weight update halfway through the completion, as an engine with in-flight updates records it.
      versionSpans:
        completionTokens >= 2
          ? [
              { version: 7, start: 0, end: completionTokens >> 1 },
              { version: 8, start: completionTokens >> 1, end: completionTokens },
            ]
          : [],
      reward: (next() & 1) === 0 ? 1 : 0,
      advantage: (next() / 4294967296) * 2 - 1,
      rewardComponents: { correct: next() & 1, format: 1 },
      metrics: { answer_length: next() % 400 },
      isTruncated: (next() & 31) === 0,
      stopReason: (next() & 31) === 0 ? "length" : "stop",
      numTurns: 1,
      generateMs: 1500 + (next() % 1000),
      envMs: next() % 5,
      scoreMs: 3 + (next() % 20),
      step: 42,
      // A short single-turn transcript (the codec's cost of text grows with its bytes, not its shape).
      messages: [
        { role: "user", content: `Natalia sold clips to ${next() % 100} of her friends in April, and then half as many in May. How many clips did she sell?` },
        { role: "assistant", content: `She sold ${next() % 100} clips in May, so ${next() % 200} in total. <answer>${next() % 200}</answer>` },
      ],
      stateJson: `{"answer":"${next() % 200}"}`,
      errors: [],
    };
  });
}

interface Shape {
  rows: number;
  prompt: number;
  completion: number;
}

/** A few distinct batches, cycled; each batch gets its own task ids so msg-ids and contents differ. */
function batchSource(shape: Shape): (i: number) => RolloutRow[] {
  const templates = [1, 2, 3].map((seed) => syntheticRolloutRows(shape.rows, shape.prompt, shape.completion, seed));
  return (i) => templates[i % templates.length]!.map((r) => ({ ...r, taskId: `${r.taskId}-b${i}`, groupId: `${r.groupId}-b${i}` }));
}

function meta(i: number): RolloutBatchMetaInput {
  return { run: "bench", producer: "bench-transport", createdAt: new Date().toISOString(), batchId: `bench-${i}`, chunk: 0, chunks: 1 };
}

/** As JetStream hands payloads over: inside a larger buffer, at an offset that is not 8-byte aligned. */
function misaligned(bytes: Uint8Array): Uint8Array {
  const big = new Uint8Array(bytes.byteLength + 8);
  big.set(bytes, 3);
  return big.subarray(3, 3 + bytes.byteLength);
}

// A byte pipe in its own process: what a broker that did nothing but forward bytes would cost.
const RELAY_SOURCE = `
const net = require("node:net");
const target = Number(process.argv[1]);
const srv = net.createServer((up) => { const down = net.connect(target, "127.0.0.1"); down.setNoDelay(true); up.pipe(down); });
srv.listen(0, "127.0.0.1", () => process.send(srv.address().port));
process.on("disconnect", () => process.exit(0));
`;

async function startRelay(targetPort: number): Promise<{ port: number; stop: () => void }> {
  const child = spawn(process.execPath, ["-e", RELAY_SOURCE, String(targetPort)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const port = await new Promise<number>((r, j) => child.once("message", (m) => r(Number(m))).once("exit", (c) => j(new Error(`tcp relay exited with ${c}`))));
  return { port, stop: () => void child.kill() };
}

/** The same bytes over loopback TCP, written and read in this thread; `relay`: through a pipe process. */
async function tcpCopyMBps(payloads: Uint8Array[], relay = false): Promise<number> {
  const total = payloads.reduce((s, p) => s + p.byteLength, 0);
  let received = 0;
  let serverSock: Socket | undefined;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const server = createServer((sock) => {
    serverSock = sock;
    sock.on("data", (chunk: Buffer) => {
      received += chunk.byteLength;
      if (received >= total) done();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const sinkPort = (server.address() as AddressInfo).port;
  const pipe = relay ? await startRelay(sinkPort) : undefined;
  const client = netConnect(pipe?.port ?? sinkPort, "127.0.0.1");
  client.setNoDelay(true);
  await new Promise<void>((r, j) => client.once("connect", r).once("error", j));
  const t0 = performance.now();
  for (const p of payloads) {
    if (!client.write(p)) await new Promise<void>((r) => client.once("drain", r));
  }
  await finished;
  const sec = (performance.now() - t0) / 1000;
  client.destroy();
  serverSock?.destroy();
  pipe?.stop();
  await new Promise<void>((r) => server.close(() => r()));
  return total / MB / sec;
}

// ---------------------------------------------------------------------------------------------------
// Producer (worker thread): encode + publish with a bounded window of unacked publishes.

interface ProducerJob {
  role: "rollstream-transport-producer";
  url: string;
  batches: number;
  shape: Shape;
  publishWindow: number;
  /**
   * codec: encode then JetStream-publish (the pipeline); bytes: JetStream-publish payloads encoded before
   * the clock starts (JetStream alone); core: the same bytes as core NATS publishes (no persistence).
   */
  mode: "codec" | "bytes" | "core";
  /** Pad the header block so payloads arrive 8-byte aligned (what the reward actor does). */
  align: boolean;
}

type ProducerReport = { kind: "ready" } | { kind: "done"; encodeMs: number; publishedMs: number; bytes: number } | { kind: "error"; message: string };

async function producerMain(job: ProducerJob): Promise<void> {
  const port = parentPort!;
  const nc = await connect({ servers: job.url, name: "bench-producer" });
  const js = jetstream(nc);
  const source = batchSource(job.shape);
  const batches = Array.from({ length: job.batches }, (_, i) => source(i)); // built before the clock starts
  // Pre-encode (transport-only run), or warm the encoder's JIT so the timed run is steady-state.
  const codec = job.mode === "codec";
  const preEncoded = codec ? [] : batches.map((rows, i) => encodeRolloutBatch(rows, meta(i)));
  if (codec) for (let k = 0; k < 3; k++) encodeRolloutBatch(batches[k % batches.length]!, meta(k));
  const subject = job.mode === "core" ? CORE_SUBJECT : ROUTES[codec ? "codec" : "bytesOnly"].subject;
  port.postMessage({ kind: "ready" } satisfies ProducerReport);
  await new Promise<void>((r) => port.once("message", () => r()));
  const t0 = performance.now();
  let encodeMs = 0;
  let bytes = 0;
  const inflight = new Set<Promise<unknown>>();
  for (let i = 0; i < job.batches; i++) {
    const te = performance.now();
    const rows = batches[i]!;
    const data = codec ? encodeRolloutBatch(rows, meta(i)) : preEncoded[i]!;
    encodeMs += performance.now() - te;
    bytes += data.byteLength;
    // The headers the reward actor sends, padded the same way (alignPayload) unless --no-align.
    const h = makeHeaders({ contentType: ContentType.arrow, run: "bench", rows: rows.length, schema: ROLLOUT_SCHEMA_VERSION, kind: "rollouts.scored" });
    h.set(MSG_ID_HEADER, `bench-${job.mode}-${job.align ? "a" : "u"}-${i}`); // distinct per pass: the stream de-duplicates
    if (job.align) alignPayload(h);
    if (job.mode === "core") {
      // No acks in core NATS: a flush per window is the only backpressure (else the slow-consumer cap hits).
      nc.publish(subject, data, { headers: h });
      if ((i + 1) % job.publishWindow === 0) await nc.flush();
      continue;
    }
    const p = js.publish(subject, data, { headers: h });
    inflight.add(p);
    const settle = () => void inflight.delete(p);
    p.then(settle, settle); // the rejection itself surfaces through Promise.race / Promise.all below
    if (inflight.size >= job.publishWindow) await Promise.race(inflight);
  }
  await Promise.all(inflight);
  if (job.mode === "core") await nc.flush();
  const publishedMs = performance.now() - t0;
  await nc.drain();
  port.postMessage({ kind: "done", encodeMs, publishedMs, bytes } satisfies ProducerReport);
}

// ---------------------------------------------------------------------------------------------------

type Mode = ProducerJob["mode"];

async function pipeline(
  nc: NatsConnection,
  url: string,
  mode: Mode,
  batches: number,
  shape: Shape,
  msgBytes: number,
  o: { inFlightBytes: number; publishWindow: number; align: boolean },
) {
  const maxMessages = Math.max(1, Math.floor(o.inFlightBytes / msgBytes));
  const worker = new Worker(fileURLToPath(import.meta.url), {
    workerData: { role: "rollstream-transport-producer", url, batches, shape, publishWindow: o.publishWindow, mode, align: o.align } satisfies ProducerJob,
  });
  const reports: ProducerReport[] = [];
  const waiters: ((r: ProducerReport) => void)[] = [];
  const nextReport = () => new Promise<ProducerReport>((r) => (reports.length ? r(reports.shift()!) : waiters.push(r)));
  worker.on("message", (m: ProducerReport) => (waiters.length ? waiters.shift()!(m) : reports.push(m)));
  worker.on("error", (e) => {
    const m: ProducerReport = { kind: "error", message: e.message };
    if (waiters.length) waiters.shift()!(m);
    else reports.push(m);
  });
  try {
    const ready = await nextReport();
    if (ready.kind !== "ready") throw new Error(`producer failed to start: ${JSON.stringify(ready)}`);
    // JetStream: a pull consumer with ~inFlightBytes in flight, acking each batch. Core: a plain subscription.
    let messages: AsyncIterable<{ data: Uint8Array; headers?: { get(k: string): string } | undefined; ack?: () => void }>;
    let stop: () => Promise<void>;
    if (mode === "core") {
      const sub = nc.subscribe(CORE_SUBJECT);
      await nc.flush();
      messages = sub;
      stop = async () => sub.unsubscribe();
    } else {
      const consumer = await jetstream(nc).consumers.get(ROUTES[mode === "codec" ? "codec" : "bytesOnly"].stream, "bench-learner");
      const pulled = await consumer.consume({ max_messages: maxMessages, expires: 1000 });
      messages = pulled;
      stop = () => pulled.close().then(() => undefined);
    }
    let received = 0;
    let rows = 0;
    let bytes = 0;
    let decodeMs = 0;
    let misalignedMsgs = 0;
    const t0 = performance.now();
    worker.postMessage("go");
    const producerDone = nextReport();
    // Never hang: stop consuming if the producer dies or the whole run takes unreasonably long.
    void producerDone.then((r) => (r.kind === "error" ? stop() : undefined));
    const watchdog = setTimeout(() => void stop(), 120_000);
    for await (const m of messages) {
      if (mode === "codec") {
        const td = performance.now();
        rows += decodeRolloutBatch(m.data).rows.length;
        decodeMs += performance.now() - td;
      } else {
        rows += Number(m.headers?.get(Hdr.rows));
      }
      bytes += m.data.byteLength;
      if (m.data.byteOffset % 8 !== 0) misalignedMsgs++;
      m.ack?.();
      if (++received === batches) break;
    }
    const endToEndMs = performance.now() - t0;
    clearTimeout(watchdog);
    await stop();
    const done = await producerDone;
    if (done.kind !== "done") throw new Error(`producer failed: ${JSON.stringify(done)}`);
    if (received !== batches || rows !== batches * shape.rows) throw new Error(`${mode}: consumed ${received}/${batches} batches, ${rows} rows`);
    return { endToEndMs, bytes, decodeMs, maxMessages, misalignedFraction: misalignedMsgs / received, producer: done };
  } finally {
    await worker.terminate();
  }
}

export async function runTransportBench(opts: TransportBenchOptions = {}): Promise<Record<string, number>> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const batches = opts.batches ?? (opts.quick ? 10 : 40);
  const tokens = opts.tokens ?? 1024;
  const shape: Shape = { rows: opts.rows ?? 256, prompt: Math.floor(tokens / 8), completion: tokens - Math.floor(tokens / 8) };
  const inFlightBytes = opts.inFlightBytes ?? 32 * 1024 * 1024;
  const publishWindow = opts.publishWindow ?? 4;
  if (!(batches > 0 && shape.rows > 0 && tokens > 0)) throw new Error(`batches, rows and tokens must be positive (got ${batches}, ${shape.rows}, ${tokens})`);

  // 1. Codec alone, on the same batches the pipeline will send.
  const source = batchSource(shape);
  const rowsPerBatch = Array.from({ length: batches }, (_, i) => source(i));
  for (let k = 0; k < 3; k++) encodeRolloutBatch(rowsPerBatch[k % batches]!, meta(k)); // warm the JIT before timing
  const t = performance.now();
  const payloads = rowsPerBatch.map((rows, i) => encodeRolloutBatch(rows, meta(i)));
  const encodeMs = performance.now() - t;
  const totalBytes = payloads.reduce((s, p) => s + p.byteLength, 0);
  const msgBytes = Math.max(...payloads.map((p) => p.byteLength));
  const timeDecode = (inputs: Uint8Array[]) => {
    for (let k = 0; k < 3; k++) decodeRolloutBatch(inputs[k % batches]!);
    const t0 = performance.now();
    for (const v of inputs) decodeRolloutBatch(v);
    return performance.now() - t0;
  };
  const decodeMs = timeDecode(payloads.map(misaligned));
  const decodeAlignedMs = timeDecode(payloads);
  rowsPerBatch.length = 0;

  // 2. Baseline: the same bytes over a raw loopback TCP connection; and through a pipe process (a broker's floor).
  // Median of three: the baseline is short (~0.1 s) and this machine is noisy.
  const median3 = async (f: () => Promise<number>) => [await f(), await f(), await f()].sort((a, b) => a - b)[1]!;
  await tcpCopyMBps(payloads.slice(0, 2));
  const tcpMBps = await median3(() => tcpCopyMBps(payloads));
  const tcpRelayMBps = await median3(() => tcpCopyMBps(payloads, true));

  // 3. The pipeline through a real nats-server (8 MB max payload, like deploy/local).
  const dir = mkdtempSync(join(tmpdir(), "rs-bench-transport-"));
  const server = await startNatsServer({ storeDir: dir, maxPayloadBytes: 8 * 1024 * 1024 });
  let nc: NatsConnection | undefined;
  try {
    nc = await connect({ servers: server.url, name: "bench-learner" });
    const jsm = await jetstreamManager(nc);
    for (const { stream, subject } of Object.values(ROUTES)) {
      await jsm.streams.add({
        name: stream,
        subjects: [subject],
        retention: RetentionPolicy.Limits,
        storage: opts.storage === "memory" ? StorageType.Memory : StorageType.File,
        discard: DiscardPolicy.Old,
        max_bytes: Math.max(512 * 1024 * 1024, 3 * totalBytes),
      });
      await jsm.consumers.add(stream, { durable_name: "bench-learner", ack_policy: AckPolicy.Explicit, max_ack_pending: 1000 });
    }
    const align = opts.align ?? true;
    const pipe = { inFlightBytes, publishWindow, align };
    const core = await pipeline(nc, server.url, "core", batches, shape, msgBytes, pipe);
    const bare = await pipeline(nc, server.url, "bytes", batches, shape, msgBytes, pipe);
    const p = await pipeline(nc, server.url, "codec", batches, shape, msgBytes, pipe);
    // The same pipeline with the header padding off: what alignPayload buys, measured in this run.
    const pOther = await pipeline(nc, server.url, "codec", batches, shape, msgBytes, { ...pipe, align: !align });
    const [pAligned, pUnaligned] = align ? [p, pOther] : [pOther, p];

    const mbps = (bytes: number, ms: number) => +(bytes / MB / (ms / 1000)).toFixed(1);
    const ratio = (a: number, b: number) => +(a / b).toFixed(3);
    const figures = {
      batches,
      rowsPerBatch: shape.rows,
      tokensPerRow: tokens,
      batchMB: +(totalBytes / batches / MB).toFixed(3),
      encodeMBps: mbps(totalBytes, encodeMs),
      decodeMBps: mbps(totalBytes, decodeMs),
      decodeAlignedMBps: mbps(totalBytes, decodeAlignedMs),
      encodeMsPerBatch: +(encodeMs / batches).toFixed(2),
      decodeMsPerBatch: +(decodeMs / batches).toFixed(2),
      decodeAlignedMsPerBatch: +(decodeAlignedMs / batches).toFixed(2),
      publishMBps: mbps(p.producer.bytes, p.producer.publishedMs),
      endToEndMBps: mbps(p.bytes, p.endToEndMs),
      endToEndAlignedMBps: mbps(pAligned.bytes, pAligned.endToEndMs),
      endToEndUnalignedMBps: mbps(pUnaligned.bytes, pUnaligned.endToEndMs),
      jetstreamOnlyMBps: mbps(bare.bytes, bare.endToEndMs),
      jetstreamOnlyPublishMBps: mbps(bare.producer.bytes, bare.producer.publishedMs),
      coreNatsMBps: mbps(core.bytes, core.endToEndMs),
      endToEndBatchesPerSec: +(batches / (p.endToEndMs / 1000)).toFixed(1),
      endToEndSamplesPerSec: Math.round((batches * shape.rows) / (p.endToEndMs / 1000)),
      tcpLoopbackMBps: +tcpMBps.toFixed(1),
      tcpRelayMBps: +tcpRelayMBps.toFixed(1),
      ratioEndToEndVsTcp: 0,
      ratioEncodeVsTcp: 0,
      ratioDecodeVsTcp: 0,
      ratioJetstreamOnlyVsTcp: 0,
      ratioCoreNatsVsTcp: 0,
      ratioTcpRelayVsTcp: 0,
      ratioEndToEndVsJetstreamOnly: 0,
      ratioAlignedVsUnaligned: 0,
      pullMaxMessages: p.maxMessages,
      misalignedFraction: +pAligned.misalignedFraction.toFixed(3),
      misalignedFractionUnpadded: +pUnaligned.misalignedFraction.toFixed(3),
      fileStorage: opts.storage === "memory" ? 0 : 1,
    };
    figures.ratioEndToEndVsTcp = ratio(figures.endToEndMBps, figures.tcpLoopbackMBps);
    figures.ratioEncodeVsTcp = ratio(figures.encodeMBps, figures.tcpLoopbackMBps);
    figures.ratioDecodeVsTcp = ratio(figures.decodeAlignedMBps, figures.tcpLoopbackMBps);
    figures.ratioJetstreamOnlyVsTcp = ratio(figures.jetstreamOnlyMBps, figures.tcpLoopbackMBps);
    figures.ratioCoreNatsVsTcp = ratio(figures.coreNatsMBps, figures.tcpLoopbackMBps);
    figures.ratioTcpRelayVsTcp = ratio(figures.tcpRelayMBps, figures.tcpLoopbackMBps);
    figures.ratioEndToEndVsJetstreamOnly = ratio(figures.endToEndMBps, figures.jetstreamOnlyMBps);
    figures.ratioAlignedVsUnaligned = ratio(figures.endToEndAlignedMBps, figures.endToEndUnalignedMBps);

    const storage = opts.storage ?? "file";
    log(
      `transport bench: ${batches} batches x ${shape.rows} samples x ${tokens} tokens (${shape.prompt} prompt + ${shape.completion} completion), ${figures.batchMB} MB/batch, ${cpus().length} CPUs`,
    );
    log(`  encode alone      ${figures.encodeMBps} MB/s (${figures.encodeMsPerBatch} ms/batch)`);
    log(
      `  decode alone      ${figures.decodeAlignedMBps} MB/s aligned, in place (${figures.decodeAlignedMsPerBatch} ms/batch); ${figures.decodeMBps} MB/s misaligned, copied first (${figures.decodeMsPerBatch} ms/batch)`,
    );
    log(`  publish (worker)  ${figures.publishMBps} MB/s (window ${publishWindow}, msg-id per batch)`);
    log(
      `  end to end        ${figures.endToEndMBps} MB/s = ${figures.endToEndSamplesPerSec} samples/s (encode -> JetStream ${storage} -> pull ${p.maxMessages} in flight -> decode)`,
    );
    log(
      `    header padded   ${figures.endToEndAlignedMBps} MB/s (${figures.misalignedFraction} of payloads misaligned) vs unpadded ${figures.endToEndUnalignedMBps} MB/s (${figures.misalignedFractionUnpadded} misaligned): ${figures.ratioAlignedVsUnaligned}x`,
    );
    log(
      `  JetStream alone   ${figures.jetstreamOnlyMBps} MB/s (same bytes pre-encoded, consumer acks without decoding; publish ${figures.jetstreamOnlyPublishMBps} MB/s)`,
    );
    log(`  core NATS         ${figures.coreNatsMBps} MB/s (same bytes, no persistence, no acks: the broker hop alone)`);
    log(`  TCP via a pipe    ${figures.tcpRelayMBps} MB/s (through a process that only forwards bytes: what any broker costs at least; median of 3)`);
    log(`  raw TCP loopback  ${figures.tcpLoopbackMBps} MB/s (baseline, same bytes, same run; median of 3)`);
    log(
      `  ratio end-to-end / TCP = ${figures.ratioEndToEndVsTcp} (target >= 0.5); JetStream alone / TCP = ${figures.ratioJetstreamOnlyVsTcp}; ` +
        `core NATS / TCP = ${figures.ratioCoreNatsVsTcp}; pipe / TCP = ${figures.ratioTcpRelayVsTcp}; end-to-end / JetStream alone = ${figures.ratioEndToEndVsJetstreamOnly}`,
    );
    log(JSON.stringify(figures));
    return figures;
  } finally {
    await nc?.close();
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------

function parseArgs(argv: string[]): TransportBenchOptions {
  const o: TransportBenchOptions = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v <= 0) throw new Error(`${a} needs a positive integer`);
      return v;
    };
    if (a === "--batches") o.batches = num();
    else if (a === "--rows") o.rows = num();
    else if (a === "--tokens") o.tokens = num();
    else if (a === "--memory") o.storage = "memory";
    else if (a === "--quick") o.quick = true;
    else if (a === "--no-align") o.align = false;
    else throw new Error(`unknown argument ${a} (use --batches N --rows N --tokens N --memory --no-align --quick)`);
  }
  return o;
}

if (!isMainThread && (workerData as ProducerJob | undefined)?.role === "rollstream-transport-producer") {
  producerMain(workerData as ProducerJob).catch((e: Error) =>
    parentPort!.postMessage({ kind: "error", message: e.stack ?? e.message } satisfies ProducerReport),
  );
} else if (isMainThread && process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  runTransportBench(parseArgs(process.argv.slice(2))).catch((e: Error) => {
    console.error(e.stack ?? e.message);
    process.exitCode = 1;
  });
}
