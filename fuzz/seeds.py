#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from ../shared/fixtures.

  gguf_header    the header (up to the data section) of every qwen35-tiny GGUF with its tokenizer
                 arrays cut to 64 entries (~6.6 KB each: the whole structure, each file's tensor types),
                 and one 4 KiB prefix of a whole header (a file cut short)
  quant_kernels  [ggml type id u16][block-count byte][blocks]: the first blocks of every quantized
                 tensor type found in the fixtures (real blocks, as the models carry them)
  tokenizer      [flags][text] for every text of tokenizer/tokenizer_fixtures.json
  chat_template  [flags][role\0content\0reasoning\0…] conversations built from the same texts
  decide_request the request bodies of clef/A/requests.json (cases and error cases), compact and
                 indented, and a few bodies of each error class
Input formats: fuzz/src/lib.rs.
"""
import json, os, struct, sys
from pathlib import Path

root = Path(__file__).resolve().parent
fixtures = root.parent.parent / 'shared' / 'fixtures'
corpus = root / 'corpus'

def put(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)

FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
# ggml type id -> (elements, bytes) per block, for the types the fixtures use
BLOCK = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144),
         13: (256, 176), 14: (256, 210), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
         21: (256, 110), 22: (256, 82), 23: (256, 136), 29: (256, 56), 41: (128, 18), 42: (64, 18)}

def walk(b):
    """A GGUF's tensor table: [(type, n_elements, offset)] and the data section's start."""
    p = 24
    n_t, n_kv = struct.unpack_from('<QQ', b, 8)
    def string():
        nonlocal p
        n, = struct.unpack_from('<Q', b, p)
        p += 8 + n
    def value(t):
        nonlocal p
        if t in FIXED: p += FIXED[t]
        elif t == 8: string()
        else:
            et, n = struct.unpack_from('<IQ', b, p)
            p += 12
            for _ in range(n): value(et)
    align = 32
    for _ in range(n_kv):
        k0 = p
        string()
        key = b[k0 + 8 : p].decode()
        t, = struct.unpack_from('<I', b, p)
        p += 4
        v0 = p
        value(t)
        if key == 'general.alignment': align, = struct.unpack_from('<I', b, v0)
    tensors = []
    for _ in range(n_t):
        string()
        nd, = struct.unpack_from('<I', b, p)
        dims = struct.unpack_from(f'<{nd}Q', b, p + 4)
        p += 4 + 8 * nd
        ty, off = struct.unpack_from('<IQ', b, p)
        p += 12
        n = 1
        for d in dims: n *= d
        tensors.append((ty, n, off))
    return tensors, (p + align - 1) // align * align, p

def small_vocab(b, keep=64):
    """The same header with the tokenizer arrays cut to `keep` entries (a ~10 KB seed: fast to mutate)."""
    n_t, n_kv = struct.unpack_from('<QQ', b, 8)
    out = bytearray(b[:24])
    p = 24
    for _ in range(n_kv):
        k0 = p
        n, = struct.unpack_from('<Q', b, p)
        key = b[p + 8 : p + 8 + n].decode()
        p += 8 + n
        t, = struct.unpack_from('<I', b, p)
        p += 4
        if t == 9:
            et, cnt = struct.unpack_from('<IQ', b, p)
            q = p + 12
            items = []
            for _ in range(cnt):
                s0 = q
                if et == 8:
                    m, = struct.unpack_from('<Q', b, q)
                    q += 8 + m
                else:
                    q += FIXED[et]
                items.append(b[s0:q])
            k = min(cnt, keep) if key.startswith('tokenizer.') else cnt
            out += b[k0 : p] + struct.pack('<IQ', et, k) + b''.join(items[:k])
            p = q
        else:
            if t in FIXED: p += FIXED[t]
            else:
                m, = struct.unpack_from('<Q', b, p)
                p += 8 + m
            out += b[k0:p]
    _, _, table_end = walk(b)
    out += b[p:table_end]
    out += bytes(-len(out) % 32)  # the data section starts aligned (general.alignment: 32 here)
    return bytes(out)

files = sorted((fixtures / 'qwen35-tiny').glob('A-*.gguf'))
seen = set()
for f in files:
    raw = f.read_bytes()
    tensors, data, _ = walk(raw)
    # Whole headers (the 8192-token vocabulary makes them ~260 KB) would be cut at tests/fuzz.sh's
    # -max_len and cost every execution time for arrays the reader treats alike: keep 64 entries.
    put('gguf_header', f'{f.stem}.small', small_vocab(raw))
    if f.stem == 'A-F32':
        put('gguf_header', f'{f.stem}.prefix4k', raw[:4096])
    for ty, n, off in tensors:
        if ty not in BLOCK or ty in seen:
            continue
        seen.add(ty)
        elems, size = BLOCK[ty]
        nbytes = n // elems * size
        put('quant_kernels', f'type{ty}', struct.pack('<HB', ty, 0) + raw[data + off : data + off + min(nbytes, 8 * 1024)])

texts = [c['text'] for c in json.load(open(fixtures / 'tokenizer' / 'tokenizer_fixtures.json'))['cases']]
for i, t in enumerate(texts):
    b = t.encode('utf-8', 'surrogatepass')
    put('tokenizer', f'text{i:03}', bytes([i % 4]) + b)
    if i % 4 == 0:
        msgs = [b'\x00', b'', b'', b'\x01', b, b'', b'\x02', texts[(i + 1) % len(texts)].encode('utf-8', 'surrogatepass'), b'thinking']
        put('chat_template', f'chat{i:03}', bytes([i % 32]) + b'\x00'.join(msgs))
reqs = json.load(open(fixtures / 'clef' / 'A' / 'requests.json'))
bodies = [c['request'] for c in reqs['cases'] + reqs['error_cases']]
for i, r in enumerate(bodies):
    put('decide_request', f'req{i:02}', json.dumps(r, ensure_ascii=False, separators=(',', ':')).encode())
    put('decide_request', f'req{i:02}.indented', json.dumps(r, indent=1).encode())
for i, b in enumerate([b'{', b'[1]', b'{"state":"s","state":"t","questions":{}}', b'{"state":"s","questions":{}}',
                       b'{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}',
                       b'{"state":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"questions":{"q":{"type":"noul","instructions":"x"}}}']):
    put('decide_request', f'bad{i}', b)
print(f'seeds: {len(files)} GGUF headers, {len(seen)} block types, {len(texts)} texts, {len(bodies)} requests -> {corpus}', file=sys.stderr)
