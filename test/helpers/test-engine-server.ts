// One test inference server on a loopback port that a test can kill (every connection cut, as when the
// process dies) and restart on the same port, as a restarted server would come back.
import type { FastifyInstance } from "fastify";
import { EngineDouble, scriptedSource, type TokenSource } from "./engine-double.js";
import { type SglangServerOptions, sglangApp } from "./sglang-test-server.js";
import { type VllmServerOptions, vllmApp } from "./vllm-test-server.js";

export class TestEngineServer {
  private app: FastifyInstance | null = null;
  port = 0;

  private constructor(
    readonly engine: EngineDouble,
    private readonly build: () => FastifyInstance,
  ) {}

  static async sglang(opts: SglangServerOptions & { source?: TokenSource } = {}): Promise<TestEngineServer> {
    const engine = new EngineDouble(opts.source ?? scriptedSource());
    const s = new TestEngineServer(engine, () => sglangApp(engine, opts));
    await s.restart();
    return s;
  }

  static async vllm(opts: VllmServerOptions & { source?: TokenSource } = {}): Promise<TestEngineServer> {
    const engine = new EngineDouble(opts.source ?? scriptedSource());
    const s = new TestEngineServer(engine, () => vllmApp(engine, opts));
    await s.restart();
    return s;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get alive(): boolean {
    return this.app !== null;
  }

  /** Cuts every connection at once (requests in flight get a reset, not an answer), then stops listening. */
  async kill(): Promise<void> {
    const app = this.app;
    if (!app) return;
    this.app = null;
    app.server.closeAllConnections();
    this.engine.abortAll();
    await app.close();
  }

  async restart(): Promise<void> {
    if (this.app) return;
    const app = this.build();
    await app.listen({ host: "127.0.0.1", port: this.port });
    this.port = (app.server.address() as { port: number }).port;
    this.app = app;
  }
}
