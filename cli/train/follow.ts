// `train`'s watch over a running run: it polls the run's state every second until RL is done, Ctrl-C or an
// actor's failure, and says meanwhile what needs a person's eye — each held-out evaluation, the actors doctor
// would call silent or stuck, and the NATS server going away and coming back. An outage never fails the run:
// the actors reconnect (or are restarted and wait for the server), and this loop waits with them.
import { setTimeout as sleep } from "node:timers/promises";
import type { NatsConnection } from "@nats-io/transport-node";
import { withDeadline } from "../../streams/index.js";
import { healthAlerts } from "../health/verdicts.js";
import type { EvalFeed } from "./evals.js";
import type { RunStateRepair } from "./run-state.js";
import { OutageReport } from "./outage.js";
import type { TrainSession } from "./session.js";

/** An outage report fed by the connection itself as well as by the loop's failed polls. */
export function watchOutages(s: TrainSession): OutageReport {
  const outage = new OutageReport((line) => s.say(line));
  // The connection says when the server went and came back: a short outage can fall between two polls
  // of the loop below (its requests wait out a reconnect), and would go unreported.
  void (async () => {
    for await (const status of s.nc.status()) {
      if (status.type === "disconnect") outage.down(new Error(`disconnected from ${status.server}`));
      else if (status.type === "reconnect") outage.up();
    }
  })().catch(() => undefined);
  return outage;
}

/**
 * Returns once the learner and the policy reached rl.steps, or on Ctrl-C or an actor's failure (see the session).
 * A bad value in the run's state (not JSON, or a policy.version beyond rl.steps) is no outage: it is said as what it
 * is and repaired from the run's records (run-state.ts), and the watch goes on.
 */
export async function waitForRl(s: TrainSession, outage: OutageReport, evals: EvalFeed | null, runState?: RunStateRepair): Promise<void> {
  const health = new HealthWatch(s.nc, s.config.run, (line) => s.say(line));
  const steps = s.config.rl.steps;
  while (!s.interrupted && !s.fatal) {
    let version: number, step: number;
    try {
      version = await s.state.policyVersion();
      step = await s.state.learnerStep();
      if (evals) await evals.show();
      await health.check();
      outage.up();
    } catch (e) {
      // A bad KV value is the run's state, not the server: repaired (when train can), never called an outage.
      if (await runState?.handle(e).catch(() => false)) {
        await sleep(1000);
        continue;
      }
      // The server is away (restarting, or being restarted by us): wait for it, never give up the run.
      outage.down(e);
      await sleep(1000);
      continue;
    }
    // Beyond rl.steps is no version of this run's learner: read again once repaired.
    if (version > steps && (await runState?.duringRun().catch(() => false))) continue;
    if (step >= steps && version >= steps) break;
    await sleep(1000);
  }
}

/** Silent or stuck actors, named as soon as doctor would name them; said once per actor and verdict, and
 *  again when the actor is healthy. Heartbeats are read at most every 3 s, however often the loop polls. */
class HealthWatch {
  private readonly alerted = new Map<string, string>();
  private lastCheck = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly run: string,
    private readonly say: (line: string) => void,
  ) {}

  async check(): Promise<void> {
    if (Date.now() - this.lastCheck < 3_000) return;
    this.lastCheck = Date.now();
    const alerts = await withDeadline(healthAlerts(this.nc, this.run), 5_000, "reading heartbeats").catch(() => []);
    const now = new Set<string>();
    for (const line of alerts) {
      const [who, verdict] = line.split(" ", 2);
      const key = `${who}`;
      now.add(key);
      if (this.alerted.get(key) !== verdict) this.say(`health: ${line}`);
      this.alerted.set(key, verdict ?? "");
    }
    for (const key of [...this.alerted.keys()])
      if (!now.has(key)) {
        this.alerted.delete(key);
        this.say(`health: ${key} is healthy again`);
      }
  }
}
