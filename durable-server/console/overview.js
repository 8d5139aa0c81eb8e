// The live overview: `/metrics` scraped every second while the page is shown, and charts of
// what changed between scrapes: calls per second, commit batch sizes, call latency.

import { get } from './api.js';
import { lineChart } from './chart.js';
import { errorNotice, fill, h } from './dom.js';
import { buckets, parse, quantile, sum } from './prometheus.js';

const EVERY_MS = 1000;
const KEEP = 120;

const CALLS = 'durable_calls_total';
const CALL_DURATION = 'durable_call_duration_seconds';
const BATCH = 'durable_commit_batch_writes';
const COMMIT_DURATION = 'durable_commit_duration_seconds';
const LIVE = 'durable_live_objects';
const ACTIVE = 'durable_active_objects';
const DEAD = 'durable_alarms_fired_total';

const count = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
const ms = (seconds) => {
  const millis = seconds * 1000;
  return `${millis.toFixed(millis < 10 ? 2 : millis < 100 ? 1 : 0)} ms`;
};

/** Renders the overview into `main`; returns a function that stops its refreshing. */
export function overview(main) {
  const calls = lineChart('Calls per second', ['ok', 'failed'], count);
  const batches = lineChart('Commit batches: writes per batch', ['mean', 'largest'], count);
  const latency = lineChart('Call latency', ['p50', 'p90', 'p99'], ms);
  const totals = h('dl', { class: 'totals' });
  const problem = h('div', { class: 'problem' });
  const samples = h('p', { class: 'hint', id: 'samples' }, 'Waiting for the first scrape…');
  fill(main,
    h('h1', {}, 'Overview'),
    h('p', { class: 'lead' }, `From the gateway's /metrics, read every ${EVERY_MS / 1000} s while this page is open.`),
    problem,
    totals,
    h('div', { class: 'charts' }, calls.figure, batches.figure, latency.figure),
    samples,
  );

  const scrapes = [];
  let timer = null;
  let stopped = false;

  async function scrape() {
    try {
      const text = await get('metrics', { text: true });
      if (stopped) return;
      fill(problem);
      scrapes.push({ at: Date.now(), samples: parse(text) });
      if (scrapes.length > KEEP + 1) scrapes.shift();
      draw();
    } catch (failure) {
      if (!stopped) fill(problem, errorNotice(failure, 'Reading the metrics failed'));
    }
    if (!stopped) timer = setTimeout(scrape, EVERY_MS);
  }

  function draw() {
    const last = scrapes[scrapes.length - 1].samples;
    showTotals(totals, last);
    const times = [];
    const columns = { calls: [[], []], batches: [[], []], latency: [[], [], []] };
    for (let i = 1; i < scrapes.length; i += 1) {
      const before = scrapes[i - 1];
      const after = scrapes[i];
      const seconds = (after.at - before.at) / 1000;
      times.push(after.at);
      const ok = (labels) => labels.outcome === 'ok';
      const failed = (labels) => labels.outcome !== 'ok';
      const delta = (name, keep) => sum(after.samples, name, keep) - sum(before.samples, name, keep);
      columns.calls[0].push(delta(CALLS, ok) / seconds);
      columns.calls[1].push(delta(CALLS, failed) / seconds);
      const batchCount = delta(`${BATCH}_count`);
      columns.batches[0].push(batchCount > 0 ? delta(`${BATCH}_sum`) / batchCount : null);
      columns.batches[1].push(batchCount > 0 ? largestBatch(after.samples) : null);
      const was = buckets(before.samples, CALL_DURATION);
      const now = buckets(after.samples, CALL_DURATION);
      columns.latency.forEach((column, j) => column.push(quantile([0.5, 0.9, 0.99][j], was, now)));
    }
    calls.update(times, columns.calls);
    batches.update(times, columns.batches);
    latency.update(times, columns.latency);
    samples.textContent = `${scrapes.length} scrapes, the last at ${new Date(scrapes[scrapes.length - 1].at).toISOString()}.`;
    samples.dataset.scrapes = String(scrapes.length);
  }

  scrape();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** The largest batch the exporter's summary reports (its `quantile="1"`), else its p99. */
function largestBatch(samples) {
  let largest = null;
  for (const sample of samples) {
    if (sample.name !== BATCH) continue;
    const q = Number(sample.labels.quantile);
    if (q >= 0.99 && Number.isFinite(sample.value)) largest = Math.max(largest ?? 0, sample.value);
  }
  return largest;
}

function showTotals(totals, samples) {
  const commits = sum(samples, `${COMMIT_DURATION}_count`);
  const items = [
    ['Live objects', sum(samples, LIVE)],
    ['Active objects', sum(samples, ACTIVE)],
    ['Calls so far', sum(samples, CALLS)],
    ['Failed calls so far', sum(samples, CALLS, (l) => l.outcome !== 'ok')],
    ['Commits so far', commits],
    ['Alarms dead so far', sum(samples, DEAD, (l) => l.outcome === 'dead')],
  ];
  fill(totals, ...items.map(([name, value]) => h('div', {}, h('dt', {}, name), h('dd', {}, count(value)))));
}
