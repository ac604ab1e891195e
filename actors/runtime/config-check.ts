// Everything wrong with a run config, in one pass: the schema (unknown keys with "did you mean",
// cross-field rules) AND every environment entry resolved and its args validated by the environment's
// own schema, even when the schema check failed elsewhere. `config check` prints the list; `train`
// runs the same check before it starts anything.
import { parse as parseYaml } from "yaml";
import { isRemoteEnvironmentId } from "../../environments/remote/index.js";
import { resolveEnvironment } from "../../environments/registry.js";
import { ConfigError, crossFieldProblems, describeIssues, MissingConfigError, parseRunConfig, readConfigText, type RunConfig } from "./config.js";
import { envKeyOf } from "./environments.js";

export interface ConfigCheck {
  config?: RunConfig;
  problems: string[];
  /** Set when the file could not be read at all ("no config file at <path>"): the whole report is this line. */
  unread?: string;
}

/** What `config check` and `train` print for a failed check: the one line of an unread file, else every problem. */
export function describeCheck(path: string, check: ConfigCheck): string {
  return check.unread ?? `invalid config ${path}:\n${check.problems.map((p) => `  - ${p}`).join("\n")}`;
}

export async function checkConfigFile(path: string): Promise<ConfigCheck> {
  let raw: unknown;
  try {
    raw = parseYaml(readConfigText(path));
  } catch (e) {
    if (e instanceof MissingConfigError) return { problems: e.problems, unread: e.message };
    if (e instanceof ConfigError) return { problems: e.problems };
    return { problems: [`${(e as Error).message.split("\n")[0]}`] };
  }
  const problems: string[] = [];
  let config: RunConfig | undefined;
  try {
    config = parseRunConfig(raw, path);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    problems.push(...e.problems);
    // zod skips the schema's cross-field rules when any field has a type error; run them on the raw object
    // so they show up in this pass too. Those the schema did report come out identical and are not repeated.
    for (const p of describeIssues(crossFieldProblems(raw))) if (!problems.includes(p)) problems.push(p);
  }
  const entries = (raw as { environments?: unknown } | null)?.environments;
  if (Array.isArray(entries)) {
    const keys = new Map<string, number>();
    for (const [i, entry] of entries.entries()) {
      const e = entry as { id?: unknown; key?: unknown; args?: unknown } | null;
      if (!e || typeof e.id !== "string") continue; // the schema already reported it
      const key = envKeyOf({ id: e.id, key: typeof e.key === "string" ? e.key : undefined });
      if (keys.has(key))
        problems.push(`environments.${i}: shares the key ${JSON.stringify(key)} with environments.${keys.get(key)}; give one a distinct \`key\``);
      keys.set(key, i);
      // A remote environment's server need not be up to check a config: its fields are the schema's.
      if (isRemoteEnvironmentId(e.id)) continue;
      try {
        await resolveEnvironment(e.id, (e.args ?? {}) as Record<string, unknown>);
      } catch (err) {
        problems.push(`environments.${i} (${e.id}): ${(err as Error).message.replace(/\s*\n\s*/g, "; ")}`);
      }
    }
  }
  return problems.length ? { problems } : { config, problems };
}
