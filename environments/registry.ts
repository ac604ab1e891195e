import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { register } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { errorMessage } from "./api/dataset.js";
import type { Environment, LoadEnvironment } from "./api/environment.js";
import semver from "semver";
import { distance } from "fastest-levenshtein";

/**
 * Finds environment modules by name and semver range and loads them. An environment module is a package
 * (package.json with name and version) whose entry exports `loadEnvironment(args)`. Places searched:
 *   project  <root>/environments/<dir>/package.json; the entry is the COMPILED sibling of this file,
 *            <dist>/environments/<dir>/index.js (this file runs from <dist>/environments/registry.js)
 *   path     folders listed in ROLLSTREAM_ENV_PATH (":"-separated) or opts.searchPaths: each is a module
 *            folder (package.json + compiled JS) or a folder of such modules
 *   npm      node_modules/<name> (in the project root and the working directory): main / exports
 * When several versions match, the highest wins; on a tie the project copy wins over a path over npm.
 */
export type EnvironmentSource = "project" | "path" | "npm";

export interface EnvironmentInfo {
  name: string;
  version: string;
  source: EnvironmentSource;
  /** Folder holding the module's package.json. */
  packageDir: string;
  /** The JS file imported to load it (may not exist yet for an unbuilt project module). */
  entry: string;
  description?: string;
}

export interface RegistryOptions {
  /** Project root holding environments/ and node_modules/. Default: the parent of this file's build folder. */
  projectRoot?: string;
  /** The build folder whose environments/<dir>/index.js are the project modules' entries. Default: this file's. */
  distDir?: string;
  /** Extra module folders (added to ROLLSTREAM_ENV_PATH). */
  searchPaths?: string[];
  /** node_modules folders to search. Default: <projectRoot>/node_modules and <cwd>/node_modules. */
  nodeModules?: string[];
}

const HERE = dirname(fileURLToPath(import.meta.url));

let hookRegistered = false;
/** Environment packages import "rollstream/environments"; it resolves to this rollstream (resolve-hook.ts). */
function registerRollstreamResolver(): void {
  if (hookRegistered) return;
  hookRegistered = true;
  register(new URL("./resolve-hook.js", import.meta.url), { data: { parentURL: pathToFileURL(join(locations({}).projectRoot, "package.json")).href } });
}
const ENV_KEYWORD = "rollstream-environment";

function locations(opts: RegistryOptions) {
  const distDir = resolve(opts.distDir ?? resolve(HERE, ".."));
  const projectRoot = resolve(opts.projectRoot ?? resolve(distDir, ".."));
  const envPath = (process.env["ROLLSTREAM_ENV_PATH"] ?? "").split(":").filter(Boolean);
  const searchPaths = [...(opts.searchPaths ?? []), ...envPath].map((p) => resolve(p));
  const nodeModules = unique((opts.nodeModules ?? [join(projectRoot, "node_modules"), join(process.cwd(), "node_modules")]).map((p) => resolve(p)));
  return { distDir, projectRoot, searchPaths, nodeModules };
}

/** "name@range" or "name" (range "*"); scoped npm names ("@org/env@^1") work too. */
export function parseEnvSpec(spec: string): { name: string; range: string } {
  const s = spec.trim();
  const at = s.lastIndexOf("@");
  const name = at > 0 ? s.slice(0, at) : s;
  const range = at > 0 ? s.slice(at + 1).trim() || "*" : "*";
  if (!/^(@[a-z0-9][\w.-]*\/)?[a-z0-9][\w.-]*$/i.test(name)) throw new Error(`invalid environment spec "${spec}": expected name or name@version-range`);
  if (semver.validRange(range) === null) throw new Error(`invalid environment spec "${spec}": invalid version range "${range}"`);
  return { name, range };
}

interface PackageJson {
  name?: unknown;
  version?: unknown;
  main?: unknown;
  exports?: unknown;
  keywords?: unknown;
  description?: unknown;
}

function readPackage(dir: string): PackageJson | null {
  const file = join(dir, "package.json");
  if (!existsSync(file)) return null;
  try {
    const v: unknown = JSON.parse(readFileSync(file, "utf8"));
    return v && typeof v === "object" ? (v as PackageJson) : null;
  } catch {
    return null;
  }
}

/** The ESM entry of an installed package: exports (import > node > default > require), then main, then index.js. */
function packageEntry(dir: string, pkg: PackageJson): string {
  const pick = (e: unknown): string | undefined => {
    if (typeof e === "string") return e;
    if (Array.isArray(e)) return e.map(pick).find(Boolean);
    if (e && typeof e === "object") {
      const o = e as Record<string, unknown>;
      if ("." in o) return pick(o["."]);
      for (const k of ["import", "node", "default", "require"]) if (k in o) return pick(o[k]);
    }
    return undefined;
  };
  const rel = pick(pkg.exports) ?? (typeof pkg.main === "string" ? pkg.main : undefined) ?? "index.js";
  return resolve(dir, rel);
}

function info(pkg: PackageJson, source: EnvironmentSource, packageDir: string, entry: string): EnvironmentInfo | null {
  if (typeof pkg.name !== "string" || typeof pkg.version !== "string") return null;
  return {
    name: pkg.name,
    version: pkg.version,
    source,
    packageDir,
    entry,
    ...(typeof pkg.description === "string" ? { description: pkg.description } : {}),
  };
}

function subdirs(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .map((n) => join(dir, n))
    .filter((p) => {
      try {
        return statSync(p).isDirectory();
      } catch {
        return false;
      }
    });
}

function projectModules(loc: ReturnType<typeof locations>): EnvironmentInfo[] {
  const out: EnvironmentInfo[] = [];
  for (const dir of subdirs(join(loc.projectRoot, "environments"))) {
    const pkg = readPackage(dir);
    const folder = dir.slice(dir.lastIndexOf("/") + 1);
    const i = pkg && info(pkg, "project", dir, join(loc.distDir, "environments", folder, "index.js"));
    if (i) out.push(i);
  }
  return out;
}

function pathModules(loc: ReturnType<typeof locations>): EnvironmentInfo[] {
  const out: EnvironmentInfo[] = [];
  for (const p of loc.searchPaths) {
    for (const dir of readPackage(p) ? [p] : subdirs(p)) {
      const pkg = readPackage(dir);
      const i = pkg && info(pkg, "path", dir, packageEntry(dir, pkg));
      if (i) out.push(i);
    }
  }
  return out;
}

function npmModule(loc: ReturnType<typeof locations>, name: string): EnvironmentInfo[] {
  const out: EnvironmentInfo[] = [];
  for (const nm of loc.nodeModules) {
    const dir = join(nm, name);
    const pkg = readPackage(dir);
    const i = pkg && pkg.name === name ? info(pkg, "npm", dir, packageEntry(dir, pkg)) : null;
    if (i) out.push(i);
  }
  return out;
}

function npmEnvironments(loc: ReturnType<typeof locations>): EnvironmentInfo[] {
  const out: EnvironmentInfo[] = [];
  for (const nm of loc.nodeModules) {
    for (const d of subdirs(nm)) {
      const dirs = d.slice(d.lastIndexOf("/") + 1).startsWith("@") ? subdirs(d) : [d];
      for (const dir of dirs) {
        const pkg = readPackage(dir);
        if (!pkg || !Array.isArray(pkg.keywords) || !pkg.keywords.includes(ENV_KEYWORD)) continue;
        const i = info(pkg, "npm", dir, packageEntry(dir, pkg));
        if (i) out.push(i);
      }
    }
  }
  return out;
}

const SOURCE_RANK: Record<EnvironmentSource, number> = { project: 0, path: 1, npm: 2 };

function sortInfos(list: EnvironmentInfo[]): EnvironmentInfo[] {
  return list.sort((a, b) => {
    if (a.name !== b.name) return a.name < b.name ? -1 : 1;
    const d = semver.valid(a.version) && semver.valid(b.version) ? semver.rcompare(a.version, b.version) : 0;
    return d !== 0 ? d : SOURCE_RANK[a.source] - SOURCE_RANK[b.source];
  });
}

/** Every environment module found, highest version first per name. */
export async function listEnvironments(opts: RegistryOptions = {}): Promise<EnvironmentInfo[]> {
  const loc = locations(opts);
  const seen = new Set<string>();
  const all = [...projectModules(loc), ...pathModules(loc), ...npmEnvironments(loc)].filter((i) => {
    const key = `${i.packageDir}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  return sortInfos(all);
}

/** Up to three names of `found` within a typo's distance of `name` (case ignored), closest first. */
function nearNames(name: string, found: EnvironmentInfo[]): string[] {
  const limit = Math.max(2, Math.floor(name.length / 3));
  const scored = unique(found.map((i) => i.name))
    .map((n) => ({ n, d: distance(name.toLowerCase(), n.toLowerCase()) }))
    .filter((x) => x.d <= limit)
    .sort((a, b) => a.d - b.d || (a.n < b.n ? -1 : 1));
  return scored.slice(0, 3).map((x) => x.n);
}

/** The module a spec resolves to (without loading it). */
export async function findEnvironment(spec: string, opts: RegistryOptions = {}): Promise<EnvironmentInfo> {
  const { name, range } = parseEnvSpec(spec);
  const loc = locations(opts);
  const candidates = sortInfos([...projectModules(loc), ...pathModules(loc), ...npmModule(loc, name)].filter((i) => i.name === name));
  if (candidates.length === 0) {
    const where = [join(loc.projectRoot, "environments"), ...loc.searchPaths, ...loc.nodeModules.map((nm) => join(nm, name))];
    const near = nearNames(name, [...projectModules(loc), ...pathModules(loc), ...npmEnvironments(loc)]);
    const hint = near.length ? `; did you mean ${near.map((n) => `"${n}"`).join(" or ")}?` : "";
    throw new Error(`environment "${name}" not found${hint} (searched ${where.join(", ")})`);
  }
  const best = semver.maxSatisfying(
    candidates.map((c) => c.version),
    range,
  );
  if (best === null) {
    const found = candidates.map((c) => `${c.name}@${c.version} (${c.source}, ${c.packageDir})`).join(", ");
    throw new Error(`environment "${name}": no version matches "${range}"; found ${found}`);
  }
  return candidates.find((c) => c.version === best)!;
}

/**
 * Loads the environment a spec ("name@range" or "name") resolves to, calling its loadEnvironment(args).
 * Every failure (not found, no matching version, unbuilt entry, import error, no loadEnvironment, load
 * throwing, a result that is not an Environment or names another version) throws an error naming
 * name@version.
 */
export async function resolveEnvironment(spec: string, args: Record<string, unknown> = {}, opts: RegistryOptions = {}): Promise<Environment> {
  const found = await findEnvironment(spec, opts);
  const id = `${found.name}@${found.version}`;
  if (!existsSync(found.entry)) {
    const hint = found.source === "project" ? " (is the project built? run npm run build)" : "";
    throw new Error(`environment ${id}: entry ${found.entry} does not exist${hint}`);
  }
  let mod: Record<string, unknown>;
  try {
    if (found.source !== "project") registerRollstreamResolver();
    mod = (await import(pathToFileURL(found.entry).href)) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`environment ${id}: importing ${found.entry} failed: ${errorMessage(err)}`);
  }
  const load = (mod["loadEnvironment"] ?? mod["default"]) as LoadEnvironment | undefined;
  if (typeof load !== "function") throw new Error(`environment ${id}: ${found.entry} does not export a loadEnvironment function`);
  let env: Environment;
  try {
    env = await load(args ?? {});
  } catch (err) {
    throw new Error(`environment ${id}: loadEnvironment(${JSON.stringify(args ?? {})}) threw: ${errorMessage(err)}`);
  }
  checkEnvironment(id, env);
  if (env.name !== found.name || env.version !== found.version) {
    throw new Error(`environment ${id}: loadEnvironment returned ${env.name}@${env.version}, which does not match its package.json`);
  }
  return env;
}

function checkEnvironment(id: string, env: unknown): asserts env is Environment {
  const e = env as Record<string, unknown> | null;
  const missing =
    !e || typeof e !== "object"
      ? ["(not an object)"]
      : [
          ...(["name", "version"] as const).filter((k) => typeof e[k] !== "string"),
          ...(["dataset", "rollout", "scoreGroup"] as const).filter((k) => typeof e[k] !== "function"),
        ];
  if (missing.length > 0) throw new Error(`environment ${id}: loadEnvironment did not return an Environment (missing ${missing.join(", ")})`);
}

function unique<T>(xs: T[]): T[] {
  return [...new Set(xs)];
}
