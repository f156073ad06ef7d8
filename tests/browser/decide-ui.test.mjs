// The chat page's "Decide" view (www/src/app/decide.ts) in headless Chromium against hub-server.mjs,
// in the style of ui.test.mjs. On the head-less F32 backbone of the decision fixtures
// (test-org/clef-flash-GGUF:F32) the README request is built in the question builder (the request
// JSON it writes is checked); without a head the answers are approximate (badge, a bar for every
// option); "Get the decision head" fetches fixture A's joint_head.safetensors from the Hub stand-in
// (as Cloudflare/clef-flash), and the bars must then show llama.cpp's probabilities
// (../shared/fixtures/clef/A, case A1). Screenshots go to tests/artifacts/ (1280×800 light and
// dark, 390×844).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer } from './hub-server.mjs';
import { launch, repoRoot, skipReason } from './helpers.mjs';

const skip = skipReason();
const REPO = 'test-org/clef-flash-GGUF';
const artifacts = join(repoRoot, 'tests', 'artifacts');
mkdirSync(artifacts, { recursive: true });
const shot = (page, name) => page.screenshot({ path: join(artifacts, `${name}.png`) });
/** The answers in view (no smooth scrolling left), then a screenshot. */
async function shotAnswers(page, name) {
  await page.locator('.d-results').evaluate((e) => {
    const host = document.getElementById('decide');
    host.scrollTo({ top: e.getBoundingClientRect().top - host.getBoundingClientRect().top + host.scrollTop - 12, behavior: 'instant' });
  });
  await page.waitForTimeout(400);
  await shot(page, name);
}
const gen = join(repoRoot, 'target', 'clef-fixtures');
if (!skip && !existsSync(join(gen, 'A-head', 'joint_head.safetensors'))) {
  execFileSync('bash', [join(repoRoot, 'tools/make_clef_fixtures.sh'), gen], { cwd: repoRoot, stdio: 'inherit' });
}
const A1 = skip ? null : JSON.parse(readFileSync(join(repoRoot, '..', 'shared', 'fixtures', 'clef', 'A', 'requests.json'), 'utf8')).cases.find((c) => c.id === 'A1-readme');

/** The answers on the page: per question its verdict and its bars {option: {p, width, text}}. */
async function answers(page) {
  return page.locator('.d-answer').evaluateAll((els) => Object.fromEntries(els.map((a) => [a.dataset.question, {
    verdict: a.querySelector('.d-verdict-value').textContent.trim(),
    conf: a.querySelector('.d-conf').textContent.trim(),
    bars: Object.fromEntries([...a.querySelectorAll('.d-bar')].map((b) => [b.dataset.option, {
      p: Number(b.dataset.p), width: parseFloat(b.querySelector('.d-track > i').style.width), text: b.querySelector('.d-pct').textContent, top: b.classList.contains('is-top'),
    }])),
  }])));
}

/** Fills the builder with the README request through its controls (as a person would). */
async function buildReadmeRequest(page, view) {
  await view.getByRole('button', { name: 'Clear' }).click();
  await view.getByRole('textbox', { name: 'State', exact: true }).fill(A1.request.state);
  const q = (i) => view.locator('.d-q').nth(i);
  // route: a choice over three teams (two option rows come with it, one more is added).
  await view.getByRole('button', { name: 'Add a choice question' }).click();
  await q(0).getByLabel('Name of question 1', { exact: true }).fill('route');
  await q(0).locator('.d-instr').fill('Which team should handle this?');
  await q(0).getByLabel('Option 1 of question 1', { exact: true }).fill('billing');
  await q(0).getByLabel('Option 2 of question 1', { exact: true }).fill('shipping');
  await q(0).getByRole('button', { name: 'Add option' }).click();
  await q(0).getByLabel('Option 3 of question 1', { exact: true }).fill('technical');
  // angry: yes / no with the template's default descriptions.
  await view.getByRole('button', { name: 'Add a yes / no question' }).click();
  await q(1).getByLabel('Name of question 2', { exact: true }).fill('angry');
  await q(1).locator('.d-instr').fill('Is the customer angry?');
  // urgency: a score over four levels (three come with it).
  await view.getByRole('button', { name: 'Add a score question' }).click();
  await q(2).getByLabel('Name of question 3', { exact: true }).fill('urgency');
  await q(2).locator('.d-instr').fill('How urgent is this?');
  await q(2).getByRole('button', { name: 'Add level' }).click();
  for (const [i, level] of A1.request.questions.urgency.criteria.entries()) await q(2).getByLabel(`Level ${i} of question 3`, { exact: true }).fill(level);
}

test('decide view: the builder makes the README request; approximate badge without a head; with the head fetched the bars show llama.cpp\'s probabilities; screenshots', { skip, timeout: 120000 }, async () => {
  const hub = await startHubServer({
    repos: { 'Cloudflare/clef-flash': { 'joint_head.safetensors': join(gen, 'A-head', 'joint_head.safetensors'), 'joint_head_config.json': join(gen, 'A-head', 'joint_head_config.json') } },
  });
  const b = await launch(null);
  const { page } = b;
  try {
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${hub.url}/dist/?hub=${encodeURIComponent(hub.url)}&repo=${REPO}`);
    // (A first visit reloads itself once its service worker has taken control, to be cross-origin
    // isolated: waited for, so that no click is lost to it.)
    await page.waitForFunction(() => crossOriginIsolated, null, { timeout: 15000 });
    // The head-less F32 backbone, by name.
    await page.locator('#other-h').click();
    await page.locator('#other-model').fill(`${REPO}:F32`);
    await page.locator('#other-form').getByRole('button', { name: 'Load' }).click();
    await page.locator('#status-card').getByText('is ready').waitFor({ timeout: 30000 });

    // The Decide tab: its own view (the address says #decide), the chat hidden.
    await page.getByRole('tab', { name: 'Decide' }).click();
    const view = page.locator('#decide');
    await view.getByRole('heading', { name: 'Decide' }).waitFor();
    assert.equal(await page.locator('#chat').isVisible(), false);
    assert.equal(new URL(page.url()).hash, '#decide');
    await view.locator('.d-approx-note').getByText(/no decision head/).waitFor();

    await buildReadmeRequest(page, view);
    // The request JSON the builder wrote: the README request, questions in the listed order.
    const json = JSON.parse(await view.locator('.d-json code').textContent());
    assert.deepEqual(json, A1.request);
    assert.deepEqual(Object.keys(json.questions), ['route', 'angry', 'urgency']);

    // Without a head: the label readout's answers, marked approximate; every option has a bar.
    await view.getByRole('button', { name: 'Decide', exact: true }).click();
    await view.locator('.d-results .d-answer').first().waitFor({ timeout: 30000 });
    await view.locator('.d-summary .badge.approx').waitFor();
    const approx = await answers(page);
    assert.deepEqual(Object.keys(approx), ['route', 'angry', 'urgency']);
    assert.deepEqual(Object.keys(approx.route.bars), ['billing', 'shipping', 'technical']);
    assert.deepEqual(Object.keys(approx.urgency.bars), ['0', '1', '2', '3']);
    for (const a of Object.values(approx)) {
      const ps = Object.values(a.bars).map((x) => x.p);
      assert.ok(Math.abs(ps.reduce((s, p) => s + p, 0) - 1) < 1e-9);
    }
    await shotAnswers(page, 'decide-approximate-1280');

    // Fetch the head (Hub default repo): the badge goes, the joint head answers as llama.cpp.
    await view.getByRole('button', { name: 'Get the decision head' }).click();
    await view.locator('.d-status').getByText(/joint decision head/).waitFor({ timeout: 30000 });
    await view.getByRole('button', { name: 'Decide', exact: true }).click();
    await page.waitForFunction(() => !document.querySelector('.d-summary .badge.approx') && document.querySelector('.d-answer'), null, { timeout: 30000 });
    const got = await answers(page);
    const want = A1.response.answers;
    for (const [id, a] of Object.entries(want)) {
      const probs = a.type === 'noul' ? { true: a.noul, false: 1 - a.noul } : a.probabilities;
      for (const [k, p] of Object.entries(probs)) {
        const bar = got[id].bars[k];
        assert.ok(Math.abs(bar.p - p) <= 2e-5, `${id}.${k}: ${bar.p} vs llama.cpp ${p}`);
        assert.ok(Math.abs(bar.width - p * 100) < 0.01, `${id}.${k}: bar width ${bar.width}%`);
        assert.equal(bar.text, `${(bar.p * 100).toFixed(1)}%`);
      }
    }
    assert.equal(got.route.verdict, 'technical');
    assert.ok(got.route.bars.technical.top);
    assert.equal(got.route.conf, `${Math.floor(want.route.confidence * 100)}% confidence`);
    assert.equal(got.angry.verdict, 'No');
    assert.match(got.urgency.verdict, /^1\.43\s+on 0–3$/);
    assert.equal(got.urgency.conf, `${Math.floor(want.urgency.confidence * 100)}% confidence`);
    // The time the request took, and its tokens.
    const summary = await view.locator('.d-summary').innerText();
    assert.match(summary, /\d+ ms|\d+\.\d s/);
    assert.match(summary, /422 prompt tokens/);
    await shotAnswers(page, 'decide-1280');
    // Dark theme (the toggle goes automatic → light → dark), then back.
    const theme = page.locator('#theme-toggle');
    await theme.click();
    await theme.click();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    await shotAnswers(page, 'decide-dark-1280');
    await theme.click();

    // A draft the page refuses before the engine: the field is marked and focused.
    const name = view.locator('.d-q').nth(1).getByLabel('Name of question 2', { exact: true });
    await name.fill('route');
    await view.getByRole('button', { name: 'Decide', exact: true }).click();
    await view.locator('.d-problem').getByText('Two questions are named “route”.').waitFor();
    assert.equal(await name.getAttribute('aria-invalid'), 'true');
    await name.fill('angry');

    // Phone width: one column, the bars still readable.
    await page.setViewportSize({ width: 390, height: 844 });
    await shotAnswers(page, 'decide-390');
    // Back to the chat.
    await page.getByRole('tab', { name: 'Chat' }).click();
    assert.equal(await view.isVisible(), false);
    assert.ok(await page.locator('#chat').isVisible());
    assert.deepEqual(b.logs.filter((l) => /pageerror|error:/.test(l) && !/favicon|service worker/i.test(l)), []);
  } finally {
    await b.close();
    await hub.close();
  }
});
