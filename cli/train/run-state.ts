// `train` and the run's state KV (cli/health/run-state.ts). Resuming a run whose keys are damaged — written by hand,
// not JSON, beyond what the run can have trained — train rebuilds them from the run's streams and checkpoints and
// says so in one line, rather than failing on them; a key no record can rebuild is named with what to do, and train
// stops before starting anything. While the run goes on, a damaged key met by train's watch is said as what it is
// (a fault of the run's state, not a NATS outage) and repaired the same way; the owner's next write wins over it.
import { openWire, RunChannels, StateValueError } from "../../streams/index.js";
import { describeFinding, examineRunState, repairOf, repairRunState, type StateCheckInput } from "../health/run-state.js";
import type { TrainSession } from "./session.js";

export class RunStateRepair {
  /** Bad values already handled during the run ("key@revision"): each is said and repaired once. */
  private readonly handled = new Set<string>();

  constructor(private readonly s: TrainSession) {}

  /** Before any actor starts: true when the state is sound or was repaired, false (said) when a key needs a person. */
  async atStart(): Promise<boolean> {
    const findings = await examineRunState(this.input(0));
    if (findings.length === 0) return true;
    const r = await repairRunState(this.s.state, findings);
    if (r.repaired.length) this.s.say(`run state repaired: ${r.repaired.join("; ")}`);
    for (const f of r.manual) this.s.say(describeFinding(f));
    if (r.manual.length)
      this.s.say(`run ${this.s.config.run} not resumed: put the key(s) above right first (rollstream doctor --run ${this.s.config.run} checks them)`);
    return r.manual.length === 0;
  }

  /** Whether `e` is about the run's state (not the server): then it is handled here and train goes on. */
  async handle(e: unknown): Promise<boolean> {
    if (!(e instanceof StateValueError)) return false;
    await this.duringRun();
    return true;
  }

  /**
   * A damaged key met while the actors run (a bad value read, or policy.version beyond rl.steps): said and repaired,
   * once each. True when there was one not met before.
   */
  async duringRun(): Promise<boolean> {
    const fresh = (await examineRunState(this.input(1))).filter((f) => !this.handled.has(`${f.key}@${f.revision}`));
    if (fresh.length === 0) return false;
    for (const f of fresh) this.handled.add(`${f.key}@${f.revision}`);
    const r = await repairRunState(this.s.state, fresh);
    for (const f of fresh) this.s.say(r.done.includes(f) ? `${f.problem}; ${repairOf(f.fix)}` : describeFinding(f));
    return true;
  }

  private input(alive: number): StateCheckInput {
    const { config, run } = this.s;
    const environments = async () => [...run.envs.values()].map((e) => ({ key: e.key, id: e.id, weight: e.weight }));
    return {
      channels: new RunChannels(openWire(this.s.nc, config.run)),
      state: this.s.state,
      config: { rlSteps: config.rl.steps, environments },
      runDir: run.runDir,
      alive,
    };
  }
}
