// `rollstream inspect`: the run's streams and consumers, its state KV, and the last N messages of any
// subject decoded (Arrow as a table, msgpack as JSON) with their headers — a stand-in for the `nats`
// CLI that knows our payloads.
import type { Command } from "commander";
import { jetstreamManager, type JetStreamManager, type StoredMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { decode } from "@msgpack/msgpack";
import { Kvm } from "@nats-io/kv";
import { join } from "node:path";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { natsForRun } from "../run-nats.js";
import { runMissing } from "../run-exists.js";
import { loadRunConfig } from "../../actors/runtime/config.js";
import { blobOf, ContentType, decodeRolloutBatch, Hdr, headerRecord, openWire, readPayload, runNames, type RunNames } from "../../streams/index.js";

interface InspectOptions {
  run?: string;
  config?: string;
  subject?: string;
  last: string;
  nats?: string;
  json?: boolean;
  rows: string;
  outDir?: string;
}

export function registerInspectCommand(program: Command): void {
  program
    .command("inspect")
    .description("show a run's streams, consumers and state, or decode the last messages of a subject")
    .option("--run <run>", "run name")
    .option("-c, --config <file>", "take the run name and NATS URL from a run config")
    .option("-s, --subject <subject>", "decode messages on this subject (e.g. rs.<run>.rollouts.scored, rs.<run>.dlq)")
    .option("-n, --last <n>", "how many messages", "5")
    .option("--rows <n>", "rows shown per Arrow batch", "8")
    .option("--json", "print JSON instead of tables")
    .option("--nats <url>", "NATS server (default: NATS_URL; else the run's stored streams under <out-dir>/<run>/nats)")
    .option("--out-dir <dir>", "where run folders live", "runs")
    .action(async (opts: InspectOptions) => {
      process.exitCode = await inspect(opts);
    });
}

async function inspect(opts: InspectOptions): Promise<number> {
  const where = runOf(opts);
  if (!where) {
    process.stderr.write("inspect needs --run or --config\n");
    return 2;
  }
  const names = runNames(where.run);
  const served = await natsForRun(join(where.outDir, where.run), where.configUrl, opts.nats);
  const nc = await connectNats(served.url, "rollstream-inspect");
  try {
    // A typo of the run name must not print the empty streams of whatever server answered.
    const missing = await runMissing(nc, where.run, served.url);
    if (missing) {
      process.stderr.write(`inspect: ${missing}\n`);
      return 2;
    }
    const jsm = await jetstreamManager(nc);
    if (opts.subject) return await printLastMessages(nc, jsm, opts.subject, opts);
    await printStreams(jsm, names);
    await printState(nc, names);
    return 0;
  } finally {
    await nc.close();
    await served.stop();
  }
}

/** The run's name, and where its config says its server and folder are (--config), or null when neither flag names it. */
function runOf(opts: InspectOptions): { run: string; configUrl?: string; outDir: string } | null {
  let run = opts.run;
  let configUrl: string | undefined;
  let outDir = opts.outDir ?? "runs";
  if (opts.config) {
    const c = loadRunConfig(opts.config);
    run ??= c.run;
    configUrl = c.nats.url;
    outDir = c.outDir;
  }
  return run ? { run, configUrl, outDir } : null;
}

/** Each of the run's streams: its size and sequence range, messages per subject, and its consumers' positions. */
async function printStreams(jsm: JetStreamManager, names: RunNames): Promise<void> {
  for (const s of Object.values(names.streams)) {
    const info = await jsm.streams.info(s, { subjects_filter: ">" }).catch(() => null);
    if (!info) {
      console.log(`stream ${s}: missing`);
      continue;
    }
    console.log(
      `stream ${s}: ${info.state.messages} msgs, ${(info.state.bytes / 1e6).toFixed(2)} MB, seq ${info.state.first_seq}..${info.state.last_seq}, retention ${info.config.retention}`,
    );
    for (const [subj, n] of Object.entries(info.state.subjects ?? {})) console.log(`  ${subj}: ${n}`);
    for await (const ci of jsm.consumers.list(s)) {
      console.log(
        `  consumer ${ci.name}: pending ${ci.num_pending}, ack pending ${ci.num_ack_pending}, redelivered ${ci.num_redelivered}, delivered seq ${ci.delivered.stream_seq}`,
      );
    }
  }
}

/** Every key of the run's state bucket with its value (long ones cut); nothing when the bucket is missing. */
async function printState(nc: NatsConnection, names: RunNames): Promise<void> {
  const kv = await new Kvm(nc).open(names.kvBucket).catch(() => null);
  if (!kv) return;
  console.log(`kv ${names.kvBucket}:`);
  for await (const k of await kv.keys()) {
    const e = await kv.get(k);
    const text = e ? new TextDecoder().decode(e.value) : "";
    console.log(`  ${k} = ${text.length > 200 ? text.slice(0, 200) + "…" : text}`);
  }
}

/** The last --last messages of `subject`, oldest first, decoded; exit code 1 when no stream holds the subject. */
async function printLastMessages(nc: NatsConnection, jsm: JetStreamManager, subject: string, opts: InspectOptions): Promise<number> {
  const stream = await jsm.streams.find(subject).catch(() => null);
  if (!stream) {
    process.stderr.write(`no stream holds subject ${subject}\n`);
    return 1;
  }
  const last = Math.max(1, Number(opts.last));
  const msgs: StoredMsg[] = [];
  const lastMsg = await jsm.streams.getMessage(stream, { last_by_subj: subject }).catch(() => null);
  if (!lastMsg) {
    console.log(`no messages on ${subject}`);
    return 0;
  }
  msgs.push(lastMsg);
  let seq = lastMsg.seq - 1;
  // Walk backwards through the stream (it may interleave other subjects); bounded so a huge
  // stream with a rare subject cannot keep us here forever.
  let scanned = 0;
  while (msgs.length < last && seq >= 1 && scanned++ < 20_000) {
    const m = await jsm.streams.getMessage(stream, { seq }).catch(() => null);
    if (m && m.subject === subject) msgs.push(m);
    seq--;
  }
  for (const m of msgs.reverse()) await printMessage(nc, m, opts);
  return 0;
}

/** The payload, fetched from the run's blob bucket when the message is a pointer (streams/large-payload.ts). */
async function payloadOf(nc: NatsConnection, m: StoredMsg): Promise<Uint8Array> {
  const blob = blobOf({ headers: m.header });
  if (blob === undefined) return m.data;
  const wire = openWire(nc, m.header?.get(Hdr.run) ?? "");
  console.log(`  (payload in blob ${blob} of bucket ${wire.names.blobBucket})`);
  return readPayload({ data: m.data, headers: m.header }, wire.blobs);
}

/** "role: text" of a transcript's last message on one line, cut to `max` characters ("" when empty). */
function lastMessage(messages: readonly { role: string; content: string; name?: string }[], max: number): string {
  const m = messages[messages.length - 1];
  if (!m) return "";
  // Only a bounded prefix of a long message is looked at; code points, so an emoji is never cut in half.
  const chars = [
    ...`${m.role}${m.name ? `(${m.name})` : ""}: ${m.content
      .slice(0, 4 * max)
      .replace(/\s+/g, " ")
      .trim()}`,
  ];
  return chars.length > max ? `${chars.slice(0, max - 1).join("")}…` : chars.join("");
}

async function printMessage(nc: NatsConnection, m: StoredMsg, opts: InspectOptions): Promise<void> {
  const headers = headerRecord(m.header);
  console.log(`--- ${m.subject} seq ${m.seq} at ${m.time.toISOString()} (${m.data.length} bytes)`);
  for (const [k, v] of Object.entries(headers)) console.log(`  ${k}: ${v}`);
  const ct = headers[Hdr.contentType];
  try {
    const data = await payloadOf(nc, m);
    if (ct === ContentType.arrow) {
      const { meta, rows } = decodeRolloutBatch(data);
      console.log(`  arrow batch: ${rows.length} rows, meta ${JSON.stringify(meta)}`);
      const shown = rows.slice(0, Number(opts.rows)).map((r) => ({
        task: r.taskId,
        env: r.env,
        prompt: r.promptIds.length,
        completion: r.completionIds.length,
        trained: r.completionMask.reduce((s, x) => s + x, 0),
        reward: +r.reward.toFixed(4),
        advantage: +r.advantage.toFixed(4),
        version: `${r.policyVersionMin}..${r.policyVersionMax}`,
        stop: r.stopReason,
        step: r.step,
        metrics: Object.entries(r.metrics)
          .map(([k, v]) => `${k}=${+v.toFixed(4)}`)
          .join(", "),
        messages: r.messages.length,
        last: lastMessage(r.messages, opts.json ? 200 : 40),
        errors: r.errors.length,
      }));
      if (opts.json) console.log(JSON.stringify(shown, null, 2));
      else console.table(shown);
    } else {
      const value = decode(data);
      console.log(JSON.stringify(value, (_k, v) => (v instanceof Uint8Array ? `<${v.length} bytes>` : v), opts.json ? 2 : undefined).slice(0, 4000));
    }
  } catch (e) {
    console.log(`  (payload not decodable: ${(e as Error).message})`);
  }
}
