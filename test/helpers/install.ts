/**
 * The README's install from a clone, `npm install -g .`, into a temporary prefix, with no
 * registry: npm is pointed at a port nothing listens on, at an empty cache and at a HOME
 * without an .npmrc, so any fetch fails the install instead of reaching the network.
 */
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './spawn-relay.js';

const run = promisify(execFile);

/** This clone: what `npm install -g .` installs when run at its root. */
export const REPO = join(import.meta.dirname, '..', '..');

export interface Installed {
  prefix: string;
  /** `<prefix>/bin`, which holds `interlink-mcp` and `interlinked`; first on PATH. */
  bin: string;
  /** The registry npm was given: a 127.0.0.1 port with nothing listening. */
  registry: string;
  /** npm's cache for the install; it stays without content when nothing was fetched. */
  cache: string;
  npmOutput: string;
}

/** The README's install command (README.md, Install), which `installFromClone` runs the second half of. */
export const README_INSTALL = 'npm ci && npm install -g --ignore-scripts .';

/**
 * Installs this clone into `prefix` as `npm install -g --ignore-scripts .` does: a link to
 * the clone, whose node_modules (from `npm ci`) hold the runtime dependencies.
 * `--ignore-scripts` skips `prepare`, the build `npm ci` ran (here `npm test` did), which
 * would also rebuild dist/ while other test files run from it. `npmOutput` is what npm
 * printed on stderr: its warnings.
 */
export async function installFromClone(prefix: string): Promise<Installed> {
  const cache = join(prefix, '.npm-cache');
  await mkdir(cache, { recursive: true });
  const registry = `http://127.0.0.1:${await freePort()}/`;
  const flags = ['--global', '--prefix', prefix, '--ignore-scripts', '--no-audit', '--no-fund', '--no-update-notifier'];
  const offline = ['--registry', registry, '--cache', cache, '--fetch-retries', '0'];
  const { stderr } = await run('npm', ['install', ...flags, ...offline, REPO], {
    cwd: prefix,
    env: { PATH: process.env.PATH ?? '', HOME: prefix },
    timeout: 120_000,
  });
  return { prefix, bin: join(prefix, 'bin'), registry, cache, npmOutput: stderr };
}
