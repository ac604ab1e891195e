// The sandbox client as environments see it, with every call counted as a wait on the sandbox in the
// actor's health report: a reward actor whose rubric runs unit tests, or an inference actor whose tool
// calls run code, shows what share of its time the sandbox costs it.
import type { CodeSandbox, SandboxSession } from "../../environments/api/sandbox.js";
import type { Health } from "./heartbeat.js";

export function sandboxWithHealth(inner: CodeSandbox, health: Health): CodeSandbox {
  return {
    exec: (req) => health.wait("sandbox", () => inner.exec(req), { detail: `${req.language} exec` }),
    async openSession(opts) {
      const session = await inner.openSession(opts);
      const wrapped: SandboxSession = {
        // The id may be known only once the session has opened in the background.
        get id() {
          return session.id;
        },
        exec: (req) => health.wait("sandbox", () => session.exec(req), { detail: `session ${session.id}` }),
        close: () => session.close(),
      };
      return wrapped;
    },
  };
}
