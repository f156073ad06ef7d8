#!/usr/bin/env python3
"""Synthetic Clef-Flash GGUFs: the real 9B shapes and per-tensor quant mix of a clef-flash file
(spec qwen35.md §6.2), the real 248k vocabulary (copied from the vocab-only fixture), and random
weights (valid blocks: every fp16 scale finite and small). The real files cannot be downloaded
here; these stand in for memory, loading and speed measurements. Their output is noise.

Usage: python3 tools/make_synthetic.py QUANT OUT.gguf [--layers N] [--vocab-gguf PATH]
       QUANT in IQ2_M IQ2_S IQ2_XS IQ2_XXS Q2_K Q2_K_S Q2_0 IQ1_M IQ1_S Q1_0
"""
import argparse, os, struct, sys
import numpy as np

# ggml type: (id, block elems, block bytes, offsets of fp16 fields)
TYPES = {
    "F32": (0, 1, 4, []), "Q2_K": (10, 256, 84, [80, 82]), "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]), "Q5_K": (13, 256, 176, [0, 2]), "Q6_K": (14, 256, 210, [208]),
    "IQ2_XXS": (16, 256, 66, [0]), "IQ2_XS": (17, 256, 74, [0]), "IQ1_S": (19, 256, 50, [0]),
    "IQ3_S": (21, 256, 110, [0]), "IQ2_S": (22, 256, 82, [0]), "IQ1_M": (29, 256, 56, []),
    "Q1_0": (41, 128, 18, [0]), "Q2_0": (42, 64, 18, [0]),
}

# Per-file mix (spec §6.2): token_embd, output, attn_qkv, other (gate/ssm_out/alpha/beta),
# attn_q, attn_k, attn_v, attn_output, ffn_gate/up, ffn_down for layers 0-3, ffn_down for the rest.
MIX = {
    "IQ2_XXS": ("Q2_K", "Q5_K", "Q4_K", "IQ2_XXS", "IQ2_XXS", "IQ2_XXS", "Q4_K", "IQ2_XXS", "IQ2_XXS", "Q2_K", "IQ2_XXS"),
    "IQ2_XS": ("Q2_K", "Q5_K", "Q4_K", "IQ2_XS", "IQ2_XS", "IQ2_XS", "Q4_K", "IQ2_XS", "IQ2_XS", "Q2_K", "IQ2_XS"),
    "IQ2_S": ("IQ3_S", "Q5_K", "Q4_K", "IQ2_XS", "IQ2_XS", "IQ2_XS", "Q4_K", "IQ3_S", "IQ2_XS", "IQ3_S", "IQ2_XS"),
    "IQ2_M": ("IQ3_S", "Q5_K", "Q4_K", "IQ2_S", "IQ2_S", "IQ2_S", "Q4_K", "IQ3_S", "IQ2_S", "IQ3_S", "IQ2_S"),
    "Q2_K": ("Q2_K", "Q6_K", "Q4_K", "Q2_K", "Q2_K", "Q2_K", "Q4_K", "Q3_K", "Q2_K", "Q3_K", "Q3_K"),
    "Q2_K_S": ("Q2_K", "Q6_K", "Q4_K", "Q2_K", "Q2_K", "Q2_K", "Q4_K", "Q2_K", "Q2_K", "Q4_K", "Q2_K"),
    "IQ1_S": ("Q2_K", "Q5_K", "Q4_K", "IQ1_S", "IQ1_S", "IQ1_S", "Q4_K", "IQ2_XXS", "IQ1_S", "Q2_K", "IQ1_S"),
    "IQ1_M": ("Q2_K", "Q5_K", "Q4_K", "IQ1_M", "IQ1_M", "IQ1_M", "Q4_K", "IQ2_XXS", "IQ1_M", "Q2_K", "IQ1_M"),
    "Q1_0": ("Q1_0", "Q6_K", "Q1_0", "Q1_0", "Q1_0", "Q1_0", "Q1_0", "Q1_0", "Q1_0", "Q1_0", "Q1_0"),
    "Q2_0": ("Q4_K", "Q6_K", "Q2_0", "Q2_0", "Q2_0", "Q2_0", "Q2_0", "Q2_0", "Q2_0", "Q2_0", "Q2_0"),
}
FTYPE = {"IQ2_XXS": 19, "IQ2_XS": 20, "IQ2_S": 28, "IQ2_M": 29, "Q2_K": 10, "Q2_K_S": 21, "IQ1_S": 24,
         "IQ1_M": 31, "Q1_0": 40, "Q2_0": 41}

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
    m = MIX[quant]
    emb, out, qkv, other, aq, ak, av, ao, ffn, down_early, down = m
    yield "token_embd.weight", emb, (D, V)
    yield "output_norm.weight", "F32", (D,)
    yield "output.weight", out, (D, V)
    for i in range(n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", "F32", (D,)
        yield p + "post_attention_norm.weight", "F32", (D,)
        if (i + 1) % 4 != 0:
            yield p + "attn_qkv.weight", qkv, (D, 2 * HK * DS + HV * DS)
            yield p + "attn_gate.weight", other, (D, HV * DS)
            yield p + "ssm_beta.weight", other, (D, HV)
            yield p + "ssm_alpha.weight", other, (D, HV)
            yield p + "ssm_dt.bias", "F32", (HV,)
            yield p + "ssm_a", "F32", (HV,)
            yield p + "ssm_conv1d.weight", "F32", (K, 2 * HK * DS + HV * DS)
            yield p + "ssm_norm.weight", "F32", (DS,)
            yield p + "ssm_out.weight", other, (HV * DS, D)
        else:
            yield p + "attn_q.weight", aq, (D, 2 * H * DH)
            yield p + "attn_k.weight", ak, (D, HKV * DH)
            yield p + "attn_v.weight", av, (D, HKV * DH)
            yield p + "attn_q_norm.weight", "F32", (DH,)
            yield p + "attn_k_norm.weight", "F32", (DH,)
            yield p + "attn_output.weight", ao, (H * DH, D)
        yield p + "ffn_gate.weight", ffn, (D, F)
        yield p + "ffn_up.weight", ffn, (D, F)
        yield p + "ffn_down.weight", down_early if i < 4 else down, (F, D)


def random_data(name, ty, shape, rng):
    n = int(np.prod(shape))
    if ty == "F32":
        if name.endswith("ssm_a"):
            v = -rng.uniform(0.05, 1.0, n)
        elif "norm" in name:
            v = 1.0 + rng.normal(0, 0.1, n)
        elif "conv1d" in name:
            v = rng.normal(0, 0.2, n)
        else:
            v = rng.uniform(-0.5, 1.5, n)
        return v.astype("<f4").tobytes()
    _, be, bb, f16s = TYPES[ty]
    blocks = rng.integers(0, 256, size=(n // be, bb), dtype=np.uint8)
    # finite fp16 scales around 2^-7..2^-5 (exponent field 8..10)
    for off in f16s:
        old = blocks[:, off].astype(np.uint16) | (blocks[:, off + 1].astype(np.uint16) << 8)
        new = (old & 0x83FF) | ((8 + (old >> 10) % 3) << 10)
        blocks[:, off] = new & 0xFF
        blocks[:, off + 1] = new >> 8
    if ty == "IQ1_M":  # super-scale in the top nibbles of the 4 u16 scales
        u = 0x2000 | rng.integers(0, 0x3FF, size=len(blocks), dtype=np.uint16)
        for k in range(4):
            blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | (((u >> (4 * k)) & 15) << 4).astype(np.uint8)
    return blocks.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quant", choices=sorted(MIX))
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--vocab-gguf", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "tokenizer", "qwen35-vocab.gguf"))
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    vocab_kv, n_vocab_kv = read_kv_section(a.vocab_gguf)
    meta = [
        kv("general.architecture", "str", "qwen35"),
        kv("general.name", "str", f"synthetic clef-flash {a.quant} (random weights)"),
        kv("general.file_type", "u32", FTYPE[a.quant]),
        kv("general.quantization_version", "u32", 2),
        kv("qwen35.block_count", "u32", a.layers),
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
    ts = list(tensors(a.quant, a.layers))
    infos, offset = [], 0
    for name, ty, shape in ts:
        tid, be, bb, _ = TYPES[ty]
        size = int(np.prod(shape)) // be * bb
        nb = name.encode()
        infos.append(struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(shape)) +
                     struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<IQ", tid, offset))
        offset += (size + 31) // 32 * 32
    with open(a.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(meta) + n_vocab_kv))
        for m in meta:
            f.write(m)
        f.write(vocab_kv)
        for i in infos:
            f.write(i)
        f.write(b"\0" * ((-f.tell()) % 32))
        for name, ty, shape in ts:
            data = random_data(name, ty, shape, rng)
            f.write(data)
            f.write(b"\0" * ((-len(data)) % 32))
    print(f"{a.out}: {os.path.getsize(a.out) / 2**30:.2f} GiB, {len(ts)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
