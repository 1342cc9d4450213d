/**
 * The relay's own view of its commits, from its /metrics (`interlink_relay_commit_seconds`,
 * relay/relay-metrics.ts): how long a queue change waited for its commit, fdatasync
 * included. Read before and after a window, it says how much of a send's wait for
 * `accepted` was the relay's disk, and how much was everything else (the generator's own
 * event loops on a busy machine among them).
 */
const PREFIX = 'interlink_relay_commit_seconds';
const BUCKET = new RegExp(`^${PREFIX}_bucket\\{le="([^"]+)"\\} (\\d+(?:\\.\\d+)?)$`);

export interface CommitHistogram {
  /** Cumulative counts per upper bound (seconds), ascending; the last is +Inf. */
  buckets: { le: number; count: number }[];
  sum: number;
  count: number;
}

export interface CommitFigures {
  commits: number;
  mean_ms: number | null;
  /** The bucket bound at or under which half, and 99%, of the window's commits finished (null: over the largest, 1 s). */
  p50_at_most_ms: number | null;
  p99_at_most_ms: number | null;
}

/** The histogram from one scrape; undefined when the relay has no /metrics or does not answer. */
export async function readCommits(metricsUrl: string | undefined): Promise<CommitHistogram | undefined> {
  if (metricsUrl === undefined) return undefined;
  let text: string;
  try {
    text = await (await fetch(metricsUrl, { signal: AbortSignal.timeout(5_000) })).text();
  } catch {
    return undefined;
  }
  const histogram: CommitHistogram = { buckets: [], sum: 0, count: 0 };
  for (const line of text.split('\n')) {
    const bucket = BUCKET.exec(line);
    if (bucket !== null) histogram.buckets.push({ le: bucket[1] === '+Inf' ? Number.POSITIVE_INFINITY : Number(bucket[1]), count: Number(bucket[2]) });
    else if (line.startsWith(`${PREFIX}_sum `)) histogram.sum = Number(line.slice(PREFIX.length + 5));
    else if (line.startsWith(`${PREFIX}_count `)) histogram.count = Number(line.slice(PREFIX.length + 7));
  }
  histogram.buckets.sort((a, b) => a.le - b.le);
  return histogram;
}

/** The commits between two scrapes. */
export function commitsBetween(before: CommitHistogram | undefined, after: CommitHistogram | undefined): CommitFigures | null {
  if (before === undefined || after === undefined) return null;
  const commits = after.count - before.count;
  if (commits <= 0) return { commits: 0, mean_ms: null, p50_at_most_ms: null, p99_at_most_ms: null };
  const within = after.buckets.map((b, i) => ({ le: b.le, count: b.count - (before.buckets[i]?.count ?? 0) }));
  const bound = (share: number) => {
    const bucket = within.find((b) => b.count >= share * commits);
    return bucket === undefined || !Number.isFinite(bucket.le) ? null : bucket.le * 1000;
  };
  return { commits, mean_ms: Math.round(((after.sum - before.sum) / commits) * 1e5) / 100, p50_at_most_ms: bound(0.5), p99_at_most_ms: bound(0.99) };
}
