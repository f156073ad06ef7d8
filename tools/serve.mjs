// Serves the built static site (www/dist: the chat page, embed-example.html, the package) on
// http://127.0.0.1:PORT, like any static host: no COOP/COEP headers.
//
//   node tools/serve.mjs [--port 8080] [--model owner/repo:QUANT] [--fixtures]
//
// By default the page downloads models from the Hugging Face Hub (NANI-Nithin/clef-flash-GGUF).
// --fixtures also serves ../shared/fixtures/qwen35-tiny as a local Hub (test-org/clef-flash-GGUF,
// the tiny test models) and points the page at it: everything works without the internet.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startHubServer, fixturesDir, repoRoot } from '../tests/browser/hub-server.mjs';

const args = process.argv.slice(2);
const opt = (name, d) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] && !args[i + 1].startsWith('--') ? args[i + 1] : d;
};
const port = Number(opt('port', process.env.PORT ?? 8080));
const fixtures = args.includes('--fixtures');
const dist = join(repoRoot, 'www', 'dist');
if (!existsSync(join(dist, 'index.html'))) {
  console.error('tools/serve.mjs: www/dist is not built: run ./build.sh first');
  process.exit(1);
}
if (fixtures && !existsSync(fixturesDir)) {
  console.error(`tools/serve.mjs: --fixtures needs ${fixturesDir}`);
  process.exit(1);
}

// hub-server serves the fixtures' Hub routes (/{owner}/{repo}/resolve/…, /cdn/…, /api/…) beside the site.
const s = await startHubServer({ port, staticDirs: [['/', dist]] });
const model = opt('model', fixtures ? 'test-org/clef-flash-GGUF:IQ2_M' : 'NANI-Nithin/clef-flash-GGUF:IQ2_M');
const q = new URLSearchParams({ model });
if (fixtures) q.set('hub', s.url);
console.log(`clef-web: the chat page on ${s.url}/?${q.toString().replace(/%3A/g, ':').replace(/%2F/g, '/')}`);
console.log(`          <clef-chat> example: ${s.url}/embed-example.html`);
if (!fixtures) console.log('          (models come from huggingface.co; add --fixtures to use the local test models offline)');
console.log('          Ctrl+C to stop');
