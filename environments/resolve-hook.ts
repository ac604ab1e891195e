// A module resolve hook (node:module register) for environment packages loaded by the registry: their
// `import ... from "rollstream/environments"` resolves to the rollstream that is running, wherever the package
// sits (a folder on ROLLSTREAM_ENV_PATH, a tarball installed into a project, a registry install) and whether
// or not it has a copy of rollstream of its own. One copy of the API per process: the Rubric an environment
// builds is the class the runtime knows, and nothing needs rebuilding.
//
// It resolves such a specifier as rollstream resolves its own name (a package may import itself through its
// `exports`), by resolving it from rollstream's package.json.
interface ResolveContext {
  parentURL?: string;
  conditions: string[];
}
type NextResolve = (specifier: string, context?: Partial<ResolveContext>) => Promise<{ url: string }>;

let selfParent = "";

export function initialize(data: { parentURL: string }): void {
  selfParent = data.parentURL;
}

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string }> {
  if (selfParent && (specifier === "rollstream" || specifier.startsWith("rollstream/"))) {
    return next(specifier, { ...context, parentURL: selfParent });
  }
  return next(specifier, context);
}
