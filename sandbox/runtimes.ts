// Finds the interpreters programs run with, and what of the host must be visible (read-only) for
// them to work inside a sandbox: /usr always; an interpreter installed elsewhere (pyenv under /root,
// nvm, a tarball in /opt) also needs its install prefix, and nothing else of that tree.
import { execFileSync } from "node:child_process";
import { accessSync, constants, existsSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import type { SandboxSettings } from "./settings.js";

export interface ResolvedRuntime {
  /** Path of the interpreter as run inside the sandbox (same path as on the host). */
  binary: string;
  /** Host folders to bind read-only at the same path, beyond the system ones (e.g. a pyenv prefix). */
  extraBinds: string[];
  version: string;
}

export interface ResolvedRuntimes {
  python: ResolvedRuntime;
  node: ResolvedRuntime | null;
  bash: string | null;
}

const SYSTEM_PREFIXES = ["/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/"];

function isExecutable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (!dir) continue;
    const p = join(dir, name);
    if (existsSync(p) && isExecutable(p)) return p;
  }
  return null;
}

function underSystem(p: string): boolean {
  return SYSTEM_PREFIXES.some((s) => p.startsWith(s));
}

function resolvePython(setting: string): ResolvedRuntime {
  const candidate = setting !== "auto" ? setting : existsSync("/usr/bin/python3") ? "/usr/bin/python3" : onPath("python3");
  if (!candidate) throw new Error("sandbox: no python3 found (set sandbox.runtimes.python.binary); python runs the in-sandbox supervisor, so it is required");
  let out: string;
  try {
    // Asking the interpreter itself sees through wrappers such as pyenv shims (shell scripts).
    out = execFileSync(candidate, ["-I", "-c", "import sys; print(sys.executable); print(sys.base_prefix); print(sys.version.split()[0])"], {
      encoding: "utf8",
      timeout: 15_000,
    });
  } catch (e) {
    throw new Error(`sandbox: python interpreter ${candidate} does not run: ${(e as Error).message}`);
  }
  const [exe, prefix, version] = out.trim().split("\n");
  if (!exe || !prefix || !version) throw new Error(`sandbox: could not query python interpreter ${candidate}`);
  const [major = 0, minor = 0] = version.split(".").map(Number);
  if (major < 3 || (major === 3 && minor < 8)) throw new Error(`sandbox: python ${version} at ${exe} is too old (3.8 or newer needed)`);
  return { binary: exe, extraBinds: underSystem(realpathSync(exe)) ? [] : [realpathSync(prefix)], version };
}

function resolveNode(setting: string): ResolvedRuntime {
  const candidate = setting !== "auto" ? setting : (["/usr/bin/node", "/usr/local/bin/node"].find((p) => existsSync(p) && isExecutable(p)) ?? process.execPath);
  let version: string;
  try {
    version = execFileSync(candidate, ["--version"], { encoding: "utf8", timeout: 15_000, env: {} }).trim().replace(/^v/, "");
  } catch (e) {
    throw new Error(`sandbox: node binary ${candidate} does not run: ${(e as Error).message}`);
  }
  const real = realpathSync(candidate);
  // A node outside /usr lives in <prefix>/bin/node with its own lib/ beside it.
  return { binary: real, extraBinds: underSystem(real) ? [] : [dirname(dirname(real))], version };
}

export function resolveRuntimes(settings: SandboxSettings): ResolvedRuntimes {
  const python = resolvePython(settings.runtimes.python.binary);
  let node: ResolvedRuntime | null = null;
  if (settings.runtimes.node.enabled) node = resolveNode(settings.runtimes.node.binary);
  const bash = existsSync("/bin/bash") ? "/bin/bash" : null;
  return { python, node, bash };
}
