#!/usr/bin/env python3
"""Synthetic Clef-Flash GGUFs: the real 9B shapes and per-tensor quant mix of a clef-flash file
(spec qwen35.md §6.2 and Appendix A: all 30 file types), the real 248k vocabulary (copied from the
vocab-only fixture), and random weights (valid blocks: every fp16 scale finite, weights of RMS ~0.02
as in a real checkpoint, see `scale_factor`). The real
files cannot be downloaded here; these stand in for memory, loading and speed measurements. Their
output is noise.

Usage: python3 tools/make_synthetic.py QUANT OUT.gguf [--layers N] [--vocab-gguf PATH]
       python3 tools/make_synthetic.py QUANT --size [--layers N]   (bytes the file would have; writes nothing)
       QUANT: a clef-flash file type (python3 tools/make_synthetic.py --help lists them)

With --layers N < 32 the file holds the first N blocks of the 9B, each with the types that block has
in the real 32-layer file (so layer-position rules such as "ffn_down of layers 0-3" keep their meaning
and a 32-layer file's first layers are the same tensors). tools/test_make_synthetic.py checks the
mixes: 32-layer sizes against the model card, 2-layer files loaded and run by the native CLI.
"""
import argparse, os, struct, sys
import numpy as np

# ggml type (spec §5.1/§5.2): (id, block elems, block bytes, byte offsets of the fp16 fields in a block)
TYPES = {
    "F32": (0, 1, 4, []), "BF16": (30, 1, 2, []),
    "Q4_0": (2, 32, 18, [0]), "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]), "Q5_1": (7, 32, 24, [0, 2]),
    "Q8_0": (8, 32, 34, [0]),
    "Q2_K": (10, 256, 84, [80, 82]), "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]), "Q5_K": (13, 256, 176, [0, 2]), "Q6_K": (14, 256, 210, [208]),
    "IQ2_XXS": (16, 256, 66, [0]), "IQ2_XS": (17, 256, 74, [0]), "IQ3_XXS": (18, 256, 98, [0]),
    "IQ1_S": (19, 256, 50, [0]), "IQ4_NL": (20, 32, 18, [0]), "IQ3_S": (21, 256, 110, [0]),
    "IQ2_S": (22, 256, 82, [0]), "IQ4_XS": (23, 256, 136, [0]), "IQ1_M": (29, 256, 56, []),
    "Q1_0": (41, 128, 18, [0]), "Q2_0": (42, 64, 18, [0]),
}

REAL_LAYERS = 32  # the 9B; layer-position rules below are those of the 32-layer file


# Layer-position rules of llama-quantize (spec §6.1), over the layer index i of the 32-layer model.
# Each attn_qkv (linear layers) / attn_v (full layers) is one "attn_v-like" tensor per layer, so
# their counter is the layer index too; ffn_down and ffn_gate/up count one per layer.
def use_more_bits(i, n=REAL_LAYERS):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


class ByLayer:
    """A role whose type depends on the layer: `hi` where `rule(i)` holds, `lo` elsewhere."""

    def __init__(self, rule, hi, lo):
        self.rule, self.hi, self.lo = rule, hi, lo

    def at(self, i):
        return self.hi if self.rule(i) else self.lo


def more_bits(hi, lo):  # use_more_bits(i, 32): layers 0-3, 6, 9, …, 24, 27-31
    return ByLayer(use_more_bits, hi, lo)


def first(n, hi, lo):  # layers 0 … n-1 (n = 32/8 = 4 or 32/16 = 2)
    return ByLayer(lambda i: i < n, hi, lo)


def edges(hi, lo):  # the first and last eighth: layers 0-3 and 28-31
    return ByLayer(lambda i: i < REAL_LAYERS // 8 or i >= 7 * REAL_LAYERS // 8, hi, lo)


ROLES = ("token_embd", "output", "attn_qkv", "other", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_up", "ffn_down")


def mix(*types):
    assert len(types) == len(ROLES)
    return dict(zip(ROLES, types))


# Per-file mix (spec §6.2 / Appendix A), per role: token_embd, output, attn_qkv (24 linear layers),
# other (attn_gate, ssm_out, ssm_alpha, ssm_beta), attn_q, attn_k, attn_v (8 full layers),
# attn_output, ffn_gate and ffn_up, ffn_down. Norms, ssm_a, ssm_dt.bias, ssm_conv1d are F32 in all.
MIX = {
    "BF16": mix(*["BF16"] * 10),
    "Q8_0": mix(*["Q8_0"] * 10),
    "Q6_K": mix(*["Q6_K"] * 10),
    "Q5_K_M": mix("Q5_K", "Q6_K", more_bits("Q6_K", "Q5_K"), "Q5_K", "Q5_K", "Q5_K", more_bits("Q6_K", "Q5_K"), "Q5_K", "Q5_K", more_bits("Q6_K", "Q5_K")),
    "Q5_K_S": mix("Q5_K", "Q6_K", *["Q5_K"] * 8),
    "Q5_1": mix("Q5_1", "Q6_K", *["Q5_1"] * 8),
    "Q5_0": mix("Q5_0", "Q6_K", *["Q5_0"] * 7, first(4, "Q5_1", "Q5_0")),
    "Q4_K_M": mix("Q4_K", "Q6_K", more_bits("Q6_K", "Q4_K"), "Q4_K", "Q4_K", "Q4_K", more_bits("Q6_K", "Q4_K"), "Q4_K", "Q4_K", more_bits("Q6_K", "Q4_K")),
    "Q4_K_S": mix("Q4_K", "Q6_K", first(4, "Q5_K", "Q4_K"), "Q4_K", "Q4_K", "Q4_K", first(4, "Q5_K", "Q4_K"), "Q4_K", "Q4_K", first(4, "Q5_K", "Q4_K")),
    "Q4_1": mix("Q4_1", "Q6_K", *["Q4_1"] * 8),
    "Q4_0": mix("Q4_0", "Q6_K", *["Q4_0"] * 7, first(4, "Q4_1", "Q4_0")),
    "IQ4_NL": mix("IQ4_NL", "Q6_K", "Q5_K", "IQ4_NL", "IQ4_NL", "IQ4_NL", "Q5_K", "IQ4_NL", "IQ4_NL", "IQ4_NL"),
    "IQ4_XS": mix("IQ4_XS", "Q6_K", "Q5_K", "IQ4_XS", "IQ4_XS", "IQ4_XS", "Q5_K", "IQ4_XS", "IQ4_XS", "IQ4_XS"),
    "Q3_K_L": mix("Q3_K", "Q6_K", "Q5_K", "Q3_K", "Q3_K", "Q3_K", "Q5_K", "Q5_K", "Q3_K", "Q5_K"),
    "Q3_K_M": mix("Q3_K", "Q6_K", first(2, "Q5_K", "Q4_K"), "Q3_K", "Q3_K", "Q3_K", first(2, "Q5_K", "Q4_K"), "Q4_K", "Q3_K", first(2, "Q5_K", "Q4_K")),
    "Q3_K_S": mix("Q3_K", "Q6_K", *["Q3_K"] * 8),
    "IQ3_M": mix("IQ3_S", "Q6_K", "Q4_K", "IQ3_S", "IQ3_S", "IQ3_S", "Q4_K", "Q4_K", "IQ3_S", first(4, "Q4_K", "IQ3_S")),
    "IQ3_S": mix("IQ3_S", "Q6_K", "Q4_K", "IQ3_S", "IQ3_S", "IQ3_S", "Q4_K", "IQ3_S", "IQ3_S", "IQ3_S"),
    "IQ3_XS": mix("IQ3_S", "Q6_K", "Q4_K", "IQ3_S", "IQ3_XXS", "IQ3_XXS", "Q4_K", "IQ3_S", edges("IQ3_S", "IQ3_XXS"), "IQ3_S"),
    "IQ3_XXS": mix("IQ3_S", "Q5_K", "Q4_K", "IQ3_XXS", "IQ2_S", "IQ2_S", "Q4_K", "IQ3_S", "IQ3_XXS", "IQ3_XXS"),
    "Q2_K": mix("Q2_K", "Q6_K", "Q4_K", "Q2_K", "Q2_K", "Q2_K", "Q4_K", "Q3_K", "Q2_K", "Q3_K"),
    "Q2_K_S": mix("Q2_K", "Q6_K", "Q4_K", "Q2_K", "Q2_K", "Q2_K", "Q4_K", "Q2_K", "Q2_K", first(4, "Q4_K", "Q2_K")),
    "IQ2_M": mix("IQ3_S", "Q5_K", "Q4_K", "IQ2_S", "IQ2_S", "IQ2_S", "Q4_K", "IQ3_S", "IQ2_S", first(4, "IQ3_S", "IQ2_S")),
    "IQ2_S": mix("IQ3_S", "Q5_K", "Q4_K", "IQ2_XS", "IQ2_XS", "IQ2_XS", "Q4_K", "IQ3_S", "IQ2_XS", first(4, "IQ3_S", "IQ2_XS")),
    "Q2_0": mix("Q4_K", "Q6_K", *["Q2_0"] * 8),
    "IQ2_XS": mix("Q2_K", "Q5_K", "Q4_K", "IQ2_XS", "IQ2_XS", "IQ2_XS", "Q4_K", "IQ2_XS", "IQ2_XS", first(4, "Q2_K", "IQ2_XS")),
    "IQ2_XXS": mix("Q2_K", "Q5_K", "Q4_K", "IQ2_XXS", "IQ2_XXS", "IQ2_XXS", "Q4_K", "IQ2_XXS", "IQ2_XXS", first(4, "Q2_K", "IQ2_XXS")),
    "IQ1_M": mix("Q2_K", "Q5_K", "Q4_K", "IQ1_M", "IQ1_M", "IQ1_M", "Q4_K", "IQ2_XXS", "IQ1_M", first(4, "Q2_K", "IQ1_M")),
    "IQ1_S": mix("Q2_K", "Q5_K", "Q4_K", "IQ1_S", "IQ1_S", "IQ1_S", "Q4_K", "IQ2_XXS", "IQ1_S", first(4, "Q2_K", "IQ1_S")),
    "Q1_0": mix("Q1_0", "Q6_K", *["Q1_0"] * 8),
}

# llama_ftype of each file type (general.file_type, spec §1.2).
FTYPE = {"BF16": 32, "Q8_0": 7, "Q6_K": 18, "Q5_K_M": 17, "Q5_K_S": 16, "Q5_1": 9, "Q5_0": 8, "Q4_K_M": 15,
         "Q4_K_S": 14, "Q4_1": 3, "Q4_0": 2, "IQ4_NL": 25, "IQ4_XS": 30, "Q3_K_L": 13, "Q3_K_M": 12, "Q3_K_S": 11,
         "IQ3_M": 27, "IQ3_S": 26, "IQ3_XS": 22, "IQ3_XXS": 23, "Q2_K": 10, "Q2_K_S": 21, "IQ2_M": 29, "IQ2_S": 28,
         "IQ2_XS": 20, "IQ2_XXS": 19, "IQ1_M": 31, "IQ1_S": 24, "Q1_0": 40, "Q2_0": 41}

D, F, V, HK, HV, DS, H, HKV, DH, K = 4096, 12288, 248320, 16, 32, 128, 16, 4, 256, 4


def read_kv_section(path):
    """Raw bytes of every tokenizer.* KV entry of a GGUF (copied verbatim) and their count."""
    b = open(path, "rb").read(64 << 20)
    assert b[:4] == b"GGUF"
    n_kv = struct.unpack_from("<Q", b, 16)[0]
    p, out, count = 24, bytearray(), 0

    def skip_value(p, t):
        fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t in fixed:
            return p + fixed[t]
        if t == 8:
            return p + 8 + struct.unpack_from("<Q", b, p)[0]
        assert t == 9
        et, n = struct.unpack_from("<IQ", b, p)
        p += 12
        if et in fixed:
            return p + fixed[et] * n
        for _ in range(n):
            p = skip_value(p, et)
        return p

    for _ in range(n_kv):
        start = p
        klen = struct.unpack_from("<Q", b, p)[0]
        key = b[p + 8:p + 8 + klen].decode()
        p += 8 + klen
        t = struct.unpack_from("<I", b, p)[0]
        p = skip_value(p + 4, t)
        if key.startswith("tokenizer."):
            out += b[start:p]
            count += 1
    return bytes(out), count


def kv(key, fmt_type, value):
    kb = key.encode()
    head = struct.pack("<Q", len(kb)) + kb
    if fmt_type == "u32":
        return head + struct.pack("<II", 4, value)
    if fmt_type == "f32":
        return head + struct.pack("<If", 6, value)
    if fmt_type == "str":
        vb = value.encode()
        return head + struct.pack("<IQ", 8, len(vb)) + vb
    if fmt_type == "i32[]":
        return head + struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)
    raise ValueError(fmt_type)


def tensors(quant, n_layer):
    """(name, ggml type, shape) of every tensor of an n_layer-block file, in file order."""
    m = MIX[quant]

    def ty(role, i=None):
        t = m[role]
        return t.at(i) if isinstance(t, ByLayer) else t

    yield "token_embd.weight", ty("token_embd"), (D, V)
    yield "output_norm.weight", "F32", (D,)
    yield "output.weight", ty("output"), (D, V)
    for i in range(n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", "F32", (D,)
        yield p + "post_attention_norm.weight", "F32", (D,)
        if (i + 1) % 4 != 0:
            yield p + "attn_qkv.weight", ty("attn_qkv", i), (D, 2 * HK * DS + HV * DS)
            yield p + "attn_gate.weight", ty("other"), (D, HV * DS)
            yield p + "ssm_beta.weight", ty("other"), (D, HV)
            yield p + "ssm_alpha.weight", ty("other"), (D, HV)
            yield p + "ssm_dt.bias", "F32", (HV,)
            yield p + "ssm_a", "F32", (HV,)
            yield p + "ssm_conv1d.weight", "F32", (K, 2 * HK * DS + HV * DS)
            yield p + "ssm_norm.weight", "F32", (DS,)
            yield p + "ssm_out.weight", ty("other"), (HV * DS, D)
        else:
            yield p + "attn_q.weight", ty("attn_q"), (D, 2 * H * DH)
            yield p + "attn_k.weight", ty("attn_k"), (D, HKV * DH)
            yield p + "attn_v.weight", ty("attn_v", i), (D, HKV * DH)
            yield p + "attn_q_norm.weight", "F32", (DH,)
            yield p + "attn_k_norm.weight", "F32", (DH,)
            yield p + "attn_output.weight", ty("attn_output"), (H * DH, D)
        yield p + "ffn_gate.weight", ty("ffn_gate_up", i), (D, F)
        yield p + "ffn_up.weight", ty("ffn_gate_up", i), (D, F)
        yield p + "ffn_down.weight", ty("ffn_down", i), (F, D)


def tensor_bytes(ty, shape):
    _, be, bb, _ = TYPES[ty]
    n = int(np.prod(shape))
    assert n % be == 0, (ty, shape)
    return n // be * bb


def random_f32(name, n, rng):
    """Values for the tensors that stay F32 (norms, ssm_a, ssm_dt.bias, ssm_conv1d)."""
    if name.endswith("ssm_a"):
        v = -rng.uniform(0.05, 1.0, n)
    elif "norm" in name:
        v = 1.0 + rng.normal(0, 0.1, n)
    elif "conv1d" in name:
        v = rng.normal(0, 0.2, n)
    else:
        v = rng.uniform(-0.5, 1.5, n)
    return v.astype("<f4").tobytes()


def random_bf16(n, rng, chunk=1 << 24):
    """BF16 weights ~ N(0, 0.02): the top 16 bits of f32 values (finite by construction), made in
    chunks (the embedding matrix alone has 10^9 of them)."""
    out = np.empty(n, dtype="<u2")
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        out[i:i + m] = (rng.standard_normal(m, dtype=np.float32) * np.float32(0.02)).view("<u4") >> 16
    return out


# RMS of the weights of a real checkpoint (N(0, 0.02) at initialisation; trained ones stay close).
WEIGHT_RMS = 0.02


def random_blocks(ty, n_blocks, rng, factor=1.0):
    """Random blocks of `ty` whose fp16 scales are ±[1, 8) (exponent field 15..17, random mantissa
    and sign) times `factor` (so is every weight: dequantisation is linear in the scales), rounded
    to fp16 — subnormal where small, as in real files."""
    def scales(bits):
        return (bits.view("<f2").astype(np.float32) * np.float32(factor)).astype("<f2").view("<u2")
    _, be, bb, f16s = TYPES[ty]
    blocks = rng.integers(0, 256, size=(n_blocks, bb), dtype=np.uint8)
    for off in f16s:
        old = blocks[:, off].astype(np.uint16) | (blocks[:, off + 1].astype(np.uint16) << 8)
        new = scales((old & 0x83FF) | ((15 + (old >> 10) % 3) << 10))
        blocks[:, off] = new & 0xFF
        blocks[:, off + 1] = new >> 8
    if ty == "IQ1_M":  # super-scale in the top nibbles of the 4 u16 scales
        u = scales((15 << 10) | rng.integers(0, 0x3FF, size=n_blocks, dtype=np.uint16))
        for k in range(4):
            blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | (((u >> (4 * k)) & 15) << 4).astype(np.uint8)
    return blocks


_FACTOR = {}


def scale_factor(ty):
    """What `ty`'s random blocks' scales are multiplied by for weights of RMS ~WEIGHT_RMS.

    Random codes under scales picked without regard to each type's layout gave weights of RMS 0.1
    to 50 depending on the type; a model built of them grows activations far beyond a trained
    model's (DeltaNet state values up to ~900) and leaves some of that state subnormal: slow on x86
    for every engine, by different amounts and depending on the tokens fed (native llama.cpp lost
    half its decode to it; BENCHMARKS.md "Where a prompt's time goes").
    Calibrated by dequantising sample blocks with gguf-py (types it does not know, Q1_0 / Q2_0:
    weights are small multiples of the scale, taken as RMS ≈ the scale's)."""
    if ty not in _FACTOR:
        sample = random_blocks(ty, 512, np.random.default_rng(1))
        try:
            from gguf import GGMLQuantizationType, quants
            w = quants.dequantize(sample, GGMLQuantizationType[ty]).astype(np.float64)
            rms = float(np.sqrt(np.mean(w * w)))
        except (ImportError, KeyError, NotImplementedError):
            off = TYPES[ty][3][0]
            d = sample[:, off:off + 2].copy().view("<f2").astype(np.float64)
            rms = float(np.sqrt(np.mean(d * d)))
        _FACTOR[ty] = WEIGHT_RMS / rms
    return _FACTOR[ty]


def weight_rms(ty, n_blocks=512):
    """The RMS of `ty`'s random weights as written (for checking `scale_factor`)."""
    from gguf import GGMLQuantizationType, quants
    b = random_blocks(ty, n_blocks, np.random.default_rng(2), scale_factor(ty))
    w = quants.dequantize(b, GGMLQuantizationType[ty]).astype(np.float64)
    return float(np.sqrt(np.mean(w * w)))


def random_data(name, ty, shape, rng):
    """The tensor's bytes (bytes or a numpy array: anything with the buffer protocol)."""
    n = int(np.prod(shape))
    if ty == "F32":
        return random_f32(name, n, rng)
    if ty == "BF16":
        return random_bf16(n, rng)
    return random_blocks(ty, n // TYPES[ty][1], rng, scale_factor(ty))


def metadata(quant, n_layer):
    return [
        kv("general.architecture", "str", "qwen35"),
        kv("general.name", "str", f"synthetic clef-flash {quant} (random weights)"),
        kv("general.file_type", "u32", FTYPE[quant]),
        kv("general.quantization_version", "u32", 2),
        kv("qwen35.block_count", "u32", n_layer),
        kv("qwen35.context_length", "u32", 262144),
        kv("qwen35.embedding_length", "u32", D),
        kv("qwen35.feed_forward_length", "u32", F),
        kv("qwen35.attention.head_count", "u32", H),
        kv("qwen35.attention.head_count_kv", "u32", HKV),
        kv("qwen35.attention.key_length", "u32", DH),
        kv("qwen35.attention.value_length", "u32", DH),
        kv("qwen35.attention.layer_norm_rms_epsilon", "f32", 1e-6),
        kv("qwen35.rope.freq_base", "f32", 1e7),
        kv("qwen35.rope.dimension_count", "u32", 64),
        kv("qwen35.rope.dimension_sections", "i32[]", [11, 11, 10, 0]),
        kv("qwen35.ssm.conv_kernel", "u32", K),
        kv("qwen35.ssm.state_size", "u32", DS),
        kv("qwen35.ssm.group_count", "u32", HK),
        kv("qwen35.ssm.time_step_rank", "u32", HV),
        kv("qwen35.ssm.inner_size", "u32", HV * DS),
        kv("qwen35.full_attention_interval", "u32", 4),
    ]


def layout(quant, n_layer, vocab_kv, n_vocab_kv):
    """The file's header (magic to the padding before the data) and its tensors; every tensor's data
    starts 32-aligned, the file ends with the last tensor's padding."""
    meta = metadata(quant, n_layer)
    ts = list(tensors(quant, n_layer))
    infos, offset = [], 0
    for name, ty, shape in ts:
        nb = name.encode()
        infos.append(struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(shape)) +
                     struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<IQ", TYPES[ty][0], offset))
        offset += (tensor_bytes(ty, shape) + 31) // 32 * 32
    header = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta) + n_vocab_kv) + b"".join(meta) + vocab_kv + b"".join(infos)
    header += b"\0" * ((-len(header)) % 32)
    return header, ts, len(header) + offset


def default_vocab_gguf():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "fixtures", "tokenizer", "qwen35-vocab.gguf")


def file_size(quant, n_layer=REAL_LAYERS, vocab_gguf=None):
    """Bytes of the file `make_synthetic.py quant OUT --layers n_layer` writes."""
    return layout(quant, n_layer, *read_kv_section(vocab_gguf or default_vocab_gguf()))[2]


def main():
    ap = argparse.ArgumentParser(description="Synthetic 9B-shaped clef-flash GGUF (random weights).")
    ap.add_argument("quant", choices=list(MIX), metavar="QUANT", help="file type: " + " ".join(MIX))
    ap.add_argument("out", nargs="?", help="output .gguf (not with --size)")
    ap.add_argument("--layers", type=int, default=REAL_LAYERS, help="blocks (1-32; the first N of the 9B)")
    ap.add_argument("--size", action="store_true", help="print the file's size in bytes and write nothing")
    ap.add_argument("--vocab-gguf", default=default_vocab_gguf())
    a = ap.parse_args()
    if not 1 <= a.layers <= REAL_LAYERS:
        ap.error(f"--layers must be 1..{REAL_LAYERS}")
    if (a.out is None) != a.size:
        ap.error("give either OUT.gguf or --size")
    header, ts, size = layout(a.quant, a.layers, *read_kv_section(a.vocab_gguf))
    if a.size:
        print(size)
        return
    rng = np.random.default_rng(7)
    with open(a.out, "wb") as f:
        f.write(header)
        for name, ty, shape in ts:
            data = memoryview(random_data(name, ty, shape, rng)).cast("B")
            f.write(data)
            f.write(b"\0" * ((-len(data)) % 32))
            del data
    assert os.path.getsize(a.out) == size, (os.path.getsize(a.out), size)
    print(f"{a.out}: {size / 2**30:.2f} GiB, {len(ts)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
