// One OpenEnv WebSocket session (/ws), after meta-pytorch/OpenEnv@685de41 src/openenv/core/env_server/
// http_server.py (websocket_endpoint) and types.py (WSResetMessage, WSStepMessage, WSStateMessage,
// WSCloseMessage → WSObservationResponse, WSStateResponse, WSErrorResponse): each request is one JSON text frame
// {type, data}, answered in order by one {type: "observation" | "state" | "error", data}. An observation's data is
// serialize_observation's {observation, reward, done}. The plain HTTP /reset and /step build a fresh environment
// per call, so an episode lives on one WebSocket, opened per rollout.
import WebSocket from "ws";
import { z } from "zod";

/** The server went away mid-episode: the rollout may be run again. */
export class OpenEnvLostError extends Error {
  constructor(url: string, why: string) {
    super(`OpenEnv server ${url} went away: ${why}`);
    this.name = "OpenEnvLostError";
  }
}

const responseSchema = z.object({ type: z.string(), data: z.record(z.string(), z.unknown()).default({}) });
const observationSchema = z.object({
  observation: z.record(z.string(), z.unknown()).default({}),
  reward: z.union([z.number(), z.boolean()]).nullable().optional(),
  done: z.boolean().default(false),
});
export type StepResult = { observation: Record<string, unknown>; reward: number | null; done: boolean };

export class OpenEnvSession {
  private readonly queue: Array<{ ok: true; text: string } | { ok: false; err: Error }> = [];
  private waiter: (() => void) | null = null;

  private constructor(
    private readonly ws: WebSocket,
    readonly url: string,
  ) {
    ws.on("message", (data) => this.push({ ok: true, text: data.toString() }));
    ws.on("close", (code) => this.push({ ok: false, err: new OpenEnvLostError(url, `socket closed (${code})`) }));
    ws.on("error", (e) => this.push({ ok: false, err: new OpenEnvLostError(url, e.message) }));
  }

  static open(wsUrl: string, timeoutMs: number): Promise<OpenEnvSession> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(wsUrl, { handshakeTimeout: timeoutMs });
      ws.once("open", () => resolve(new OpenEnvSession(ws, wsUrl)));
      ws.once("error", (e) => reject(new OpenEnvLostError(wsUrl, e.message)));
    });
  }

  reset(data: Record<string, unknown>): Promise<StepResult> {
    return this.observation({ type: "reset", data });
  }

  step(action: Record<string, unknown>): Promise<StepResult> {
    return this.observation({ type: "step", data: action });
  }

  /** Ends the episode on the server ({type: "close"}) and the socket. */
  close(): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: "close" }));
    this.ws.close();
  }

  private async observation(msg: { type: string; data: Record<string, unknown> }): Promise<StepResult> {
    this.ws.send(JSON.stringify(msg));
    const reply = responseSchema.safeParse(JSON.parse(await this.next()));
    if (!reply.success) throw new Error(`OpenEnv ${msg.type} reply is not {type, data}: ${reply.error.issues[0]!.message}`);
    if (reply.data.type === "error") throw new Error(`OpenEnv ${msg.type} failed: ${String(reply.data.data["message"] ?? JSON.stringify(reply.data.data))}`);
    if (reply.data.type !== "observation") throw new Error(`OpenEnv ${msg.type} answered ${reply.data.type}, not observation`);
    const obs = observationSchema.safeParse(reply.data.data);
    if (!obs.success) throw new Error(`OpenEnv observation: ${obs.error.issues[0]!.path.join(".")}: ${obs.error.issues[0]!.message}`);
    const r = obs.data.reward;
    return { observation: obs.data.observation, reward: r === null || r === undefined ? null : Number(r), done: obs.data.done };
  }

  private push(item: { ok: true; text: string } | { ok: false; err: Error }): void {
    this.queue.push(item);
    this.waiter?.();
  }

  private async next(): Promise<string> {
    while (this.queue.length === 0) await new Promise<void>((r) => (this.waiter = r));
    this.waiter = null;
    const item = this.queue[0]!;
    // A close stays queued: every later call fails the same way.
    if (!item.ok) throw item.err;
    this.queue.shift();
    return item.text;
  }
}
