// The `ldp inspect` browser test: Debian's headless Chromium driven by playwright-core, against the delegates that
// tests/inspect_browser.rs started. It asserts on what the page shows, runs axe-core on each main view, measures
// the first load, and saves screenshots under $ARTIFACTS/screenshots. Exit status 0 only if every step passed.
//
// Environment: DEPS_DIR (node_modules of scripts/browser-deps), ARTIFACTS, INSPECT_URL, ECHO_URL, GREETER_URL,
// GREETER_TOKEN, GREETER_SECRET, ISSUER_LINE, LLM_URL, LCTL_FIXTURES.

import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run this through ldp-cli/tests/inspect_browser.rs)`);
  return value;
};
const require = createRequire(path.join(env('DEPS_DIR'), 'package.json'));
const { chromium } = require('playwright-core');
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

const artifacts = env('ARTIFACTS');
const shots = path.join(artifacts, 'screenshots');
mkdirSync(shots, { recursive: true });
const results = {};
let step = 'start';

function log(message) {
  process.stdout.write(`inspect e2e: ${message}\n`);
}

async function waitFor(condition, what, timeout = 15000) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await condition();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

const text = (page, selector) => page.locator(selector).innerText();

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

// axe-core on the page as it is now: no violations at all (every control labelled, contrast, ARIA used right).
async function accessible(page, view) {
  await page.evaluate(axeSource);
  const found = await page.evaluate(async () => {
    const r = await globalThis.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
  });
  assert(found.length === 0, `axe found violations on the ${view} view: ${JSON.stringify(found, null, 1)}`);
  results[`axe_${view}`] = 'no violations';
}

async function expectError(page, pattern, what) {
  await waitFor(async () => {
    const box = page.locator('#error');
    return (await box.isVisible()) && pattern.test(await box.innerText());
  }, `the error message ${pattern} (${what})`, 20000);
  log(`  ${what}: ${(await text(page, '#error')).slice(0, 140)}`);
}

// Fills the whole connect form (credentials left empty unless given), then connects.
async function connect(page, url, options = {}) {
  await page.fill('#url', url);
  const open = await page.locator('#connect-options').getAttribute('open');
  if (open === null) await page.click('#connect-options summary');
  await page.fill('#token', options.token ?? '');
  await page.selectOption('#sign', options.sign ?? '');
  await page.fill('#secret', options.secret ?? '');
  await page.fill('#issuers', options.issuers ?? '');
  await page.fill('#timeout', String(options.timeout ?? 15));
  await page.click('#connect');
}

async function connected(page, delegate) {
  await waitFor(async () => (await text(page, '#status')).includes(`Connected to ${delegate}`), `connected to ${delegate}`, 20000);
}

async function tab(page, name) {
  await page.click(`#tab-${name}`);
  await waitFor(async () => (await page.locator(`#view-${name}`).isVisible()), `the ${name} view`);
}

// Delegates that misbehave, for the error paths: one answers garbage to everything, one accepts and never answers.
function garbageServer() {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"this is": not json'); });
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}
function hangingServer() {
  return new Promise((resolve) => {
    const sockets = [];
    const server = net.createServer((socket) => { sockets.push(socket); });
    server.closeAll = () => sockets.forEach((s) => s.destroy());
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  timeout: 60000,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const garbage = await garbageServer();
const hanging = await hangingServer();
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));

  // -- first load, measured in the browser: navigation start to the script's ready mark, and to the load event.
  step = 'first load';
  const inspectUrl = env('INSPECT_URL');
  await page.goto(inspectUrl, { waitUntil: 'load' });
  const timing = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0];
    const ready = performance.getEntriesByName('inspector-ready')[0];
    return { ready_ms: ready ? ready.startTime : null, load_ms: nav.loadEventEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd, transfer_bytes: nav.transferSize };
  });
  log(`first load: ready ${timing.ready_ms?.toFixed(1)} ms, load event ${timing.load_ms.toFixed(1)} ms`);
  assert(timing.ready_ms !== null, 'the script marked itself ready');
  assert(timing.ready_ms < 1000 && timing.load_ms < 1000, `the first load takes under a second (${JSON.stringify(timing)})`);
  results.first_load = timing;
  await accessible(page, 'empty');

  // -- keyboard: the URL field is reachable by Tab, Enter submits, arrow keys move between the tabs.
  step = 'keyboard';
  await page.focus('#url');
  await page.keyboard.type(env('ECHO_URL'));
  await page.keyboard.press('Enter');
  await connected(page, 'ldp:delegate:echo');
  await page.focus('#tab-card');
  await page.keyboard.press('ArrowRight');
  await waitFor(async () => (await page.locator('#tab-call').getAttribute('aria-selected')) === 'true', 'ArrowRight selecting the Call tab');
  assert(await page.evaluate(() => document.activeElement.id === 'tab-call'), 'focus follows the selected tab');
  await page.keyboard.press('ArrowLeft');
  await waitFor(async () => (await page.locator('#tab-card').getAttribute('aria-selected')) === 'true', 'ArrowLeft back to the Card tab');

  // -- bad input: each is a message on the page.
  step = 'bad input';
  await page.fill('#url', '');
  await page.click('#connect');
  await expectError(page, /Enter the delegate's URL/, 'empty URL');
  await connect(page, 'http://127.0.0.1:1');
  await expectError(page, /Cannot connect: .*nothing answers/, 'unreachable URL');
  await connect(page, 'ftp://example.invalid');
  await expectError(page, /expected an http:\/\/, https:\/\/, ws:\/\/ or wss:\/\/ URL/, 'a URL of another scheme');
  await connect(page, `http://127.0.0.1:${garbage.address().port}`);
  await expectError(page, /Cannot connect: /, 'a delegate that answers garbage');
  await connect(page, `http://127.0.0.1:${hanging.address().port}`, { timeout: 2 });
  await expectError(page, /Cannot connect: .*(no answer|did not answer|timed out|timeout)/i, 'a delegate that hangs');
  await connect(page, env('GREETER_URL'), { token: 'wrong-token', timeout: 15 });
  await expectError(page, /Cannot connect: .*(token|401|unauthorized)/i, 'a wrong token');
  await connect(page, env('GREETER_URL'), { token: env('GREETER_TOKEN'), sign: 'hmac-sha256-jcs', secret: 'not-the-secret' });
  await expectError(page, /Cannot connect: .*signature/i, 'a wrong signing secret');

  // -- the signing delegate: card with schema and attestations, verified against the pinned issuer key.
  step = 'card';
  await connect(page, env('GREETER_URL'), { token: env('GREETER_TOKEN'), sign: 'hmac-sha256-jcs', secret: env('GREETER_SECRET'), issuers: env('ISSUER_LINE') });
  await connected(page, 'ldp:delegate:greeter');
  assert(await page.locator('#error').isHidden(), 'the error box is gone after a good connect');
  assert((await text(page, '#status')).includes('signed hmac-sha256-jcs'), 'the status says messages are signed');
  await tab(page, 'card');
  assert((await text(page, '#card-delegate')) === 'ldp:delegate:greeter', 'the card names the delegate');
  assert((await text(page, '#card-modes')).includes('semantic_frame'), 'the card lists payload modes');
  assert((await text(page, '#card-domain')) === 'default', 'the card shows the trust domain');
  const skills = await text(page, '#skills');
  assert(/0\.8 \(self_claimed\)/.test(skills), `the self-claim is shown (${skills})`);
  assert(/0\.91 by ldp:issuer:evals: verified/.test(skills), `the good attestation verifies (${skills})`);
  assert(/0\.99 by ldp:issuer:evals: not verified/.test(skills), `the tampered attestation does not (${skills})`);
  assert(!/^null$/m.test(await text(page, '#view-card')), 'no stray "null" on the card view');
  await shot(page, 'card');
  await accessible(page, 'card');

  // -- call from the generated form.
  step = 'call form';
  await tab(page, 'call');
  const labels = await page.locator('#schema-fields label').allInnerTexts();
  assert(labels.some((l) => l.startsWith('name (required)')) && labels.some((l) => l.startsWith('times')), `fields from the schema (${labels})`);
  // An input breaking the schema: the required field left empty.
  await page.click('#run');
  await expectError(page, /required field: name/, 'a required field left empty');
  // Breaking the schema in raw JSON: checked by the inspector against the skill's schema before sending.
  await page.check('#input-raw');
  await page.fill('#raw-input', '{"name": "Ada", "times": 9}');
  await page.click('#run');
  await expectError(page, /does not fit the skill's schema: .*times/, 'raw JSON breaking the schema');
  await page.fill('#raw-input', '{"name": ');
  await page.click('#run');
  await expectError(page, /not JSON/, 'raw input that is not JSON');
  await page.check('#input-form');
  // The form's fields, found by their labels as a person would.
  await page.getByLabel(/^name \(required\)/).fill('Ada');
  await page.getByLabel(/^times/).fill('2');
  await page.getByLabel(/^loud/).check();
  await page.getByLabel(/^tone/).selectOption('"warm"');
  await page.selectOption('#mode', 'text');
  await page.click('#contract-box summary');
  await page.check('#use-contract');
  await page.fill('#objective', 'greet Ada');
  await page.fill('#criteria', 'says hello');
  await page.click('#run');
  await waitFor(async () => (await text(page, '#task-state')).startsWith('Completed'), 'the greet task to complete');
  const output = JSON.parse(await text(page, '#output'));
  assert(output.echo?.name === 'Ada' && output.echo.times === 2 && output.echo.loud === true && output.echo.tone === 'warm', `the output echoes the form (${JSON.stringify(output)})`);
  const provenance = await text(page, '#provenance');
  assert(provenance.includes('ldp:delegate:greeter') && /Payload mode used\s+text/.test(provenance), `provenance shown (${provenance})`);
  await shot(page, 'call-result');
  await accessible(page, 'call');

  // -- the wire log: both directions, signed.
  step = 'wire';
  await tab(page, 'wire');
  await waitFor(async () => (await page.locator('#wire tbody tr').count()) >= 6, 'the wire log entries');
  const wire = await text(page, '#wire tbody');
  for (const type of ['HELLO', 'CAPABILITY_MANIFEST', 'SESSION_PROPOSE', 'SESSION_ACCEPT', 'TASK_SUBMIT', 'TASK_RESULT']) {
    assert(wire.includes(type), `the wire log shows ${type}`);
  }
  assert(wire.includes('→ sent') && wire.includes('← received'), 'both directions');
  assert(wire.includes('hmac-sha256-jcs'), 'signed messages are marked with their algorithm');
  const firstEnvelope = page.locator('#wire tbody tr').first().locator('details');
  await firstEnvelope.locator('summary').click();
  assert((await firstEnvelope.locator('pre').innerText()).includes('"type": "HELLO"'), 'an envelope opens as pretty JSON');
  await firstEnvelope.locator('button.copy').click();
  await waitFor(async () => (await page.evaluate(() => navigator.clipboard.readText())).includes('HELLO'), 'the envelope copied to the clipboard');
  await shot(page, 'wire');
  await accessible(page, 'wire');

  // -- the LLM delegate: streamed output arrives piece by piece; the task's chain; a cancelled task.
  step = 'streaming';
  await connect(page, env('LLM_URL'));
  await connected(page, 'ldp:delegate:llm');
  await tab(page, 'call');
  await page.selectOption('#skill', 'chat');
  await page.check('#input-raw');
  await page.fill('#raw-input', '"tell me forty words"');
  await page.click('#run');
  const early = await waitFor(async () => { const t = await text(page, '#partial'); return t.includes('word2') && t; }, 'the first streamed words');
  assert(!early.includes('word40'), 'partial output arrives before the task ends');
  const later = await waitFor(async () => { const t = await text(page, '#partial'); return t.length > early.length && t; }, 'more streamed words');
  log(`  streamed: ${early.length} then ${later.length} characters`);
  await shot(page, 'streaming');
  await waitFor(async () => (await text(page, '#task-state')).startsWith('Completed'), 'the chat task to complete', 30000);
  assert((await text(page, '#output')).includes('word40'), 'the whole answer is the result');
  assert(/Tokens used\s+\d+/.test(await text(page, '#provenance')), 'usage is shown');
  await page.click('#show-chain');
  await waitFor(async () => (await page.locator('#view-chain').isVisible()) && (await page.locator('.chain-row').count()) >= 1, 'the task chain drawn');
  assert((await text(page, '#chain-diagram')).includes('ldp:delegate:llm'), 'the chain names the delegate');
  assert((await page.locator('.chain svg rect.node').count()) >= 1, 'the chain is drawn as SVG');
  await shot(page, 'chain-task');

  step = 'cancel';
  await tab(page, 'call');
  await page.click('#run');
  // The first task's whole answer is still shown until the second one starts: wait for the new stream.
  await waitFor(async () => { const t = await text(page, '#partial'); return t.includes('word3') && !t.includes('word40'); }, 'the second task streaming');
  await page.click('#cancel');
  await waitFor(async () => /Failed: .*(CANCELLED|cancel)/i.test(await text(page, '#task-state')), 'the task cancelled', 20000);
  const kept = await text(page, '#partial');
  assert(kept.includes('word3') && !kept.includes('word40'), `the streamed words stay, and stopped before the end (${JSON.stringify(kept)})`);
  await shot(page, 'cancelled');
  await tab(page, 'sessions');
  await waitFor(async () => { const t = await text(page, '#view-sessions'); return t.includes('chat (completed)') && t.includes('chat (failed)'); }, 'both turns in the session');

  // -- a pasted and an uploaded chain, checked, with findings beside their steps.
  step = 'chain';
  await tab(page, 'chain');
  await page.fill('#lctl-text', 'lctl: [this is not');
  await page.click('#lctl-check');
  await expectError(page, /LCTL: not an LCTL document/, 'garbage LCTL');
  const fixtures = env('LCTL_FIXTURES');
  await page.fill('#lctl-text', readFileSync(path.join(fixtures, 'spec-example2-parallel-merge.yaml'), 'utf8'));
  await page.click('#lctl-check');
  await waitFor(async () => (await page.locator('.chain-row').count()) >= 3, 'the pasted chain drawn');
  assert((await text(page, '#chain-summary')).includes('Parallel'), 'parallel branches are named');
  // Uploaded: the spec's failed-deployment example with a step renumbered, which `lctl check` flags on that step.
  await page.setInputFiles('#lctl-file', path.join(fixtures, 'broken', 'step-gap.yaml'));
  await waitFor(async () => (await text(page, '#chain-verdict')).includes('deploy-2024-042'), 'the uploaded chain checked');
  assert((await text(page, '#chain-verdict')).includes('breaks rules'), 'the verdict says the chain breaks rules');
  const gap = await text(page, '.chain-row[data-step="5"] .findings');
  assert(/error \[step-gap\]/.test(gap), `the finding is beside the step it concerns (${gap})`);
  assert((await text(page, '.chain-row[data-step="1"] .findings')).includes('no findings'), 'step 1 has none');
  assert((await page.locator('.chain rect.node.failed').count()) === 1, 'the failed step is drawn as failed');
  assert(!/^null$/m.test(await text(page, '#view-chain')), 'no stray "null" on the chain view');
  await shot(page, 'chain-pasted');
  await accessible(page, 'chain');

  // -- the conformance kit from the page, against the echo delegate.
  step = 'conformance';
  await connect(page, env('ECHO_URL'));
  await connected(page, 'ldp:delegate:echo');
  await tab(page, 'conformance');
  await page.click('#run-kit');
  await waitFor(async () => (await page.locator('#kit-verdict').count()) > 0, 'the conformance report', 190000);
  const verdict = await text(page, '#kit-verdict');
  log(`  kit: ${verdict}`);
  assert(verdict.startsWith('PASSED'), `the echo delegate passes the kit (${verdict})`);
  assert((await page.locator('#kit tbody tr').count()) > 20, 'one row per requirement');
  assert(/profile A \(Basic\): /.test(await text(page, '#kit-profiles')), 'the adoption profiles are listed');
  await page.check('#kit-failures');
  const shown = await page.locator('#kit tbody tr:visible').count();
  assert(shown < (await page.locator('#kit tbody tr').count()), 'the filter hides what passed');
  await page.uncheck('#kit-failures');
  await shot(page, 'conformance');
  await accessible(page, 'conformance');

  assert(consoleErrors.filter((e) => !/Failed to load resource/.test(e)).length === 0, `no script errors in the console: ${consoleErrors.join('; ')}`);
  await context.close();
  log('every step passed');
} catch (e) {
  failed = true;
  log(`FAILED at "${step}": ${e.stack || e}`);
  try {
    const pages = browser.contexts().flatMap((c) => c.pages());
    if (pages[0]) await pages[0].screenshot({ path: path.join(shots, 'failure.png'), fullPage: true });
  } catch { /* the failure above is what matters */ }
} finally {
  writeFileSync(path.join(artifacts, 'results.json'), JSON.stringify(results, null, 2));
  garbage.close();
  hanging.closeAll();
  hanging.close();
  await browser.close();
}
process.exit(failed ? 1 : 0);
