/**
 * Imports a package the benchmarks use only when a person installed it (better-sqlite3,
 * prom-client): its module, or undefined when it is not installed. The name is held in a
 * variable, so the compiler neither resolves the module nor needs its types.
 */
export async function importOptional(name: string): Promise<unknown> {
  try {
    return await import(name);
  } catch (err) {
    if (err instanceof Error && 'code' in err && err.code === 'ERR_MODULE_NOT_FOUND') return undefined;
    throw err;
  }
}
