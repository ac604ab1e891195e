// Whether a run exists on the server a command asked: a typo of a run name (`--run demoo`) must not quietly
// show an empty run of whatever nats-server answers. The dashboard asks before it starts; `inspect` and
// `doctor` can ask the same.
import type { NatsConnection } from "@nats-io/transport-node";
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from "@nats-io/jetstream";
import { runNames } from "../streams/index.js";

/**
 * Null when `run` has streams on the server `nc` is connected to; else one line naming the run, the server
 * asked and the runs that server does have (a typo of a run name must not quietly show an empty run).
 */
export async function runMissing(nc: NatsConnection, run: string, url: string): Promise<string | null> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(runNames(run).streams.events);
    return null;
  } catch (e) {
    if (!(e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound)) return null; // not a verdict on the run: the reads say what is wrong
  }
  // A run's KV bucket keeps its name as typed (its stream names are upper-cased).
  const runs: string[] = [];
  for await (const name of jsm.streams.names()) {
    const m = /^KV_rs-(.+)-state$/.exec(name);
    if (m) runs.push(m[1]!);
  }
  const there = runs.length ? `runs there: ${runs.sort().join(", ")}` : "it has no runs";
  return `run "${run}" does not exist on ${url} (${there})`;
}
