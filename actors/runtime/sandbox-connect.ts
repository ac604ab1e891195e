// Environments that run code get the sandbox service through this client; the actor never talks to
// the sandbox actor directly, only over NATS (rs.sandbox.*).
import type { ActorContext } from "./actor.js";
import type { CodeSandbox } from "../../environments/api/sandbox.js";
import { NatsSandboxClient } from "../../streams/sandbox-client.js";

export function connectSandbox(ctx: Pick<ActorContext, "nc">): CodeSandbox {
  return new NatsSandboxClient(ctx.nc);
}
