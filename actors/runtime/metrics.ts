// Prometheus metrics for one actor: a registry with the process defaults, counters/gauges the actor
// declares, and an optional /metrics HTTP endpoint.
import { createServer, type Server } from "node:http";
import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";

export class ActorMetrics {
  readonly registry = new Registry();
  private server: Server | null = null;
  private counters = new Map<string, Counter>();
  private gauges = new Map<string, Gauge>();

  constructor(
    readonly actor: string,
    run: string,
  ) {
    this.registry.setDefaultLabels({ actor, run });
    collectDefaultMetrics({ register: this.registry, prefix: "rollstream_" });
  }

  counter(name: string, help: string, labelNames: string[] = []): Counter {
    let c = this.counters.get(name);
    if (!c) {
      c = new Counter({ name: `rollstream_${name}`, help, labelNames, registers: [this.registry] });
      this.counters.set(name, c);
    }
    return c;
  }

  gauge(name: string, help: string, labelNames: string[] = []): Gauge {
    let g = this.gauges.get(name);
    if (!g) {
      g = new Gauge({ name: `rollstream_${name}`, help, labelNames, registers: [this.registry] });
      this.gauges.set(name, g);
    }
    return g;
  }

  async serve(port: number): Promise<number> {
    this.server = createServer(async (req, res) => {
      if (req.url !== "/metrics") {
        res.writeHead(404).end("try /metrics\n");
        return;
      }
      res.writeHead(200, { "Content-Type": this.registry.contentType });
      res.end(await this.registry.metrics());
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", reject);
      this.server!.listen(port, "0.0.0.0", () => resolve());
    });
    const addr = this.server.address();
    return typeof addr === "object" && addr ? addr.port : port;
  }

  async close(): Promise<void> {
    if (this.server) await new Promise<void>((r) => this.server!.close(() => r()));
    this.server = null;
  }
}
