// The operators' console in Chromium against a real gateway (the `console_demo` example on a
// free loopback port, state in SQLite): logging in, the objects, one object, calls, a typed
// error, delete, the dead alarms and their re-queue, the overview, and a refused token.
// Screenshots of every page go to target/console-screenshots/. Every wait has a deadline.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const DEMO = process.env.CONSOLE_DEMO ?? join(ROOT, 'target', 'debug', 'examples', 'console_demo');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = join(ROOT, 'target', 'console-screenshots');
const TOKEN = 'console-test-token';
// The longest any single wait may take.
const DEADLINE_MS = 20_000;

let gateway;
let browser;
let page;
let consoleUrl;
const pageErrors = [];

/** Starts the demo gateway and resolves with the console's address from its first line. */
function startGateway() {
  gateway = spawn(DEMO, ['--token', TOKEN, '--traffic'], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    const deadline = setTimeout(() => reject(new Error(`no address from ${DEMO} within ${DEADLINE_MS} ms`)), DEADLINE_MS);
    let output = '';
    gateway.stdout.on('data', (chunk) => {
      output += chunk;
      const match = /console: (\S+)/.exec(output);
      if (match) {
        clearTimeout(deadline);
        resolve(match[1]);
      }
    });
    gateway.on('error', (error) => {
      clearTimeout(deadline);
      reject(error);
    });
    gateway.on('exit', (code) => {
      clearTimeout(deadline);
      reject(new Error(`${DEMO} exited with ${code} before serving`));
    });
  });
}

/** A screenshot of the whole page, or of the viewport only (a modal dialog covers only that). */
async function shot(name, { fullPage = true } = {}) {
  await page.screenshot({ path: join(SHOTS, `console-${name}.png`), fullPage });
}

/** Waits until the element `selector` holds `text`. */
async function waitForText(selector, text) {
  await page.waitForFunction(
    ([s, t]) => document.querySelector(s)?.textContent.includes(t),
    [selector, text],
    { timeout: DEADLINE_MS },
  );
}

async function textOf(selector) {
  return (await page.locator(selector).textContent()).trim();
}

/** No horizontal scroll at the viewport's width. */
async function assertNoHorizontalScroll() {
  const { scrollWidth, clientWidth } = await page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
  }));
  assert.ok(scrollWidth <= clientWidth, `the page scrolls sideways: ${scrollWidth} > ${clientWidth}`);
}

async function go(hash) {
  await page.goto(`${consoleUrl}${hash}`);
}

async function call(handler, args) {
  await page.selectOption('#call-handler', handler);
  await page.fill('#call-args', args);
  await page.click('#call-form button[type=submit]');
}

describe('the console', () => {
  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    consoleUrl = await startGateway();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], timeout: DEADLINE_MS });
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(DEADLINE_MS);
    page = await context.newPage();
    page.on('pageerror', (error) => pageErrors.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      // Refused requests are logged by the browser itself; anything else is the page's fault
      // (an exception, a blocked script or style).
      if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
        pageErrors.push(`console: ${message.text()}`);
      }
    });
  });

  after(async () => {
    await browser?.close();
    if (gateway && gateway.exitCode === null) {
      const exited = new Promise((resolve) => gateway.once('exit', resolve));
      gateway.kill('SIGTERM');
      await exited;
    }
  });

  test('a wrong token is refused with the 401 in words', async () => {
    await page.goto(consoleUrl);
    await page.fill('#token', 'not-the-token');
    await page.click('button[type=submit]');
    await waitForText('#login-problem', 'HTTP 401');
    const words = await textOf('#login-problem');
    assert.match(words, /the bearer token is not valid/);
    assert.match(words, /code unauthenticated/);
    assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused token is not kept');
    await shot('login-refused');
  });

  test('logging in with the keyboard shows the types', async () => {
    await page.goto(consoleUrl);
    // The token field has the focus: typing and Enter log in.
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await waitForText('h1', 'Types');
    await page.locator('#type-Account').waitFor();
    assert.match(await textOf('main'), /withdraw/);
    const fields = await page.locator('section[aria-labelledby=type-Account] table').nth(1).textContent();
    assert.match(fields, /balance\s*i64\s*0/, 'the state fields with their types and defaults');
    await assertNoHorizontalScroll();
    await shot('types');
  });

  test('the objects of a type are listed a page at a time, by status', async () => {
    await page.click('text=Objects of Account');
    await page.locator('#objects').waitFor();
    const ids = await page.locator('#objects tbody tr td:first-child').allTextContents();
    assert.deepEqual(ids, Array.from({ length: 10 }, (_, i) => `acct-${String(i + 1).padStart(2, '0')}`));
    await assertNoHorizontalScroll();
    await shot('objects');
    await page.click('text=Next page');
    await waitForText('#objects caption', 'after acct-10');
    assert.deepEqual(await page.locator('#objects tbody tr td:first-child').allTextContents(), ['acct-11', 'acct-12']);
    await page.click('text=First page');
    await page.selectOption('#status-filter', 'stored');
    await page.click('form[aria-label=Filter] button');
    await waitForText('#objects caption', 'stored objects');
    const stored = await page.locator('#objects tbody tr').evaluateAll(
      (rows) => rows.map((row) => [...row.cells].map((cell) => cell.textContent.trim()).join(' ')),
    );
    assert.deepEqual(stored, [7, 8, 9, 10, 11, 12].map((n) => `acct-${String(n).padStart(2, '0')} stored`));
  });

  test('one object: status, state, version and alarms; a call changes its state', async () => {
    await go('#/types');
    await page.click('text=Objects of Account');
    await page.click('#objects >> text=acct-01');
    await page.locator('#object-state').waitFor();
    assert.match(await textOf('#object-state'), /"balance": 10/);
    assert.equal(await textOf('#object-status'), 'active');
    const version = Number(await textOf('#object-version'));
    assert.ok(version >= 1, `version ${version}`);
    assert.match(await textOf('#object-alarms'), /statement.*in 60 min/s);
    await call('deposit', '{"amount": 5}');
    await waitForText('#call-outcome', 'deposit returned');
    assert.equal(await textOf('#call-result'), '15');
    await waitForText('#object-state', '"balance": 15');
    assert.equal(Number(await textOf('#object-version')), version + 1);
    await assertNoHorizontalScroll();
    await shot('object');
  });

  test('every control of the object page is reached with Tab and has a name', async () => {
    await page.reload();
    await page.locator('#call-form').waitFor();
    const reached = [];
    for (let i = 0; i < 40; i += 1) {
      await page.keyboard.press('Tab');
      const focused = await page.evaluate(() => {
        const el = document.activeElement;
        const name = el.getAttribute('aria-label')
          || [...(el.labels ?? [])].map((label) => label.textContent).join(' ')
          || el.textContent;
        return { tag: el.tagName.toLowerCase(), id: el.id, name: name.trim() };
      });
      if (focused.tag === 'body') break;
      assert.ok(focused.name, `a ${focused.tag}#${focused.id} without a name`);
      reached.push(focused.id || focused.name);
    }
    for (const control of ['logout', 'object-state', 'call-handler', 'call-args', 'Call', 'delete']) {
      assert.ok(reached.includes(control), `${control} not reached by Tab: ${reached.join(', ')}`);
    }
  });

  test("a handler's typed error is shown with its code and details", async () => {
    await call('withdraw', '{"amount": 1000}');
    await waitForText('#call-outcome', 'handler_error');
    const words = await textOf('#call-outcome');
    assert.match(words, /withdraw failed/);
    assert.match(words, /HTTP 422, code handler_error/);
    assert.match(words, /"Insufficient"/);
    assert.match(words, /"wanted": 1000/);
    // Nothing changed.
    assert.match(await textOf('#object-state'), /"balance": 15/);
    await call('deposit', '{"amount": "five"}');
    await waitForText('#call-outcome', 'invalid_arguments');
    await shot('object-error');
    await call('withdraw', '{"amount": 1000}');
    await waitForText('#call-outcome', 'handler_error');
  });

  test('an object is deleted after a confirmation', async () => {
    await go('#/object/Account/acct-12');
    await page.locator('#object-state').waitFor();
    await page.click('#delete');
    await page.locator('#delete-dialog').waitFor({ state: 'visible' });
    await shot('delete-dialog', { fullPage: false });
    // Escape keeps it.
    await page.keyboard.press('Escape');
    await page.locator('#delete-dialog').waitFor({ state: 'hidden' });
    await page.click('#delete');
    await page.click('#confirm-delete');
    await waitForText('main', 'Deleted Account acct-12.');
    assert.match(page.url(), /#\/objects\/Account$/);
    await go('#/object/Account/acct-12');
    await waitForText('#object-details', 'code object_not_found');
  });

  test('a dead alarm is shown with its last error and re-queued', async () => {
    await go('#/dead');
    await page.locator('#dead-alarms').waitFor();
    const row = await textOf('#dead-alarms tbody tr');
    assert.match(row, /Mailer\s*mailer-1\s*send/);
    assert.match(row, /the mail server refused the connection/);
    await assertNoHorizontalScroll();
    await shot('dead-alarms');
    // Fix the cause, then re-queue.
    await page.click('#dead-alarms >> text=mailer-1');
    await page.locator('#call-form').waitFor();
    await call('repair', '{}');
    await waitForText('#call-result', 'true');
    await go('#/dead');
    await page.click('button[aria-label="Re-queue send of Mailer mailer-1"]');
    await waitForText('#requeue-outcome', 'Re-queued send of Mailer mailer-1');
    // It fires again, and this time it sends.
    await page.waitForFunction(async (token) => {
      const reply = await fetch('../v1/objects/Mailer/mailer-1', { headers: { Authorization: `Bearer ${token}` } });
      return reply.ok && (await reply.json()).state.sent === 1;
    }, TOKEN, { timeout: DEADLINE_MS, polling: 100 });
    await page.reload();
    await waitForText('main', 'No dead alarm.');
  });

  test('the overview charts the metrics and refreshes by itself', async () => {
    await go('#/overview');
    // More scrapes (OVERVIEW_SCRAPES) make a fuller picture for the guide's screenshot.
    const scrapes = Number(process.env.OVERVIEW_SCRAPES ?? 5);
    await page.waitForFunction(
      (wanted) => Number(document.querySelector('#samples')?.dataset.scrapes) >= wanted,
      scrapes,
      { timeout: DEADLINE_MS + scrapes * 1000 },
    );
    const legends = await page.locator('figure.chart .legend').allTextContents();
    assert.equal(legends.length, 3);
    assert.doesNotMatch(legends[0], /ok: no data yet/, 'the background traffic shows as calls per second');
    assert.match(legends[2], /p50: [\d.]+ ms/);
    assert.ok(await page.locator('figure.chart path.series').count() >= 3, 'lines are drawn');
    await assertNoHorizontalScroll();
    await shot('overview');
  });

  test('latency percentiles are read from the histogram buckets as Prometheus reads them', async () => {
    const found = await page.evaluate(async () => {
      const { buckets, parse, quantile } = await import('./prometheus.js');
      const scrape = (counts) => parse(counts
        .map(([le, n]) => `durable_call_duration_seconds_bucket{type="T",handler="h",le="${le}"} ${n}`)
        .join('\n'));
      const before = buckets(scrape([['0.001', 0], ['0.01', 0], ['0.1', 0], ['+Inf', 0]]), 'durable_call_duration_seconds');
      const after = buckets(scrape([['0.001', 50], ['0.01', 90], ['0.1', 100], ['+Inf', 100]]), 'durable_call_duration_seconds');
      return [0.5, 0.9, 0.99].map((q) => quantile(q, before, after)).concat(quantile(0.5, after, after));
    });
    // 50 of 100 at or under 1 ms, 90 under 10 ms, the rest under 100 ms; nothing counted: null.
    assert.deepEqual(found.map((v) => (v === null ? null : Number(v.toFixed(6)))), [0.001, 0.01, 0.091, null]);
  });

  test('state machine instances are listed by status and one is opened', async () => {
    await page.click('nav >> text=State machines');
    await page.locator('#fsm-instances').waitFor();
    const rows = await page.locator('#fsm-instances tbody tr').evaluateAll(
      (trs) => trs.map((tr) => [...tr.cells].slice(0, 4).map((cell) => cell.textContent.trim()).join(' ')),
    );
    assert.deepEqual(rows, [
      '1 shipment done deliver',
      '2 shipment awaiting_signal deliver',
      '3 shipment failed dispatch',
    ]);
    await assertNoHorizontalScroll();
    await shot('fsm');
    await page.selectOption('#fsm-status-filter', 'failed');
    await page.click('form[aria-label=Filter] button');
    await waitForText('#fsm-instances caption', 'failed instances');
    assert.deepEqual(await page.locator('#fsm-instances tbody tr td:first-child').allTextContents(), ['3']);
    await page.click('#fsm-instances >> text=3');
    await waitForText('#instance-error', 'the parcel has no address');
    assert.equal(await textOf('#instance dd >> nth=0'), 'failed');

    await go('#/fsm?limit=10&status=done');
    await page.click('#fsm-instances >> text=1');
    await page.locator('#result-json').waitFor();
    assert.equal(await textOf('#result-json'), '"parcel-1 delivered to 1 Main Street"');
    assert.match(await textOf('#state-json'), /"parcel": "parcel-1"/);
    await assertNoHorizontalScroll();
    await shot('fsm-instance');

    // Opened by id; an unknown id is shown with its code.
    await go('#/fsm?limit=10&name=shipment');
    await page.locator('#fsm-instances').waitFor();
    await page.fill('#open-instance', '2');
    await page.click('form[aria-label="Open an instance"] button');
    await waitForText('#instance', 'awaiting_signal');
    assert.match(await textOf('#instance'), /Awaits\s*delivered/);
    await go('#/fsm/999');
    await waitForText('main', 'instance_not_found');
  });

  test('logging out forgets the token', async () => {
    await page.click('#logout');
    await page.locator('#token').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  });

  test('the page raised no error and loaded nothing the policy blocks', () => {
    assert.deepEqual(pageErrors, []);
  });
});
