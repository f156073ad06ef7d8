// The chat's Markdown renderer (www/src/app/markdown.ts), bundled on the fly with esbuild: output
// shapes and safety (nothing in the text becomes a tag, an attribute or a script URL).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const entry = fileURLToPath(new URL('../../www/src/app/markdown.ts', import.meta.url));
const out = await build({ entryPoints: [entry], bundle: true, format: 'esm', write: false, logLevel: 'silent' });
const { renderMarkdown: md, escapeHtml } = await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString('base64')}`);

test('inline: bold, italic, strike, code, links', () => {
  assert.equal(md('a **b** *c* _d_ ~~e~~ `f<g>`'), '<p>a <strong>b</strong> <em>c</em> <em>d</em> <del>e</del> <code>f&lt;g&gt;</code></p>');
  assert.equal(md('snake_case_name and 2*3*4'), '<p>snake_case_name and 2*3*4</p>');
  assert.equal(md('`**not bold**`'), '<p><code>**not bold**</code></p>');
  assert.equal(md('[x](https://a.b/c?d=1&e=2)'), '<p><a href="https://a.b/c?d=1&amp;e=2" target="_blank" rel="noopener noreferrer">x</a></p>');
  assert.equal(md('see https://a.b/c.'), '<p>see <a href="https://a.b/c" target="_blank" rel="noopener noreferrer">https://a.b/c</a>.</p>');
  assert.equal(md('[w](https://en.wikipedia.org/wiki/Clef_(music))'), '<p><a href="https://en.wikipedia.org/wiki/Clef_(music)" target="_blank" rel="noopener noreferrer">w</a></p>');
});

test('blocks: headings, lists, quotes, rules, tables, line breaks', () => {
  assert.equal(md('# T\ntext\nmore'), '<h3>T</h3><p>text<br>more</p>');
  assert.equal(md('- a\n- b\n  - c\n\n1. x\n2. y'), '<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul><ol><li>x</li><li>y</li></ol>');
  assert.equal(md('3. three\n4. four'), '<ol start="3"><li>three</li><li>four</li></ol>');
  assert.equal(md('> quoted **text**'), '<blockquote><p>quoted <strong>text</strong></p></blockquote>');
  assert.equal(md('a\n\n---\n\nb'), '<p>a</p><hr><p>b</p>');
  assert.match(md('| a | b |\n|:--|--:|\n| 1 | 2 |'), /<table><thead><tr><th>a<\/th><th style="text-align:right">b<\/th><\/tr><\/thead><tbody><tr><td>1<\/td><td style="text-align:right">2<\/td><\/tr><\/tbody><\/table>/);
});

test('code blocks: fenced, with a language, unclosed while streaming', () => {
  const html = md('```python\nif a < b:\n    print("**x**")\n```');
  assert.match(html, /<pre><code class="language-python">if a &lt; b:\n    print\(&quot;\*\*x\*\*&quot;\)<\/code><\/pre>/);
  assert.match(md('```\nopen'), /class="code-block open"[\s\S]*<code>open<\/code>/);
});

test('safety: HTML is text, script URLs are not links', () => {
  for (const evil of ['<img src=x onerror=alert(1)>', '<script>alert(1)</script>', '"><svg onload=alert(1)>', '<a href="javascript:alert(1)">x</a>']) {
    const html = md(evil);
    assert.doesNotMatch(html, /<(img|script|svg|a )/i, html);
  }
  assert.equal(md('[x](javascript:alert(1))'), '<p>x</p>');
  assert.equal(md('[x](data:text/html,hi)'), '<p>x</p>');
  assert.doesNotMatch(md('[x](https://a.b/"onmouseover="alert(1))'), /"onmouseover/);
  assert.equal(escapeHtml(`<>&"'`), '&lt;&gt;&amp;&quot;&#39;');
});
