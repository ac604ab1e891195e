// Test environments written as package folders for ROLLSTREAM_ENV_PATH: `writeEnvPackage(dir, name, source)`
// puts <dir>/envs/<name>/{package.json, index.js} (version 1.0.0) and returns <dir>/envs. Their index.js imports
// the environment API from this build by URL (`envApiUrl`).
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const envApiUrl = pathToFileURL(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "environments", "api", "index.js")).href;

export function writeEnvPackage(dir: string, name: string, source: string): string {
  const folder = join(dir, "envs", name);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, "package.json"), JSON.stringify({ name, version: "1.0.0", type: "module", main: "index.js" }));
  writeFileSync(join(folder, "index.js"), source);
  return join(dir, "envs");
}
