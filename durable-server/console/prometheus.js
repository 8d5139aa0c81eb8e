// Reading `/metrics` (the Prometheus text format): samples, sums over labels, and quantiles
// of a histogram's increase between two scrapes, the way Prometheus' histogram_quantile does.

/** The samples of `text`: `{ name, labels, value }` each. */
export function parse(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    samples.push({ name: match[1], labels: labels(match[3] ?? ''), value: Number(match[4]) });
  }
  return samples;
}

function labels(text) {
  const found = {};
  const pattern = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let match;
  while ((match = pattern.exec(text)) !== null) {
    found[match[1]] = match[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
  }
  return found;
}

/** The sum of the samples named `name` whose labels pass `keep`. */
export function sum(samples, name, keep = () => true) {
  let total = 0;
  for (const sample of samples) {
    if (sample.name === name && keep(sample.labels)) total += sample.value;
  }
  return total;
}

/** The cumulative buckets of histogram `name`, summed over its other labels: `Map(le → count)`. */
export function buckets(samples, name) {
  const found = new Map();
  for (const sample of samples) {
    if (sample.name !== `${name}_bucket`) continue;
    const le = sample.labels.le === '+Inf' ? Infinity : Number(sample.labels.le);
    found.set(le, (found.get(le) ?? 0) + sample.value);
  }
  return found;
}

/**
 * The `q` quantile (0 to 1) of what histogram buckets counted between `before` and `after`
 * (two results of `buckets`), interpolated linearly within the bucket it falls in; null if
 * nothing was counted.
 */
export function quantile(q, before, after) {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => after.get(le) - (before.get(le) ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (let i = 0; i < bounds.length; i += 1) {
    if (counts[i] >= rank) {
      const upper = bounds[i];
      // Past the last finite bound: the last finite bound is the best answer there is.
      if (upper === Infinity) return lower;
      const inBucket = counts[i] - below;
      return inBucket > 0 ? lower + ((upper - lower) * (rank - below)) / inBucket : upper;
    }
    lower = bounds[i];
    below = counts[i];
  }
  return lower;
}
