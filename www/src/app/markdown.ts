// A small, safe Markdown renderer for model output (streamed: it is re-run on the growing text).
//
// Safety: the text is HTML-escaped before any markup is recognised, so nothing the model writes can
// become a tag or an attribute; the only tags produced are the ones below, and links are kept only
// for http(s) and mailto URLs (rel="noopener noreferrer", target="_blank").
//
// Blocks: fenced code (``` or ~~~, with a language; an unclosed fence runs to the end, as while
// streaming), ATX headings, paragraphs with line breaks, > quotes, - * + and 1. lists (nested by
// indentation), GFM tables, --- rules. Inline: `code`, **bold**, *italic* / _italic_, ~~strike~~,
// [links](https://…), bare https:// URLs.

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

/** Inline markup of one escaped line (or several joined by \n). */
function inline(escaped: string): string {
  // Code spans first: their content is not parsed further.
  const codes: string[] = [];
  let s = escaped.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, _t, code: string) => {
    codes.push(`<code>${code.trim() === '' ? code : code.replace(/^ (.*) $/, '$1')}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const links: string[] = [];
  const keep = (html: string) => {
    links.push(html);
    return `\u0001${links.length - 1}\u0001`;
  };
  // [text](url "title") — url and text are already escaped (so attribute-safe).
  s = s.replace(/\[([^\]\n]+)\]\(\s*((?:[^\s()]|\([^\s()]*\))+)(?:\s+&quot;[^)]*&quot;)?\s*\)/g, (m, text: string, url: string) => {
    const raw = url.replace(/&amp;/g, '&');
    if (!SAFE_URL.test(raw)) return text;
    return keep(`<a href="${url}" target="_blank" rel="noopener noreferrer">${emphasis(text)}</a>`);
  });
  // Bare URLs.
  s = s.replace(/(^|[\s(])(https?:\/\/(?:[^\s<&]|&amp;)+)/g, (m, pre: string, url: string) => {
    const tail = /[.,:;!?)\]]+$/.exec(url)?.[0] ?? '';
    const u = url.slice(0, url.length - tail.length);
    return pre + keep(`<a href="${u}" target="_blank" rel="noopener noreferrer">${u}</a>`) + tail;
  });
  s = emphasis(s);
  s = s.replace(/\u0001(\d+)\u0001/g, (_, i) => links[Number(i)]);
  return s.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

function emphasis(s: string): string {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/__(?=\S)([\s\S]*?\S)__(?!\w)/g, '<strong>$1</strong>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>')
    .replace(/(^|[^_\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?![_\w])/g, '$1<em>$2</em>');
}

interface ListItem {
  indent: number;
  ordered: boolean;
  start: number;
  text: string[];
}

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}&gt;\s?(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function splitRow(line: string): string[] {
  let t = line.trim();
  if (t.startsWith('|')) t = t.slice(1);
  if (t.endsWith('|')) t = t.slice(0, -1);
  return t.split('|').map((c) => c.trim());
}

function renderList(items: ListItem[]): string {
  // Nest by indentation: an item indented more than the first one belongs to the previous item.
  let out = '';
  let i = 0;
  const base = items[0].indent;
  const ordered = items[0].ordered;
  const start = items[0].start;
  out += ordered ? `<ol${start !== 1 ? ` start="${start}"` : ''}>` : '<ul>';
  while (i < items.length) {
    const it = items[i];
    let j = i + 1;
    while (j < items.length && items[j].indent > base) j++;
    out += `<li>${inline(it.text.join('\n')).replace(/\n/g, '<br>')}`;
    if (j > i + 1) out += renderList(items.slice(i + 1, j));
    out += '</li>';
    i = j;
  }
  return out + (ordered ? '</ol>' : '</ul>');
}

/** Markdown → HTML (safe to assign to innerHTML). */
export function renderMarkdown(src: string): string {
  const lines = escapeHtml(src.replace(/\r\n?/g, '\n')).split('\n');
  const out: string[] = [];
  let para: string[] = [];
  const flushPara = () => {
    if (para.length) out.push(`<p>${inline(para.join('\n')).replace(/\n/g, '<br>')}</p>`);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m: RegExpExecArray | null;
    if ((m = FENCE.exec(line))) {
      flushPara();
      const fence = m[1];
      const lang = m[2];
      const body: string[] = [];
      i++;
      while (i < lines.length && !new RegExp(`^\\s{0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`).test(lines[i])) body.push(lines[i++]);
      const closed = i < lines.length;
      i++;
      out.push(
        `<div class="code-block${closed ? '' : ' open'}"><div class="code-head"><span>${lang || 'code'}</span>` +
          `<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>` +
          `<pre><code${lang ? ` class="language-${lang}"` : ''}>${body.join('\n')}</code></pre></div>`,
      );
      continue;
    }
    if (!line.trim()) {
      flushPara();
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      flushPara();
      const level = Math.min(6, m[1].length + 2);
      out.push(`<h${level}>${inline(m[2])}</h${level}>`);
      i++;
      continue;
    }
    if (RULE.test(line) && !LIST_ITEM.test(line.replace(/^(\s*[-*+])\s+[-*+]/, ''))) {
      flushPara();
      out.push('<hr>');
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flushPara();
      const body: string[] = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      out.push(`<blockquote>${renderMarkdownEscaped(body)}</blockquote>`);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      flushPara();
      const head = splitRow(line);
      const aligns = splitRow(lines[i + 1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : ''));
      i += 2;
      const rows: string[][] = [];
      while (i < lines.length && lines[i].includes('|') && lines[i].trim()) rows.push(splitRow(lines[i++]));
      const cell = (tag: string, c: string, k: number) => `<${tag}${aligns[k] ? ` style="text-align:${aligns[k]}"` : ''}>${inline(c)}</${tag}>`;
      out.push(
        `<div class="table-wrap"><table><thead><tr>${head.map((c, k) => cell('th', c, k)).join('')}</tr></thead><tbody>` +
          rows.map((r) => `<tr>${head.map((_, k) => cell('td', r[k] ?? '', k)).join('')}</tr>`).join('') +
          '</tbody></table></div>',
      );
      continue;
    }
    if (LIST_ITEM.test(line)) {
      flushPara();
      const items: ListItem[] = [];
      while (i < lines.length) {
        const l = lines[i];
        const lm = LIST_ITEM.exec(l);
        if (lm) {
          const marker = lm[2];
          const indent = lm[1].replace(/\t/g, '    ').length;
          const ordered = /\d/.test(marker);
          // Another kind of list at the same level starts a new list.
          if (items.length && indent <= items[0].indent && ordered !== items[0].ordered) break;
          items.push({ indent, ordered, start: parseInt(marker, 10) || 1, text: [lm[3]] });
          i++;
        } else if (l.trim() && /^\s+/.test(l) && items.length) {
          items[items.length - 1].text.push(l.trim()); // continuation line
          i++;
        } else if (!l.trim() && i + 1 < lines.length && LIST_ITEM.test(lines[i + 1])) {
          i++; // a loose list: blank line between items
        } else break;
      }
      out.push(renderList(items));
      continue;
    }
    para.push(line);
    i++;
  }
  flushPara();
  return out.join('');
}

/** Blocks of lines that are already escaped (blockquote content). */
function renderMarkdownEscaped(lines: string[]): string {
  const unescaped = lines.map((l) => l.replace(/&(amp|lt|gt|quot|#39);/g, (_, e) => ({ amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" })[e as 'amp']!));
  return renderMarkdown(unescaped.join('\n'));
}
