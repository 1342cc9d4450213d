/**
 * Throwaway PostgreSQL clusters for tests: a primary and, if asked, a streaming standby
 * (synchronous unless told otherwise), in a fresh temp dir, listening on 127.0.0.1 only,
 * trust auth for the superuser `postgres`, fsync and synchronous_commit on. Run as root,
 * the server binaries run as the `postgres` system user (initdb and postgres refuse root).
 * Each postmaster is a child of the test process, so it is reaped as it exits. Every wait
 * polls with a deadline and fails naming what it waited for, with the tail of the server
 * log. Test files call `afterEach(closeAllPgClusters)`, so a failed test leaves
 * no postmaster running.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, realpathSync } from 'node:fs';
import { appendFile, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import postgres from 'postgres';

const BINARIES = ['initdb', 'pg_ctl', 'postgres', 'pg_basebackup'] as const;
const DEBIAN_ROOT = '/usr/lib/postgresql';
/** The system user the server runs as when the tests run as root; also the superuser's name. */
const SERVER_USER = 'postgres';
/** A healthy start, promotion or stop takes about a second; this leaves room for a loaded machine. */
const WAIT_MS = 20_000;
const POLL_MS = 50;
const PORT_TRIES = 3;
const LOG_TAIL_LINES = 20;
const DATABASE_NAME = /^[a-z_][a-z0-9_]*$/;

export interface PgNode {
  readonly name: string;
  readonly port: number;
  readonly dataDir: string;
  /** postgres://postgres@127.0.0.1:<port>/<db> (db default 'postgres') */
  url(db?: string): string;
  /** pid of the postmaster, read from postmaster.pid */
  pid(): Promise<number>;
  /** Starts the postmaster (as a child of this process, see Node); resolves once the node accepts connections */
  start(): Promise<void>;
  /** pg_ctl stop -m fast */
  stop(): Promise<void>;
  /** SIGKILL the postmaster; resolves once it and its children are gone and the port refuses connections */
  kill9(): Promise<void>;
  /** pg_ctl promote; resolves once the node accepts writes */
  promote(): Promise<void>;
  /** Whether the node accepts writes now (false when it does not accept connections at all) */
  isWritable(): Promise<boolean>;
}

export interface PgCluster {
  readonly primary: PgNode;
  readonly standby: PgNode | undefined;
  /** postgres://postgres@127.0.0.1:<p1>[,127.0.0.1:<p2>]/<db>?target_session_attrs=primary */
  url(db?: string): string;
  /** CREATE DATABASE on the node that accepts writes (name must match /^[a-z_][a-z0-9_]*$/) */
  createDatabase(name: string): Promise<void>;
  /**
   * A new standby made from `from` with pg_basebackup -R through a replication slot named
   * `name` (also its cluster_name), streaming once this resolves; asynchronous until a
   * person names it in `from`'s synchronous_standby_names (docs/SCALING.md, runbook step 5).
   */
  addStandby(from: PgNode, name: string): Promise<PgNode>;
  /** The sync_state of the standby `name` in `primary`'s pg_stat_replication once it streams, else undefined */
  syncState(primary: PgNode, name: string): Promise<string | undefined>;
  /** Stops every node and removes the temp dir; safe to call twice */
  close(): Promise<void>;
}

/** The directory holding initdb, pg_ctl, postgres and pg_basebackup: $PG_BIN, else the highest /usr/lib/postgresql/<n>/bin, else PATH. */
export function postgresBinDir(): string | undefined {
  const fromEnv = process.env.PG_BIN;
  if (fromEnv !== undefined && fromEnv !== '') return holdsBinaries(fromEnv) ? fromEnv : undefined;
  return debianBinDir() ?? pathBinDir();
}

function holdsBinaries(dir: string): boolean {
  return BINARIES.every((name) => existsSync(join(dir, name)));
}

function debianBinDir(): string | undefined {
  if (!existsSync(DEBIAN_ROOT)) return undefined;
  const versions = readdirSync(DEBIAN_ROOT)
    .filter((entry) => /^\d+$/.test(entry))
    .sort((a, b) => Number(b) - Number(a));
  return versions.map((version) => join(DEBIAN_ROOT, version, 'bin')).find(holdsBinaries);
}

function pathBinDir(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '' || !existsSync(join(dir, 'initdb'))) continue;
    // Debian links only some of the binaries into PATH; the directory they point into holds them all.
    const real = dirname(realpathSync(join(dir, 'initdb')));
    if (holdsBinaries(real)) return real;
  }
  return undefined;
}

/**
 * Which of `pids` still run. A zombie counts as gone: the children of a killed postmaster
 * are left to PID 1, which in some containers reaps orphans only every few seconds.
 */
export async function livePids(pids: readonly number[]): Promise<number[]> {
  const table = await processTable();
  return pids.filter((pid) => table.has(pid));
}

/** Every cluster not closed yet, for closeAllPgClusters. */
const open = new Set<Sandbox>();

/** Closes every cluster still open; for afterEach, so a failed test leaves no server running. */
export async function closeAllPgClusters(): Promise<void> {
  await Promise.all([...open].map((sandbox) => sandbox.close()));
}

export async function startPgCluster(options: { standby?: boolean; synchronous?: boolean } = {}): Promise<PgCluster> {
  const bin = postgresBinDir();
  if (bin === undefined) throw new Error(`PostgreSQL is not installed: no ${BINARIES.join(', ')} in $PG_BIN, ${DEBIAN_ROOT}/<version>/bin or PATH`);
  const sandbox = new Sandbox(await mkdtemp(join(tmpdir(), 'interlink-pg-')), bin);
  open.add(sandbox);
  try {
    await sandbox.handOverToServerUser();
    const primary = await startPrimary(sandbox);
    const standby = options.standby === true ? await startStandby(sandbox, primary) : undefined;
    if (standby !== undefined && options.synchronous !== false) await makeSynchronous(primary, standby);
    return clusterOf(sandbox, primary, standby);
  } catch (error) {
    await sandbox.close();
    throw error;
  }
}

function clusterOf(sandbox: Sandbox, primary: Node, standby: Node | undefined): PgCluster {
  const hosts = [primary, ...(standby !== undefined ? [standby] : [])].map((node) => `127.0.0.1:${node.port}`).join(',');
  const url = (db = 'postgres') => `postgres://${SERVER_USER}@${hosts}/${encodeURIComponent(db)}?target_session_attrs=primary`;
  return {
    primary,
    standby,
    url,
    // Through the cluster URL: after a failover the promoted standby is the one to ask.
    createDatabase: async (name) => {
      if (!DATABASE_NAME.test(name)) throw new Error(`database name ${JSON.stringify(name)} does not match ${DATABASE_NAME}`);
      await withSql(url(), (sql) => sql.unsafe(`create database ${name}`));
    },
    addStandby: async (from, name) => {
      const node = sandbox.nodes.find((n) => n === from);
      if (node === undefined) throw new Error(`${from.name} is not a node of this cluster`);
      return startStandby(sandbox, node, name);
    },
    syncState: async (from, name) => (await replicationState(from as Node, name))?.syncState,
    close: () => sandbox.close(),
  };
}

async function startPrimary(sandbox: Sandbox): Promise<Node> {
  const dataDir = join(sandbox.root, 'primary');
  // --no-sync: a throwaway cluster needs no flush of its initial files; the server itself runs with fsync on.
  await sandbox.runAsServer('initdb', ['-D', dataDir, '-U', SERVER_USER, '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions'], 'initdb');
  await writeFile(join(dataDir, 'pg_hba.conf'), ['host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust', ''].join('\n'));
  await appendFile(
    join(dataDir, 'postgresql.conf'),
    settings({
      listen_addresses: "'127.0.0.1'",
      unix_socket_directories: "''",
      fsync: 'on',
      synchronous_commit: 'on',
      wal_level: 'replica',
      max_wal_senders: '4',
      max_replication_slots: '4',
      hot_standby: 'on',
      logging_collector: 'off',
      cluster_name: "'primary'",
      synchronous_standby_names: "''",
    }),
  );
  return startOnFreePort(sandbox, 'primary', dataDir);
}

/** A standby streaming from `primary` through a replication slot (so the primary keeps the WAL it has not received). */
async function startStandby(sandbox: Sandbox, primary: Node, name = 'standby'): Promise<Node> {
  if (!DATABASE_NAME.test(name)) throw new Error(`standby name ${JSON.stringify(name)} does not match ${DATABASE_NAME}`);
  const dataDir = join(sandbox.root, name);
  const source = ['-h', '127.0.0.1', '-p', String(primary.port), '-U', SERVER_USER];
  await sandbox.runAsServer('pg_basebackup', [...source, '-D', dataDir, '-R', '-X', 'stream', '-c', 'fast', '-C', '-S', name, '--no-sync'], 'pg_basebackup');
  // cluster_name is the application_name the standby's WAL receiver reports to the primary.
  // The copied configuration is the primary's from before makeSynchronous (which uses
  // ALTER SYSTEM on the primary alone), and stays so: once promoted, this node has no
  // standby, and commits waiting for one would hang.
  await appendFile(join(dataDir, 'postgresql.conf'), settings({ cluster_name: `'${name}'`, synchronous_standby_names: "''" }));
  const standby = await startOnFreePort(sandbox, name, dataDir);
  await waitUntil(`${name} to stream from ${primary.name} (pg_stat_replication)`, async () => (await replicationState(primary, name)) !== undefined, standby.logFile);
  return standby;
}

async function makeSynchronous(primary: Node, standby: Node): Promise<void> {
  await withSql(primary.url(), async (sql) => {
    await sql.unsafe(`alter system set synchronous_standby_names = '${standby.name}'`);
    await sql`select pg_reload_conf()`;
  });
  await waitUntil("the standby to be the primary's synchronous standby (sync_state = 'sync')", async () => (await replicationState(primary))?.syncState === 'sync', primary.logFile);
}

/** The standby's row in the primary's pg_stat_replication once it streams. */
async function replicationState(primary: Node, name = 'standby'): Promise<{ syncState: string } | undefined> {
  const rows = await withSql(primary.url(), (sql) => sql`select sync_state from pg_stat_replication where application_name = ${name} and state = 'streaming'`);
  const syncState: unknown = rows[0]?.sync_state;
  return typeof syncState === 'string' ? { syncState } : undefined;
}

/** Starts the node in `dataDir` on a port that was free a moment ago, and on another if something took it meanwhile. */
async function startOnFreePort(sandbox: Sandbox, name: string, dataDir: string): Promise<Node> {
  for (let attempt = 1; ; attempt++) {
    const node = new Node(name, await freePort(), dataDir, sandbox);
    await appendFile(join(dataDir, 'postgresql.conf'), settings({ port: String(node.port) }));
    sandbox.nodes.push(node);
    const logBefore = await readLog(node.logFile);
    try {
      await node.start();
      return node;
    } catch (error) {
      sandbox.nodes.pop();
      const clash = (await readLog(node.logFile)).slice(logBefore.length).includes('Address already in use');
      if (!clash || attempt === PORT_TRIES) throw error;
    }
  }
}

function settings(values: Record<string, string>): string {
  return Object.entries(values)
    .map(([key, value]) => `${key} = ${value}\n`)
    .join('');
}

class Node implements PgNode {
  readonly logFile: string;
  /**
   * The postmaster runs as this process's child rather than under `pg_ctl start`: pg_ctl
   * leaves it to PID 1, which in some containers reaps only every few seconds, and until
   * then the zombie's pid in postmaster.pid stops a restart after kill9 ("lock file
   * postmaster.pid already exists"). As a child it is reaped the moment it exits.
   */
  private postmaster: Postmaster | undefined;

  constructor(
    readonly name: string,
    readonly port: number,
    readonly dataDir: string,
    private readonly sandbox: Sandbox,
  ) {
    this.logFile = join(sandbox.root, `${name}.log`);
  }

  url(db = 'postgres'): string {
    return `postgres://${SERVER_USER}@127.0.0.1:${this.port}/${encodeURIComponent(db)}`;
  }

  async pid(): Promise<number> {
    const pidFile = join(this.dataDir, 'postmaster.pid');
    const text = await readFile(pidFile, 'utf8').catch(() => '');
    const pid = Number(text.split('\n')[0]);
    if (!Number.isInteger(pid) || pid <= 0) throw new Error(`${this.name}: no postmaster pid in ${pidFile} (not running?)`);
    return pid;
  }

  async start(): Promise<void> {
    const log = openSync(this.logFile, 'a');
    try {
      this.postmaster = this.sandbox.spawnAsServer('postgres', ['-D', this.dataDir], log);
    } finally {
      closeSync(log);
    }
    const postmaster = this.postmaster;
    await waitUntil(
      `${this.name} to accept connections on port ${this.port}`,
      async () => {
        if (postmaster.exit !== undefined) throw new Error(`${this.name}'s postmaster ended (${postmaster.exit}) before accepting connections\n${await logTail(this.logFile)}`);
        return answers(this.url());
      },
      this.logFile,
    );
  }

  async stop(): Promise<void> {
    await this.pgCtl(['stop', '-m', 'fast', '-w'], 'stop');
    await waitUntil(`${this.name}'s postmaster to be reaped after pg_ctl stop`, async () => this.reaped(), this.logFile);
  }

  async kill9(): Promise<void> {
    const pid = await this.pid();
    const family = [pid, ...childrenOf(pid, await processTable())];
    process.kill(pid, 'SIGKILL');
    await this.waitGone(family);
  }

  async promote(): Promise<void> {
    await this.pgCtl(['promote', '-w'], 'promote');
    await waitUntil(`${this.name} to accept writes after promotion`, () => this.isWritable(), this.logFile);
  }

  async isWritable(): Promise<boolean> {
    try {
      const [row] = await withSql(this.url(), (sql) => sql`select pg_is_in_recovery() as recovering`);
      return row?.recovering === false;
    } catch {
      return false;
    }
  }

  /** Stops the node at once if it runs (a stale postmaster.pid after kill9 names a dead process), and waits until none of its processes remain. */
  async halt(): Promise<void> {
    const pid = await this.pid().catch(() => undefined);
    const table = await processTable();
    if (pid !== undefined && table.has(pid)) {
      const family = [pid, ...childrenOf(pid, table)];
      await this.pgCtl(['stop', '-m', 'immediate', '-w'], 'stop -m immediate').catch(() => killIfAlive(pid));
      await this.waitGone(family);
    }
    // A postmaster that has not written its pid file yet.
    if (!this.reaped()) {
      this.postmaster?.child.kill('SIGKILL');
      await waitUntil(`${this.name}'s postmaster to be reaped after SIGKILL`, async () => this.reaped(), this.logFile);
    }
  }

  private reaped(): boolean {
    return this.postmaster === undefined || this.postmaster.exit !== undefined;
  }

  private async waitGone(family: readonly number[]): Promise<void> {
    const what = `${this.name}'s postmaster and its ${family.length - 1} children (pids ${family.join(' ')}) to exit and port ${this.port} to refuse connections`;
    await waitUntil(what, async () => this.reaped() && (await livePids(family)).length === 0 && !(await accepts(this.port)), this.logFile);
  }

  private async pgCtl(args: readonly string[], what: string): Promise<void> {
    const seconds = String(Math.ceil(WAIT_MS / 1000));
    try {
      await this.sandbox.runAsServer('pg_ctl', [...args, '-t', seconds, '-s', '-D', this.dataDir], `pg_ctl ${what} (${this.name})`);
    } catch (error) {
      throw new Error(`${error instanceof Error ? error.message : String(error)}\n${await logTail(this.logFile)}`);
    }
  }
}

/** The temp dir of one cluster and the nodes started in it: what close tears down. */
class Sandbox {
  readonly nodes: Node[] = [];
  private closing: Promise<void> | undefined;

  constructor(
    readonly root: string,
    private readonly bin: string,
  ) {}

  /** As root, the server user must own the temp dir: it creates the data dirs and log files in it. */
  async handOverToServerUser(): Promise<void> {
    if (!runningAsRoot()) return;
    const uid = Number(await run('id', ['-u', SERVER_USER], this.root, `id -u ${SERVER_USER}`));
    const gid = Number(await run('id', ['-g', SERVER_USER], this.root, `id -g ${SERVER_USER}`));
    await chown(this.root, uid, gid);
  }

  spawnAsServer(binary: (typeof BINARIES)[number], args: readonly string[], logFd: number): Postmaster {
    const [file, fullArgs] = this.asServer(binary, args);
    const child = spawn(file, fullArgs, { cwd: this.root, env: toolEnv(), stdio: ['ignore', logFd, logFd] });
    const postmaster: Postmaster = { child, exit: undefined };
    child.once('exit', (code, signal) => (postmaster.exit = signal ?? `exit ${String(code)}`));
    child.once('error', (error) => (postmaster.exit = error.message));
    return postmaster;
  }

  runAsServer(binary: (typeof BINARIES)[number], args: readonly string[], what: string): Promise<string> {
    const [file, fullArgs] = this.asServer(binary, args);
    return run(file, fullArgs, this.root, what);
  }

  private asServer(binary: (typeof BINARIES)[number], args: readonly string[]): [string, string[]] {
    const path = join(this.bin, binary);
    // setpriv execs the binary in place (no PAM session, no extra process), with the user's groups.
    if (runningAsRoot()) return ['setpriv', [`--reuid=${SERVER_USER}`, `--regid=${SERVER_USER}`, '--init-groups', '--', path, ...args]];
    return [path, [...args]];
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      const halted = await Promise.allSettled(this.nodes.map((node) => node.halt()));
      open.delete(this);
      const failed = halted.find((result) => result.status === 'rejected');
      if (failed !== undefined) throw failed.reason;
      await rm(this.root, { recursive: true, force: true });
    })();
    return this.closing;
  }
}

/** A postmaster started by spawnAsServer; `exit` says how it ended, once it has been reaped. */
interface Postmaster {
  readonly child: ChildProcess;
  exit: string | undefined;
}

function runningAsRoot(): boolean {
  return process.getuid?.() === 0;
}

/**
 * The environment of every tool and server started here: without PG* variables (a
 * developer's PGHOST or PGPORT must not redirect the tools), with LC_ALL=C so the server
 * log reads in English (startOnFreePort matches it).
 */
function toolEnv(): NodeJS.ProcessEnv {
  const inherited = Object.entries(process.env).filter(([key]) => !key.startsWith('PG'));
  return { ...Object.fromEntries(inherited), LC_ALL: 'C' };
}

/** Runs a command to its end, killing it at the deadline, so no child outlives the call. */
function run(file: string, args: readonly string[], cwd: string, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd, env: toolEnv(), timeout: WAIT_MS + 5_000, killSignal: 'SIGKILL' }, (error, stdout, stderr) => {
      if (error === null) resolve(stdout.trim());
      else reject(new Error(`${what} failed (${error.killed ? 'killed at its deadline' : `exit ${String(error.code)}`}): ${stderr.trim() || stdout.trim()}`));
    });
  });
}

function killIfAlive(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone: what the caller wanted.
  }
}

/** Pid → parent pid of every process that runs (zombies left out; see livePids). `ps -A -o` reads the same on Linux and macOS. */
async function processTable(): Promise<Map<number, number>> {
  const table = new Map<number, number>();
  for (const line of (await run('ps', ['-A', '-o', 'pid=,ppid=,stat='], tmpdir(), 'ps')).split('\n')) {
    const [pid, ppid, stat] = line.trim().split(/\s+/);
    if (pid !== undefined && ppid !== undefined && stat !== undefined && !stat.startsWith('Z')) table.set(Number(pid), Number(ppid));
  }
  return table;
}

/** A postmaster's children (backends and background workers); they exit once they see it die. */
function childrenOf(pid: number, table: ReadonlyMap<number, number>): number[] {
  return [...table].filter(([, ppid]) => ppid === pid).map(([child]) => child);
}

async function withSql<T>(url: string, use: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    return await use(sql);
  } finally {
    await sql.end({ timeout: 0 });
  }
}

async function answers(url: string): Promise<boolean> {
  try {
    await withSql(url, (sql) => sql`select 1`);
    return true;
  } catch {
    return false;
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.setTimeout(1_000);
    const settle = (result: boolean) => {
      socket.destroy();
      resolve(result);
    };
    socket.once('connect', () => settle(true));
    socket.once('error', () => settle(false));
    socket.once('timeout', () => settle(false));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('listen(0) gave no port'))));
    });
  });
}

/** Polls `check` until it holds; at the deadline fails naming `what`, with the tail of `logFile`. */
async function waitUntil(what: string, check: () => Promise<boolean>, logFile: string): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!(await check())) {
    if (Date.now() >= deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}\n${await logTail(logFile)}`);
    await delay(POLL_MS);
  }
}

function readLog(logFile: string): Promise<string> {
  return readFile(logFile, 'utf8').catch(() => '');
}

async function logTail(logFile: string): Promise<string> {
  const lines = (await readLog(logFile)).trimEnd().split('\n').slice(-LOG_TAIL_LINES);
  return `last lines of ${logFile}:\n${lines.join('\n')}`;
}
