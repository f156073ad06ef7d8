#!/usr/bin/env python3
"""Checks tools/make_synthetic.py against independent references:

1. types: every role's types in the 32-layer file against the spec's full mix matrix (../shared/spec/
   qwen35.md, Appendix A: `q6_k[12] / q4_k[12]` = how many tensors of each type, `q5_k[L0-3]` = which layers).
2. sizes: the 32-layer file of every mix against the size the model card gives for the real file
   (../shared/seed/clef-flash-GGUF-model-card.md, GiB), within 1 % (observed: ≤ 0.25 %). A wrong block
   size moves the total by more than that.
3. loading: a 2-layer file of every mix, written and then read by the native CLI (`clef info`: the
   header parses, the per-type byte counts computed from the runtime's own block table equal the
   generator's, and `clef logits --tokens 1,2`: every weight loads, a forward pass runs and all
   248320 logits are finite — a non-finite fp16 scale or a malformed block would show as null).
4. weight scale: every quantized type's random weights, dequantized by gguf-py (an independent
   implementation), have an RMS within 25 % of a real checkpoint's 0.02 — larger ones blow a model's
   activations up into subnormal floats, which distorts every speed measurement made with the files.

Usage: python3 tools/test_make_synthetic.py [--mix Q4_K_M ...] [--sizes-only] [--dir DIR] [--clef PATH]

Slow (every mix writes and loads a 0.6–5 GiB file: ~10–20 min for all 30 on 2 cores; --dir /dev/shm
avoids the disk), so it is not part of tests/run.sh. Exit status 1 on any failure.
"""
import argparse, json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_synthetic as ms  # noqa: E402

CARD = os.path.join(ROOT, "..", "shared", "seed", "clef-flash-GGUF-model-card.md")
SPEC = os.path.join(ROOT, "..", "shared", "spec", "qwen35.md")
# Appendix A's columns (after the file type) = the last part of a tensor's name.
APPENDIX_ROLES = ("token_embd", "output", "attn_qkv", "attn_gate", "ssm_out", "ssm_alpha", "ssm_beta", "attn_q",
                  "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
TOLERANCE = 0.01
TEST_LAYERS = 2


def card_sizes():
    """{quant: GiB} from the card's file table (`| clef-flash-Q4_K_M.gguf | 5.24 | … |`)."""
    sizes = {}
    for line in open(CARD, encoding="utf-8"):
        m = re.match(r"\|\s*clef-flash-([A-Za-z0-9_]+)\.gguf\s*\|\s*([0-9.]+)\s*\|", line)
        if m:
            sizes[m.group(1)] = float(m.group(2))
    return sizes


def appendix_mixes():
    """{quant: {role: cell}} from the spec's Appendix A table."""
    text = open(SPEC, encoding="utf-8").read()
    table = text[text.index("## Appendix A"):]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(APPENDIX_ROLES) + 2 and re.fullmatch(r"[A-Z0-9_]+", cells[0]) and cells[0] != "file":
            rows[cells[0]] = dict(zip(APPENDIX_ROLES, cells[1:-1]))
    return rows


def role_of(name):
    """`blk.3.attn_q.weight` → (3, "attn_q"); `output.weight` → (None, "output"); None for F32-only tensors."""
    m = re.fullmatch(r"(?:blk\.(\d+)\.)?(\w+)\.weight", name)
    if not m or m.group(2) not in APPENDIX_ROLES:
        return None
    return (int(m.group(1)) if m.group(1) else None), m.group(2)


def check_types(mixes):
    """Each role's types in the 32-layer file against the Appendix A cell: `t` (all), `t[N]` (N tensors),
    `t[La-b]` (exactly the role's tensors of layers a..b)."""
    spec = appendix_mixes()
    failures = []
    for q in mixes:
        if q not in spec:
            failures.append(f"{q}: not in the spec's Appendix A")
            continue
        by_role = {}
        for name, ty, _ in ms.tensors(q, ms.REAL_LAYERS):
            r = role_of(name)
            if r:
                by_role.setdefault(r[1], []).append((r[0], ty))
        for role, cell in spec[q].items():
            have = by_role[role]
            for part in cell.split("/"):
                m = re.fullmatch(r"([a-z0-9_]+)(?:\[(L(\d+)-(\d+)|\d+)\])?", part.strip())
                if not m:
                    failures.append(f"{q} {role}: cannot read the spec cell '{cell}'")
                    break
                ty = m.group(1).upper()
                with_ty = [layer for layer, t in have if t == ty]
                if m.group(2) is None:
                    ok = len(with_ty) == len(have)
                elif m.group(3) is None:
                    ok = len(with_ty) == int(m.group(2))
                else:
                    lo, hi = int(m.group(3)), int(m.group(4))
                    ok = with_ty == [layer for layer, _ in have if lo <= layer <= hi]
                if not ok:
                    failures.append(f"{q} {role}: spec '{cell}', generator {have}")
                    break
    print(f"types: {len(mixes)} mixes against the spec's Appendix A, {len(failures)} mismatches")
    return failures


def check_sizes(mixes, vocab):
    card = card_sizes()
    failures = []
    print("| file type | synthetic GiB (32 layers) | card GiB | difference |")
    print("|---|---|---|---|")
    for q in mixes:
        got = ms.layout(q, ms.REAL_LAYERS, *vocab)[2] / 2**30
        if q not in card:
            failures.append(f"{q}: not in the model card")
            continue
        diff = got / card[q] - 1
        print(f"| {q} | {got:.3f} | {card[q]:.2f} | {diff * 100:+.2f} % |")
        if abs(diff) > TOLERANCE:
            failures.append(f"{q}: {got:.3f} GiB vs the card's {card[q]:.2f} GiB ({diff * 100:+.2f} %)")
    return failures


def check_weight_scale(mixes):
    """The RMS of each quantized type's weights (types gguf-py can dequantize) near ms.WEIGHT_RMS."""
    types = sorted({ty for q in mixes for _, ty, _ in ms.tensors(q, ms.REAL_LAYERS)} - {"F32", "BF16"})
    failures = []
    for ty in types:
        try:
            rms = ms.weight_rms(ty)
        except (KeyError, NotImplementedError):
            print(f"weight scale: {ty}: gguf-py cannot dequantize it, not checked")
            continue
        ok = abs(rms / ms.WEIGHT_RMS - 1) <= 0.25
        print(f"weight scale: {ty}: RMS {rms:.4f} {'ok' if ok else 'FAILED'}")
        if not ok:
            failures.append(f"{ty}: weight RMS {rms:.4f}, want {ms.WEIGHT_RMS} ± 25 %")
    return failures


def clef(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"clef {' '.join(args[:1])}: exit {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def check_load(q, binary, workdir, vocab_gguf, vocab):
    """Writes a 2-layer file of mix q, reads it back with the native CLI; returns failure strings."""
    path = os.path.join(workdir, f"synthetic-{q}-{TEST_LAYERS}L.gguf")
    fails = []
    try:
        subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic.py"), q, path, "--layers", str(TEST_LAYERS),
                        "--vocab-gguf", vocab_gguf], check=True, capture_output=True)
        _, ts, size = ms.layout(q, TEST_LAYERS, *vocab)
        info = clef(binary, "info", "--model", path)
        want = {}
        for name, ty, shape in ts:
            c, b = want.get(ty, (0, 0))
            want[ty] = (c + 1, b + ms.tensor_bytes(ty, shape))
        got = {ty: (int(v["tensors"]), int(v["bytes"])) for ty, v in info["types"].items()}
        if got != want:
            fails.append(f"{q}: tensors/bytes per type: runtime {got}, generator {want}")
        if int(info["file_size"]) != size or os.path.getsize(path) != size:
            fails.append(f"{q}: file size: runtime {info['file_size']}, generator {size}, on disk {os.path.getsize(path)}")
        hp = info["hyperparameters"]
        if (int(hp["n_layer"]), int(hp["n_vocab"]), int(hp["n_embd"])) != (TEST_LAYERS, ms.V, ms.D):
            fails.append(f"{q}: hyperparameters {hp}")
        logits = clef(binary, "logits", "--model", path, "--tokens", "1,2")["logits"][0]
        bad = sum(1 for v in logits if v is None)
        if len(logits) != ms.V or bad or max(logits) == min(logits):
            fails.append(f"{q}: logits: {len(logits)} values, {bad} not finite, range {min(v for v in logits if v is not None)}..{max(v for v in logits if v is not None)}")
        print(f"{q}: {'ok' if not fails else 'FAILED'} ({size / 2**30:.2f} GiB, {len(ts)} tensors, types {sorted(want)})", flush=True)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        fails.append(f"{q}: {e} {getattr(e, 'stderr', b'') or ''}")
        print(f"{q}: FAILED", flush=True)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mix", nargs="*", default=list(ms.MIX), help="file types to check (default: all)")
    ap.add_argument("--sizes-only", action="store_true", help="only the 32-layer types, sizes and weight scales against the spec, card and gguf-py (seconds)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None, help="where the 2-layer files go (deleted after each)")
    ap.add_argument("--clef", help="native clef binary (default: cargo build --release --bin clef)")
    ap.add_argument("--vocab-gguf", default=ms.default_vocab_gguf())
    a = ap.parse_args()
    unknown = [q for q in a.mix if q not in ms.MIX]
    if unknown:
        ap.error(f"unknown mix {unknown}; known: {' '.join(ms.MIX)}")
    vocab = ms.read_kv_section(a.vocab_gguf)
    failures = check_types(a.mix) + check_sizes(a.mix, vocab) + check_weight_scale(a.mix)
    if not a.sizes_only:
        binary = a.clef
        if binary is None:
            subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "clef"], cwd=ROOT, check=True)
            binary = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "clef")
        with tempfile.TemporaryDirectory(dir=a.dir, prefix="clef-synth-") as workdir:
            for q in a.mix:
                failures += check_load(q, binary, workdir, a.vocab_gguf, vocab)
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"{len(a.mix)} mixes, {len(failures)} failures", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
