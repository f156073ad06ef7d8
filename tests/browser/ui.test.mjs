// The chat page, offline use and <clef-chat>, end to end in headless Chromium against hub-server.mjs
// (the qwen35-tiny fixtures as test-org/clef-flash-GGUF). Screenshots go to tests/artifacts/
// (1280×800 and 390×844). Each test has its own browser profile (its own OPFS, service worker).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { launch, repoRoot, skipReason } from './helpers.mjs';

const skip = skipReason();
const REPO = 'test-org/clef-flash-GGUF';
const artifacts = join(repoRoot, 'tests', 'artifacts');
mkdirSync(artifacts, { recursive: true });
const shot = (page, name) => page.screenshot({ path: join(artifacts, `${name}.png`) });
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };

const pageUrl = (hub, extra = '') => `${hub.url}/dist/?hub=${encodeURIComponent(hub.url)}&repo=${REPO}${extra}`;

/** Sets the settings fields through the dialog. */
async function setSettings(page, values) {
  await page.getByRole('button', { name: 'Settings' }).click();
  const dialog = page.getByRole('dialog', { name: 'Settings' });
  await dialog.waitFor();
  for (const [label, v] of Object.entries(values)) {
    const input = dialog.getByLabel(label, { exact: false }).first();
    const type = await input.getAttribute('type');
    if (type === 'range') await input.evaluate((el, v) => {
      el.value = String(v);
      el.dispatchEvent(new Event('input', { bubbles: true }));
    }, v);
    else await input.fill(String(v));
  }
  await dialog.getByRole('button', { name: 'Done' }).click();
  await dialog.waitFor({ state: 'hidden' });
}

/** The last answer's text and meta line once it is finished. */
async function lastAnswer(page) {
  const a = page.locator('.clef-assistant').last();
  await a.locator('.clef-meta:not([hidden])').waitFor({ timeout: 30000 });
  await page.locator('.clef-send[aria-label="Send"]').waitFor({ timeout: 30000 });
  return { body: (await a.locator('.clef-body').innerText()).trim(), meta: await a.locator('.clef-meta').innerText() };
}

/** Waits until the service worker controls the page and has finished activating. (A predicate, not
 *  an async function: waitForFunction takes a returned promise for a truthy value.) */
async function serviceWorkerReady(page) {
  await page.waitForFunction(() => navigator.serviceWorker.controller?.state === 'activated', null, { timeout: 15000 });
}

/**
 * Opens the chat page in a fresh profile: on this first visit, once its service worker takes
 * control, the page reloads itself once to be cross-origin isolated (main.ts `reloadToIsolate`);
 * waited for, so that a test's first click is not lost to it. The server's own response.
 */
async function firstVisit(page, url) {
  const response = await page.goto(url);
  await page.waitForFunction(() => crossOriginIsolated, null, { timeout: 15000 });
  return response;
}

/** Sends `text` from the message box; the answer as `lastAnswer` gives it. */
async function ask(page, text) {
  const input = page.getByRole('textbox', { name: 'Message' });
  await input.fill(text);
  await input.press('Enter');
  return lastAnswer(page);
}

test('chat page: pick a model, see progress, pause/resume, chat, stop, regenerate, edit; screenshots', { skip, timeout: 90000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    // A slow connection and small Range requests, so the progress and a pause can be seen.
    hub.faults.bytesPerSecond = 1.2e6;
    const response = await firstVisit(page, pageUrl(hub, '&chunk=256'));
    assert.equal(response.headers()['cross-origin-embedder-policy'], undefined);

    // The picker: the small quants with sizes (from the Hub's file list), memory and a fit verdict.
    const list = page.getByRole('radiogroup', { name: 'Choose a model' });
    await list.getByText('IQ2_M').first().waitFor();
    for (const q of ['IQ2_M', 'IQ2_S', 'IQ2_XS', 'IQ2_XXS', 'Q2_K', 'Q2_K_S', 'Q2_0', 'IQ1_M', 'IQ1_S', 'Q1_0']) {
      assert.ok(await list.locator(`[data-quant="${q}"]`).isVisible(), `${q} offered`);
    }
    const size = (await hub.files.get(REPO).get('clef-flash-IQ2_M.gguf')).size;
    const item = list.locator('.quant-item.is-selected');
    await item.getByText('Fits here').waitFor();
    const detail = await item.innerText();
    assert.match(detail, /Recommended/);
    assert.match(detail, new RegExp(`${(size / 2 ** 20).toFixed(2)} MB`), 'size from the Hub');
    assert.match(detail, /Memory\s+~[\d.]+ MB with a 4,096-token context/);
    assert.match(detail, /The smallest size most people find usable/);
    assert.match(await page.locator('#cached-list').innerText(), /No models saved yet/);
    await shot(page, 'ui-picker-1280');

    // Download: progress with bytes, rate, ETA; pause keeps the part downloaded; resume finishes it.
    await item.getByRole('button', { name: /Download/ }).click();
    const status = page.locator('#status-card');
    await status.getByText(/Downloading|Resuming/).waitFor({ timeout: 15000 });
    await page.waitForFunction(() => /of [\d.]+ MB/.test(document.querySelector('#progress-stats')?.textContent ?? '') &&
      /\/s/.test(document.querySelector('#progress-stats')?.textContent ?? ''), null, { timeout: 15000 });
    const progress = await status.innerText();
    assert.match(progress, /[\d.]+ (KB|MB) of [\d.]+ MB/);
    assert.match(progress, /[\d.]+ (KB|MB)\/s/);
    assert.match(progress, /left/);
    assert.match(await page.locator('#chip-text').innerText(), /IQ2_M · \d+%/);
    await shot(page, 'ui-progress-1280');
    await status.getByRole('button', { name: 'Pause' }).click();
    await status.getByText('Paused').waitFor();
    await page.waitForFunction(() => /saved on this device/.test(document.querySelector('#status-card')?.textContent ?? ''));
    const paused = await status.innerText();
    assert.match(paused, /[\d.]+ (KB|MB) of [\d.]+ MB saved on this device/);
    await page.locator('#cached-list').getByText(/of [\d.]+ MB \(\d+%\) · paused/).waitFor();
    const servedBeforeResume = hub.bytesServed();
    hub.faults.bytesPerSecond = 0;
    hub.clearLog();
    await status.getByRole('button', { name: 'Resume' }).click();
    await status.getByText('is ready').waitFor({ timeout: 30000 });
    assert.ok(hub.bytesServed() < size, `resumed: ${hub.bytesServed()} bytes fetched after the pause (of ${size}; ${servedBeforeResume} before)`);
    assert.match(await status.innerText(), /Context\s+4,096 tokens/);
    assert.match(await page.locator('#chip-text').innerText(), /IQ2_M · ready/);
    await page.locator('#cached-list').getByText(/saved · in use/).waitFor();

    // Settings (kept in localStorage): greedy, short answers.
    await page.getByRole('button', { name: 'Settings' }).click();
    await page.getByRole('dialog', { name: 'Settings' }).waitFor();
    await page.waitForTimeout(150);
    await shot(page, 'ui-settings-1280');
    await page.keyboard.press('Escape');
    await setSettings(page, { Temperature: 0, 'Max tokens': 40, 'System prompt': 'You are a helpful assistant.' });
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('clef.settings')));
    assert.equal(stored.temperature, 0);
    assert.equal(stored.max_tokens, 40);

    // Chat: Enter sends; the answer streams in with tokens/s and prompt time.
    const input = page.getByRole('textbox', { name: 'Message' });
    await input.fill('What is the capital of France?');
    await input.press('Shift+Enter');
    await input.pressSequentially('Answer in one word.');
    assert.equal(await input.inputValue(), 'What is the capital of France?\nAnswer in one word.');
    await input.press('Enter');
    await page.locator('.clef-user .clef-bubble').getByText('What is the capital of France?').waitFor();
    const first = await lastAnswer(page);
    assert.ok(first.body.length > 10, `an answer: ${first.body}`);
    assert.match(first.meta, /[\d.]+ tok\/s/);
    assert.match(first.meta, /40 tokens/);
    assert.match(first.meta, /prompt \d+ ms/);
    assert.match(first.meta, /Length limit/);

    // Stop: a long answer, stopped while it streams.
    await setSettings(page, { 'Max tokens': 0 });
    await input.fill('Tell me a long story');
    await input.press('Enter');
    const stop = page.getByRole('button', { name: 'Stop' });
    await stop.waitFor();
    await page.locator('.clef-assistant').last().locator('.clef-body.is-streaming').filter({ hasText: /\S{3}/ }).waitFor();
    await stop.click();
    const stopped = await lastAnswer(page);
    assert.match(stopped.meta, /Stopped/);
    assert.ok(stopped.body.length > 0, 'the text before the stop stays');
    assert.ok(await input.isEnabled());

    // Regenerate the stopped answer (short again).
    await setSettings(page, { 'Max tokens': 24 });
    await page.locator('.clef-assistant').last().hover();
    await page.getByRole('button', { name: 'Regenerate answer' }).click();
    const regen = await lastAnswer(page);
    assert.doesNotMatch(regen.meta, /Stopped/);
    assert.match(regen.meta, /24 tokens/);
    assert.equal(await page.locator('.clef-assistant').count(), 2, 'the regenerated answer replaces the stopped one');

    // Edit the last message: the answer after it is replaced.
    await page.locator('.clef-user').last().hover();
    await page.getByRole('button', { name: 'Edit message' }).click();
    const edit = page.getByRole('textbox', { name: 'Edit message' });
    await edit.fill('Write a haiku about rain');
    await edit.press('Enter');
    await page.locator('.clef-user .clef-bubble').getByText('Write a haiku about rain').waitFor();
    const edited = await lastAnswer(page);
    assert.match(edited.meta, /tok\/s/);
    assert.equal(await page.locator('.clef-user').count(), 2);
    assert.equal(await page.locator('.clef-assistant').count(), 2);
    assert.equal(await page.locator('.clef-user .clef-bubble').getByText('Tell me a long story').count(), 0);
    await shot(page, 'ui-chat-1280');

    // Dark theme.
    await page.getByRole('button', { name: /^Theme: automatic/ }).click(); // → light
    await page.getByRole('button', { name: /^Theme: light/ }).click(); // → dark
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    await page.waitForTimeout(300); // transitions
    await shot(page, 'ui-chat-dark-1280');
    await page.getByRole('button', { name: /^Theme: dark/ }).click(); // → auto

    // Phone width: the conversation, then the models sheet.
    await page.setViewportSize(PHONE);
    await page.waitForTimeout(200);
    assert.ok(await input.isVisible());
    assert.ok(await page.locator('.clef-user').last().isVisible());
    await shot(page, 'ui-chat-390');
    await page.locator('#model-chip').click();
    await page.locator('#models-panel').getByText('Choose a model').waitFor();
    await page.waitForTimeout(250);
    assert.ok(await page.locator('#status-card').getByText('is ready').isVisible());
    await shot(page, 'ui-models-390');
    await page.keyboard.press('Escape');

    // New chat empties the conversation.
    await page.setViewportSize(DESKTOP);
    await page.getByRole('button', { name: 'New chat' }).click();
    await page.getByText('How can I help?').waitFor();
    assert.equal(await page.locator('.clef-msg').count(), 0);

    // A model that does not exist: a humane error, with the runtime's message under Details.
    await page.getByText('Open a file or another model').click();
    await page.getByRole('textbox', { name: 'Model name or URL' }).fill(`${REPO}:Q9_NOPE`);
    await page.getByRole('button', { name: 'Load', exact: true }).click();
    await status.getByText("The model file wasn't found.").waitFor({ timeout: 15000 });
    assert.match(await status.innerText(), /Check the model name and the Hub address in Settings/);
    assert.match(await page.locator('#chip-text').innerText(), /Q9_NOPE · failed/);
    await status.getByRole('button', { name: 'Dismiss' }).click();

    // A local .gguf dropped on the page loads from the file (no download, no cache).
    const fileUrl = `${hub.url}/cdn/${REPO}/main/clef-flash-IQ1_S.gguf`;
    const dt = await page.evaluateHandle(async (url) => {
      const bytes = await (await fetch(url)).arrayBuffer();
      const d = new DataTransfer();
      d.items.add(new File([bytes], 'my-model-IQ1_S.gguf'));
      return d;
    }, fileUrl);
    await page.dispatchEvent('body', 'dragenter', { dataTransfer: dt });
    await page.getByText('Drop the .gguf file to load it').waitFor();
    await page.dispatchEvent('body', 'drop', { dataTransfer: dt });
    await status.getByText('is ready').waitFor({ timeout: 30000 });
    assert.match(await status.innerText(), /my-model-IQ1_S\.gguf is ready[\s\S]*from the file/);
    assert.ok(await page.getByText('Drop the .gguf file to load it').isHidden());
    await input.fill('Hi');
    await input.press('Enter');
    assert.match((await lastAnswer(page)).meta, /tok\/s/);

    // Delete the saved model (two clicks: delete, confirm).
    const cachedList = page.locator('#cached-list');
    await cachedList.getByRole('button', { name: 'Delete IQ2_M from this device' }).click();
    await cachedList.getByRole('button', { name: 'Confirm: delete IQ2_M from this device' }).click();
    await page.getByText(/Deleted IQ2_M \([\d.]+ MB freed\)/).waitFor();
    await cachedList.getByText('No models saved yet').waitFor();
    assert.equal(await page.evaluate(async () => (await navigator.storage.getDirectory().then((r) => r.getDirectoryHandle('clef-cache')).then(async (d) => {
      const names = [];
      for await (const [n] of d.entries()) names.push(n);
      return names.length;
    }))), 0);
    assert.deepEqual(b.logs.filter((l) => l.startsWith('pageerror')), []);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('chat page: a failing server shows "Connection problem · retrying in N s", then the download completes', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    await firstVisit(page, pageUrl(hub));
    // The first data request gets 503 with Retry-After: 2, the one after it 429 with Retry-After: 2.
    hub.faults.statuses = [{ status: 503, retryAfter: 2 }, { status: 429, retryAfter: 2 }];
    await page.locator('.quant-item.is-selected').getByRole('button', { name: /Download/ }).click();
    const status = page.locator('#status-card');
    await status.getByText(/retrying in [12] s/).waitFor({ timeout: 15000 });
    assert.match(await status.innerText(), /Connecting…|Connection problem/);
    await shot(page, 'ui-retrying-1280');
    await status.getByText(/is ready/).waitFor({ timeout: 30000 });
    assert.equal(hub.faults.statuses.length, 0, 'both faults were served');
  } finally {
    await b.close();
    await hub.close();
  }
});

test('offline: after one visit with a cached model, the page and the chat work with the server gone', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page, ctx } = b;
  try {
    // On a phone: the models sheet is open at first; once the model is ready the chat shows.
    await page.setViewportSize(PHONE);
    const url = pageUrl(hub);
    await firstVisit(page, url);
    await page.locator('[data-quant="IQ1_S"]').click();
    await page.locator('.quant-item.is-selected').getByText('Fits here').waitFor();
    await page.waitForTimeout(250);
    await shot(page, 'ui-picker-390');
    await page.locator('.quant-item.is-selected').getByRole('button', { name: /Download/ }).click();
    // Attached, not visible: on a phone the sheet holding the card closes as the model becomes
    // ready, and on a slow machine it may be closed before a visibility check sees the card.
    await page.locator('#status-card').getByText('is ready').waitFor({ state: 'attached', timeout: 30000 });
    await page.getByText('How can I help?').waitFor();
    await page.waitForTimeout(250);
    assert.ok(await page.locator('#models-panel').isHidden(), 'the sheet closes when the model is ready');
    assert.ok(await page.getByRole('textbox', { name: 'Message' }).isVisible());
    await shot(page, 'ui-ready-390');
    await page.setViewportSize(DESKTOP);
    // Installable: Chromium finds no problem with the manifest, icons and service worker.
    const cdp = await ctx.newCDPSession(page);
    // The service worker has cached the shell and controls the page.
    await serviceWorkerReady(page);
    const cachedShell = await page.evaluate(async () => {
      const keys = await caches.keys();
      const c = await caches.open(keys.find((k) => k.startsWith('clef-app-')));
      return (await c.keys()).map((r) => new URL(r.url).pathname.split('/').pop());
    });
    // Chromium runs relaxed SIMD: only that wasm build is precached.
    for (const f of ['index.html', 'app.js', 'app.css', 'clef.js', 'clef-worker.js', 'clef_web_relaxed_bg.wasm', 'clef-chat.js', 'manifest.webmanifest']) {
      assert.ok(cachedShell.includes(f), `${f} in the service worker cache (${cachedShell})`);
    }
    assert.ok(!cachedShell.includes('clef_web_bg.wasm'), 'the unused SIMD128 build is not precached');
    const { installabilityErrors } = await cdp.send('Page.getInstallabilityErrors');
    assert.deepEqual(installabilityErrors, []);
    const { url: manifestUrl, errors } = await cdp.send('Page.getAppManifest');
    assert.match(manifestUrl, /manifest\.webmanifest$/);
    assert.deepEqual(errors, []);

    // Cut the server and the network; reload.
    await hub.close();
    await ctx.setOffline(true);
    await page.reload();
    await page.getByText('Chat with Clef-Flash, privately').waitFor();
    // The last model is on this device: it loads by itself, from OPFS.
    await page.locator('#status-card').getByText('is ready').waitFor({ timeout: 30000 });
    assert.match(await page.locator('#status-card').innerText(), /from this device/);
    const offline = await ask(page, 'Hello from offline');
    assert.match(offline.meta, /tok\/s/);
    assert.ok(offline.body.length > 0);
    await shot(page, 'ui-offline-1280');
    await ctx.setOffline(false);
  } finally {
    await b.close();
    await hub.close().catch(() => {});
  }
});

test('chat page: cross-origin isolated by its service worker (COOP + COEP) from the first visit, through one reload; a download from another origin still works; the embed example not isolated', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const other = await startHubServer(); // the Hub on another origin (another port): CORS requests
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    let navigations = 0;
    page.on('framenavigated', (f) => f === page.mainFrame() && navigations++);
    const response = await page.goto(pageUrl(hub));
    assert.equal(response.headers()['cross-origin-embedder-policy'], undefined, 'the server sends no COOP/COEP');
    // Nothing touched: once the service worker controls the page, it reloads, once, and is isolated.
    await page.waitForFunction(() => crossOriginIsolated, null, { timeout: 15000 });
    assert.equal(navigations, 2, 'one reload');
    assert.equal(await page.evaluate(() => typeof SharedArrayBuffer), 'function');
    await serviceWorkerReady(page);
    await page.waitForTimeout(500);
    assert.equal(navigations, 2, 'no second reload');

    // A later visit, the Hub elsewhere.
    await page.goto(`${hub.url}/dist/?hub=${encodeURIComponent(other.url)}&repo=${REPO}`);
    assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'the service worker served the page with COOP + COEP');
    assert.equal(await page.evaluate(() => typeof SharedArrayBuffer), 'function');
    await page.locator('[data-quant="IQ1_S"]').click();
    await page.locator('.quant-item.is-selected').getByRole('button', { name: /Download/ }).click();
    await page.locator('#status-card').getByText('is ready').waitFor({ timeout: 30000 });
    assert.ok(other.bytesServed() > 0, 'the model came from the other origin');
    // (The tiny model runs on one worker; a shard worker's script is started here to see it isolated too.)
    await page.evaluate(() => void new Worker(new URL('clef-shard.js', location.href), { type: 'module' }));
    for (let i = 0; i < 50 && !page.workers().some((w) => w.url().endsWith('/clef-shard.js')); i++) await page.waitForTimeout(100);
    const workers = page.workers();
    assert.ok(workers.some((w) => w.url().endsWith('/clef-worker.js')), 'the engine worker runs');
    assert.ok(workers.some((w) => w.url().endsWith('/clef-shard.js')), 'a shard worker runs');
    for (const w of workers) assert.equal(await w.evaluate(() => self.crossOriginIsolated), true, `${w.url()} isolated too (SharedArrayBuffer: the shared exchange)`);
    assert.equal(hub.log.filter((e) => e.path.includes('/resolve/')).length, 0);
    const answer = await ask(page, 'Hello, isolated');
    assert.match(answer.meta, /tok\/s/);
    assert.ok(answer.body.length > 0);

    // The example of <clef-chat> on a plain static page stays one.
    await page.goto(`${hub.url}/dist/embed-example.html`);
    await page.locator('clef-chat').getByRole('button', { name: /Download and start/ }).waitFor();
    assert.equal(await page.evaluate(() => crossOriginIsolated), false);
    assert.deepEqual(b.logs.filter((l) => l.startsWith('pageerror')), []);
  } finally {
    await b.close();
    await hub.close();
    await other.close();
  }
});

test('chat page: no isolating reload once the first visit has been touched; isolated on the next visit', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    hub.faults.staticDelayMs['sw.js'] = 4000; // the worker takes control late: the user is first
    let navigations = 0;
    page.on('framenavigated', (f) => f === page.mainFrame() && navigations++);
    await page.goto(pageUrl(hub));
    await page.locator('[data-quant="IQ1_S"]').click();
    await page.evaluate(() => (window.__before = true));
    await serviceWorkerReady(page);
    await page.waitForTimeout(500);
    assert.equal(navigations, 1, 'no reload under the user');
    assert.equal(await page.evaluate(() => window.__before), true, 'the same document');
    assert.equal(await page.evaluate(() => crossOriginIsolated), false);
    await page.goto(pageUrl(hub));
    assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'the next visit isolated');
  } finally {
    await b.close();
    await hub.close();
  }
});

test('<clef-chat> on a plain static page (no COOP/COEP): lazy download on click, events, an answer', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    const response = await page.goto(`${hub.url}/test/embed.html`);
    assert.equal(response.headers()['cross-origin-opener-policy'], undefined);
    assert.equal(response.headers()['cross-origin-embedder-policy'], undefined);
    assert.equal(await page.evaluate(() => crossOriginIsolated), false);
    const chat = page.locator('clef-chat');
    // Lazy: nothing is downloaded before the click.
    await chat.getByRole('button', { name: /Download and start/ }).waitFor();
    assert.match(await chat.locator('.clef-empty').innerText(), /Chat with Clef/);
    assert.equal(hub.log.length, 0, 'no model request before the click');
    assert.ok(await chat.getByRole('textbox', { name: 'Message' }).isDisabled());
    await chat.getByRole('button', { name: /Download and start/ }).click();
    await page.waitForFunction(() => window.events.some((e) => e.type === 'clef-ready'), null, { timeout: 30000 });
    await chat.getByText('Ask Clef anything').waitFor();
    const input = chat.getByRole('textbox', { name: 'Message' });
    assert.equal(await input.getAttribute('placeholder'), 'Ask the tiny model…');
    await input.fill('Hi there');
    await input.press('Enter');
    await page.waitForFunction(() => window.events.some((e) => e.type === 'clef-message' && e.detail.role === 'assistant'), null, { timeout: 30000 });
    const events = await page.evaluate(() => window.events);
    assert.ok(events.some((e) => e.type === 'clef-progress'));
    assert.deepEqual(events.find((e) => e.type === 'clef-ready').detail, { model: 'test-org/clef-flash-GGUF:IQ1_S', source: 'network' });
    assert.deepEqual(events.find((e) => e.type === 'clef-message').detail, { role: 'user', content: 'Hi there' });
    const answer = events.find((e) => e.type === 'clef-message' && e.detail.role === 'assistant').detail.content;
    assert.ok(answer.length > 0);
    assert.equal(events.filter((e) => e.type === 'clef-error').length, 0);
    // The answer is on screen, with its speed.
    await chat.locator('.clef-meta').getByText('24 tokens').waitFor();
    assert.match(await chat.locator('.clef-assistant .clef-meta').innerText(), /tok\/s/);
    assert.equal(await chat.locator('.clef-user .clef-bubble').innerText(), 'Hi there');
    // Themed by the page's CSS custom property.
    const accent = await chat.locator('.clef-send').evaluate((el) => getComputedStyle(el).backgroundColor);
    assert.equal(accent, 'rgb(47, 125, 109)');
    await shot(page, 'ui-embed-1280');
    await page.setViewportSize(PHONE);
    await page.waitForTimeout(150);
    await shot(page, 'ui-embed-390');

    // The example page of www/dist renders its lazy gate (the real model is not downloaded).
    await page.setViewportSize(DESKTOP);
    await page.goto(`${hub.url}/dist/embed-example.html`);
    await page.locator('clef-chat').getByRole('button', { name: /Download and start/ }).waitFor();
    assert.match(await page.locator('clef-chat .clef-empty').innerText(), /2\.55 GB/);
    await shot(page, 'ui-embed-example-1280');
    assert.deepEqual(b.logs.filter((l) => l.startsWith('pageerror')), []);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('chat view: streamed Markdown rendered safely, reasoning in a collapsible <details>, thinking toggle, settings sent', { skip, timeout: 30000 }, async () => {
  // The chat view (www/src/app/chat.ts) on its own, bundled here, with a scripted engine: the
  // fixture models' template has no <think> block, so reasoning is exercised with a fake stream.
  const { build } = await import('esbuild');
  const bundle = await build({
    stdin: { contents: "import { ChatView } from './chat.ts'; window.ChatView = ChatView;", resolveDir: join(repoRoot, 'www', 'src', 'app'), loader: 'ts' },
    bundle: true, format: 'esm', write: false, logLevel: 'silent',
  });
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    await page.goto(`${hub.url}/test/page.html`);
    await page.setContent(`<!doctype html><html><head><link rel="stylesheet" href="${hub.url}/dist/app.css"></head>
      <body><main class="chat-host" id="host" style="height:100vh"></main></body></html>`);
    await page.addScriptTag({ type: 'module', content: bundle.outputFiles[0].text });
    await page.waitForFunction(() => !!window.ChatView);
    await page.evaluate(() => {
      const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
      const content = [
        'Here is **bold**, *italic*, `inline code` and a [link](https://example.com) and [a bad one](javascript:alert(1)).\n\n',
        '- one\n- two\n  - nested\n\n1. first\n2. second\n\n',
        '```js\nconst x = 1 < 2 && "ok";\n```\n\n',
        '<img src=x onerror="window.pwned=1"> <script>window.pwned=2</script>\n\n',
        '| quant | size |\n|---|---:|\n| IQ2_M | 3.36 GB |\n',
      ];
      window.bodies = [];
      window.thinkingSeen = new Promise((resolve) => { window.seeThinking = resolve; });
      const engine = {
        chat: {
          completions: {
            create: async (body) => {
              window.bodies.push(JSON.parse(JSON.stringify({ ...body, signal: undefined })));
              return (async function* () {
                yield { choices: [{ delta: { role: 'assistant', content: '' }, finish_reason: null }] };
                if (body.enable_thinking) {
                  for (const r of ['The user wants ', 'a **demo** of Markdown.']) {
                    await sleep(30);
                    yield { choices: [{ delta: { reasoning_content: r }, finish_reason: null }] };
                  }
                  // Still thinking until the test has seen it (on a loaded machine the 30 ms
                  // before the first answer chunk passed before the check looked).
                  await window.thinkingSeen;
                }
                for (const c of content) {
                  await sleep(30);
                  yield { choices: [{ delta: { content: c }, finish_reason: null }] };
                }
                yield {
                  choices: [{ delta: {}, finish_reason: 'stop' }],
                  usage: { prompt_tokens: 31, completion_tokens: 120, total_tokens: 151, prompt_tokens_details: { cached_tokens: 0 }, prompt_ms: 420, completion_ms: 9600, prompt_tokens_per_second: 73.8, completion_tokens_per_second: 12.5 },
                };
              })();
            },
          },
        },
      };
      const settings = { temperature: 0.6, top_p: 0.95, max_tokens: 512, system: 'Be brief.', thinking: false };
      window.view = new window.ChatView(document.getElementById('host'), {
        getEngine: () => engine, getSettings: () => settings, onThinking: (on) => { settings.thinking = on; },
      });
      window.view.setReady(true);
    });
    await page.getByRole('button', { name: 'Think' }).click();
    assert.equal(await page.getByRole('button', { name: 'Think' }).getAttribute('aria-pressed'), 'true');
    const input = page.getByRole('textbox', { name: 'Message' });
    await input.fill('Show me some Markdown');
    await input.press('Enter');
    const a = page.locator('.clef-assistant').last();
    await a.locator('.clef-think summary').getByText('Thinking…').waitFor();
    await page.evaluate(() => window.seeThinking());
    await a.locator('.clef-meta:not([hidden])').waitFor();
    // The request: history with the system prompt, sampling settings, thinking on.
    const body = await page.evaluate(() => window.bodies[0]);
    assert.deepEqual(body.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Show me some Markdown' }]);
    assert.equal(body.enable_thinking, true);
    assert.equal(body.temperature, 0.6);
    assert.equal(body.max_tokens, 512);
    assert.equal(body.stream, true);
    // Reasoning: collapsed, "Thought for …", opens on click.
    const think = a.locator('details.clef-think');
    assert.match(await think.locator('summary').innerText(), /Thought for \d+ ms/);
    assert.equal(await think.evaluate((d) => d.open), false);
    await think.locator('summary').click();
    assert.equal(await think.locator('.clef-think-body strong').innerText(), 'demo');
    assert.match(await think.innerText(), /The user wants a demo of Markdown/);
    // Markdown.
    const md = a.locator('.clef-body');
    assert.equal(await md.locator('strong').first().innerText(), 'bold');
    assert.equal(await md.locator('em').first().innerText(), 'italic');
    assert.equal(await md.locator('p code').first().innerText(), 'inline code');
    assert.equal(await md.locator('a[href="https://example.com"][rel="noopener noreferrer"]').innerText(), 'link');
    assert.equal(await md.locator('a[href^="javascript"]').count(), 0);
    assert.deepEqual(await md.locator('ul > li').evaluateAll((l) => l.map((x) => x.firstChild.textContent)), ['one', 'two', 'nested']);
    assert.equal(await md.locator('ol > li').count(), 2);
    assert.equal(await md.locator('pre code.language-js').innerText(), 'const x = 1 < 2 && "ok";');
    assert.equal(await md.locator('table td').nth(1).innerText(), '3.36 GB');
    // Nothing the model writes becomes markup.
    assert.equal(await page.locator('#host img, #host script').count(), 0);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.match(await md.innerText(), /<img src=x onerror="window.pwned=1">/);
    assert.match(await a.locator('.clef-meta').innerText(), /12\.5 tok\/s.*120 tokens.*prompt 420 ms/s);
    await shot(page, 'ui-markdown-1280');
  } finally {
    await b.close();
    await hub.close();
  }
});

/** The chat view (www/src/app/chat.ts) bundled on its own, on a bare page with the app's CSS. */
async function chatViewPage(hub, page) {
  const { build } = await import('esbuild');
  const bundle = await build({
    stdin: { contents: "import { ChatView } from './chat.ts'; window.ChatView = ChatView;", resolveDir: join(repoRoot, 'www', 'src', 'app'), loader: 'ts' },
    bundle: true, format: 'esm', write: false, logLevel: 'silent',
  });
  await page.goto(`${hub.url}/test/page.html`);
  await page.setContent(`<!doctype html><html><head><link rel="stylesheet" href="${hub.url}/dist/app.css"></head>
    <body><main class="chat-host" id="host" style="height:100vh"></main></body></html>`);
  await page.addScriptTag({ type: 'module', content: bundle.outputFiles[0].text });
  await page.waitForFunction(() => !!window.ChatView);
}

test('chat view: tool calls as collapsed "called name(args)" blocks, JSON answers as code blocks, the tools setting checked', { skip, timeout: 30000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    await chatViewPage(hub, page);
    await page.evaluate(() => {
      const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
      const usage = { prompt_tokens: 40, completion_tokens: 30, total_tokens: 70, prompt_tokens_details: { cached_tokens: 0 }, prompt_ms: 300, completion_ms: 2000, prompt_tokens_per_second: 133, completion_tokens_per_second: 15 };
      // What each request answers: streamed pieces of content / tool calls, then a finish reason.
      const scripts = {
        tools: [
          { content: 'Let me check both.' },
          { tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '' } }] },
          { tool_calls: [{ index: 0, function: { arguments: '{"city":"Par' } }] },
          { tool_calls: [{ index: 0, function: { arguments: 'is","days":[1,2],"unit":"°C"}' } }] },
          { tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '{}' } }] },
          { finish: 'tool_calls' },
        ],
        json: [{ content: '{"name":"Ada",' }, { content: '"age":36,"score":1.50,"big":12345678901234567890,' }, { content: '"tags":["a","b"],"note":"x, y: {z}","empty":{}}' }, { finish: 'stop' }],
        cut: [{ content: '{"name":"Ad' }, { finish: 'length' }],
      };
      window.bodies = [];
      window.next = 'tools';
      const engine = {
        chat: {
          completions: {
            create: async (body) => {
              window.bodies.push(JSON.parse(JSON.stringify({ ...body, signal: undefined })));
              const script = scripts[window.next];
              return (async function* () {
                yield { choices: [{ delta: { role: 'assistant', content: '' }, finish_reason: null }] };
                for (const s of script) {
                  await sleep(25);
                  if (s.finish) yield { choices: [{ delta: {}, finish_reason: s.finish }], usage };
                  else yield { choices: [{ delta: s, finish_reason: null }] };
                }
              })();
            },
          },
        },
      };
      const tools = [
        { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
        { name: 'get_time' }, // a bare function: wrapped into OpenAI's shape
      ];
      window.settings = { temperature: 0.7, top_p: 0.8, max_tokens: 256, system: '', thinking: false, json: true, tools: JSON.stringify(tools, null, 2) };
      window.view = new window.ChatView(document.getElementById('host'), { getEngine: () => engine, getSettings: () => window.settings });
      window.view.setReady(true);
    });
    const input = page.getByRole('textbox', { name: 'Message' });
    const send = async (text) => {
      await input.fill(text);
      await input.press('Enter');
      const a = page.locator('.clef-assistant').last();
      await a.locator('.clef-meta:not([hidden]), .clef-error:not([hidden])').first().waitFor();
      await page.locator('.clef-send[aria-label="Send"]').waitFor();
      return a;
    };

    // Tools: the request carries them in OpenAI's shape (JSON output is off while tools are set).
    let a = await send('Weather in Paris, and the time?');
    let body = await page.evaluate(() => window.bodies.at(-1));
    assert.deepEqual(body.tools.map((t) => t.function.name), ['get_weather', 'get_time']);
    assert.deepEqual(body.tools[1], { type: 'function', function: { name: 'get_time' } });
    assert.equal(body.response_format, undefined);
    assert.equal((await a.locator('.clef-body').innerText()).trim(), 'Let me check both.');
    const calls = a.locator('details.clef-tool-call');
    assert.equal(await calls.count(), 2);
    assert.deepEqual(await calls.locator('summary').allInnerTexts(), ['called get_weather({"city":"Paris","days":[1,2],"unit":"°C"})', 'called get_time()']);
    assert.deepEqual(await calls.evaluateAll((ds) => ds.map((d) => d.open)), [false, false], 'collapsed by default');
    await calls.first().locator('summary').click();
    assert.equal(await calls.first().locator('pre code').innerText(), '{\n  "city": "Paris",\n  "days": [\n    1,\n    2\n  ],\n  "unit": "°C"\n}');
    assert.ok(await calls.first().getByRole('button', { name: 'Copy get_weather arguments' }).isVisible());
    assert.ok(await calls.nth(1).locator('pre').isHidden());
    assert.match(await page.locator('[aria-live]').innerText(), /called get_weather\(.*called get_time\(\)/);
    await shot(page, 'ui-toolcalls-1280');
    // On a phone the one-line summary is cut with an ellipsis; the arguments wrap inside their block.
    await page.setViewportSize(PHONE);
    const sig = calls.first().locator('summary');
    assert.ok(await sig.evaluate((el) => el.scrollWidth > el.clientWidth && getComputedStyle(el).textOverflow === 'ellipsis'));
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), 'no sideways scrolling');
    await shot(page, 'ui-toolcalls-390');
    await page.setViewportSize(DESKTOP);

    // The next turn sends the calls back in the history (OpenAI's assistant message with tool_calls).
    await page.evaluate(() => {
      window.next = 'json';
      window.settings.tools = '';
    });
    a = await send('Now describe Ada as JSON.');
    body = await page.evaluate(() => window.bodies.at(-1));
    assert.deepEqual(body.messages[1], {
      role: 'assistant', content: 'Let me check both.',
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":[1,2],"unit":"°C"}' } },
        { id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '{}' } },
      ],
    });
    // JSON: asked for with response_format, shown indented in a copyable code block, tokens as written.
    assert.deepEqual(body.response_format, { type: 'json_object' });
    assert.equal(body.tools, undefined);
    const block = a.locator('.clef-body .code-block');
    assert.equal(await block.locator('.code-head span').innerText(), 'JSON');
    assert.equal(await block.locator('pre code').innerText(),
      '{\n  "name": "Ada",\n  "age": 36,\n  "score": 1.50,\n  "big": 12345678901234567890,\n  "tags": [\n    "a",\n    "b"\n  ],\n  "note": "x, y: {z}",\n  "empty": {}\n}');
    assert.ok(await block.getByRole('button', { name: 'Copy JSON' }).isVisible());
    await shot(page, 'ui-json-answer-1280');

    // Cut short by the length limit: shown as written, marked incomplete.
    await page.evaluate(() => (window.next = 'cut'));
    a = await send('Again');
    assert.equal(await a.locator('.clef-body .code-head span').innerText(), 'JSON (incomplete)');
    assert.equal(await a.locator('.clef-body pre code').innerText(), '{"name":"Ad');
    assert.match(await a.locator('.clef-meta').innerText(), /Length limit/);

    // A tools setting that is not valid: a clear, typed error instead of a request.
    const before = await page.evaluate(() => window.bodies.length);
    await page.evaluate(() => (window.settings.tools = '[{"type": "function", "function": {"name": "bad name!"}}]'));
    a = await send('Try the tools');
    assert.equal(await page.evaluate(() => window.bodies.length), before, 'no request was made');
    const err = a.locator('.clef-error');
    assert.match(await err.innerText(), /That request was not accepted/);
    await err.locator('summary').click();
    assert.match(await err.innerText(), /bad_request.*Settings → Tools: item 1: "name" must be 1–64 letters/s);
  } finally {
    await b.close();
    await hub.close();
  }
});

test('chat page: Output settings (JSON toggle, tools checked as typed) and a JSON answer from the model', { skip, timeout: 60000 }, async () => {
  const hub = await startHubServer();
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize(DESKTOP);
    await firstVisit(page, pageUrl(hub));
    await page.locator('[data-quant="IQ1_S"]').click();
    await page.locator('.quant-item.is-selected').getByRole('button', { name: /Download/ }).click();
    await page.locator('#status-card').getByText('is ready').waitFor({ timeout: 30000 });

    await page.getByRole('button', { name: 'Settings' }).click();
    const dialog = page.getByRole('dialog', { name: 'Settings' });
    await dialog.waitFor();
    const tools = dialog.getByLabel('Tools (JSON)');
    const json = dialog.getByLabel('Answer in JSON');
    const error = dialog.locator('#s-tools-error');
    assert.ok(await error.isHidden());
    // Checked as typed: a clear error under the field; JSON output is off while tools are set.
    await tools.fill('[{"type": "function", "function": {"name": "get_weather"}');
    await error.waitFor();
    assert.match(await error.innerText(), /^Not valid JSON \(.+\)\. Answers are refused until it is fixed\.$/);
    assert.equal(await tools.getAttribute('aria-invalid'), 'true');
    await tools.fill('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]');
    assert.ok(await error.isHidden());
    assert.equal(await tools.getAttribute('aria-invalid'), 'false');
    assert.ok(await json.isDisabled());
    assert.match(await dialog.locator('#s-json-help').innerText(), /Off while tools are set/);
    let stored = await page.evaluate(() => JSON.parse(localStorage.getItem('clef.settings')));
    assert.match(stored.tools, /get_weather/);
    await shot(page, 'ui-settings-output-1280');
    await tools.fill('');
    assert.ok(await json.isEnabled());
    await json.check();
    await dialog.getByLabel('Max tokens', { exact: false }).fill('60');
    await dialog.getByRole('button', { name: 'Done' }).click();
    await dialog.waitFor({ state: 'hidden' });
    stored = await page.evaluate(() => JSON.parse(localStorage.getItem('clef.settings')));
    assert.equal(stored.json, true);
    assert.equal(stored.tools, '');

    // The tiny model writes under the JSON grammar: the answer is an object, shown indented.
    const input = page.getByRole('textbox', { name: 'Message' });
    await input.fill('Describe a cat as JSON.');
    await input.press('Enter');
    const a = page.locator('.clef-assistant').last();
    await a.locator('.clef-meta:not([hidden])').waitFor({ timeout: 30000 });
    await page.locator('.clef-send[aria-label="Send"]').waitFor({ timeout: 30000 });
    const head = await a.locator('.clef-body .code-head span').innerText();
    const code = await a.locator('.clef-body pre code').innerText();
    if (head === 'JSON') {
      const v = JSON.parse(code);
      assert.ok(v && typeof v === 'object' && !Array.isArray(v), code);
    } else {
      // 60 tokens were not enough to close it: shown as written, with the length tag.
      assert.equal(head, 'JSON (incomplete)');
      assert.match(await a.locator('.clef-meta').innerText(), /Length limit/);
      assert.ok(code.startsWith('{'), code);
    }
    await shot(page, 'ui-json-page-1280');
  } finally {
    await b.close();
    await hub.close();
  }
});
