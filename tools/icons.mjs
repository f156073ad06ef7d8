// Renders the PNG icons of the web app manifest from the SVGs (run once after editing them):
//   node tools/icons.mjs      → www/icon-192.png, www/icon-512.png, www/icon-maskable-512.png
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const www = join(dirname(fileURLToPath(import.meta.url)), '..', 'www');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: ['--no-sandbox'] });
for (const [svg, png, size] of [['icon.svg', 'icon-192.png', 192], ['icon.svg', 'icon-512.png', 512], ['icon-maskable.svg', 'icon-maskable-512.png', 512]]) {
  const page = await browser.newPage({ viewport: { width: size, height: size } });
  const src = readFileSync(join(www, svg), 'utf8');
  await page.setContent(`<style>html,body{margin:0;background:transparent}svg{display:block;width:${size}px;height:${size}px}</style>${src}`);
  await page.screenshot({ path: join(www, png), omitBackground: true });
  await page.close();
  console.log(`www/${png}`);
}
await browser.close();
