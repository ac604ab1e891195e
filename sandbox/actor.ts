// `rollstream actor sandbox`: runs the sandbox service until the process is told to stop, and
// mirrors the executor's counters into Prometheus gauges.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../actors/runtime/tokens.js";
import { ActorExit, ExitCodes, type Actor, type ActorContext } from "../actors/runtime/actor.js";
import { parseSandboxSettings } from "./settings.js";
import { startSandboxService } from "./service.js";

const METRICS_EVERY_MS = 5_000;

@injectable()
export class SandboxActor implements Actor {
  constructor(@inject(Tokens.Context) private readonly ctx: ActorContext) {}

  async run(): Promise<void> {
    const { ctx } = this;
    let settings;
    try {
      settings = parseSandboxSettings(ctx.config.sandbox);
    } catch (e) {
      throw new ActorExit((e as Error).message, ExitCodes.config);
    }
    const service = await startSandboxService({ nc: ctx.nc, log: ctx.log, settings });
    const gauges = new Map<string, ReturnType<typeof ctx.metrics.gauge>>();
    const publish = () => {
      for (const [k, v] of Object.entries(service.stats())) {
        let g = gauges.get(k);
        if (!g) {
          g = ctx.metrics.gauge(`sandbox_${k}`, `sandbox executor: ${k.replace(/_/g, " ")}`);
          gauges.set(k, g);
        }
        g.set(v);
      }
    };
    publish();
    ctx.health.waiting("requests", { idle: true }); // a service: idle between requests, as far as the heartbeat goes
    const timer = setInterval(publish, METRICS_EVERY_MS);
    try {
      await new Promise<void>((resolve) => {
        if (ctx.signal.aborted) resolve();
        else ctx.signal.addEventListener("abort", () => resolve(), { once: true });
      });
    } finally {
      clearInterval(timer);
      await service.stop();
    }
  }
}
