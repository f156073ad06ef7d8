#!/usr/bin/env python3
"""Golden dequantisation vectors for tests/kernels.rs, from an independent implementation.

For every quantized ggml type: random blocks (fp16 scale fields made finite) dequantized by the
numpy reference in the PyPI package `gguf` (`gguf.quants.dequantize`). Q2_0 is not in gguf-py, and
Q1_0 is checked against the formulas of spec §5.2 here as well (10-line numpy versions below).

Output: tests/golden/<TYPE>.bin = u32 n_blocks | n_blocks*block_bytes raw bytes | f32 values (LE).
Usage: pip install gguf numpy && python3 tools/gen_golden.py
"""
import os, struct
import numpy as np
from gguf import quants, GGMLQuantizationType as T

N_BLOCKS = 48
RNG = np.random.default_rng(20261130)

# type: (block elems, block bytes, offsets of fp16 scale fields)
TYPES = {
    "Q4_0": (32, 18, [0]), "Q4_1": (32, 20, [0, 2]), "Q5_0": (32, 22, [0]), "Q5_1": (32, 24, [0, 2]),
    "Q8_0": (32, 34, [0]), "IQ4_NL": (32, 18, [0]),
    "Q2_K": (256, 84, [80, 82]), "Q3_K": (256, 110, [108]), "Q4_K": (256, 144, [0, 2]),
    "Q5_K": (256, 176, [0, 2]), "Q6_K": (256, 210, [208]), "IQ4_XS": (256, 136, [0]),
    "IQ2_XXS": (256, 66, [0]), "IQ2_XS": (256, 74, [0]), "IQ2_S": (256, 82, [0]),
    "IQ3_XXS": (256, 98, [0]), "IQ3_S": (256, 110, [0]), "IQ1_S": (256, 50, [0]), "IQ1_M": (256, 56, []),
    "Q1_0": (128, 18, [0]), "Q2_0": (64, 18, [0]),
}


def finite_f16(old):
    """Same rule as quant::sanitize_f16: magnitude 2^-12..2^-5, sign and mantissa from the old bits."""
    return (old & 0x8000) | ((3 + (old >> 10) % 8) << 10) | (old & 0x3FF)


def random_blocks(name):
    elems, nbytes, f16s = TYPES[name]
    raw = RNG.integers(0, 256, size=(N_BLOCKS, nbytes), dtype=np.uint8)
    for blk in raw:
        for off in f16s:
            v = finite_f16(int(blk[off]) | int(blk[off + 1]) << 8)
            blk[off], blk[off + 1] = v & 0xFF, v >> 8
        if name == "IQ1_M":  # the fp16 super-scale is spread over the top nibbles of 4 u16 scales
            u = finite_f16(int(RNG.integers(0, 65536)))
            for k in range(4):
                off = 48 + 2 * k
                sc = (int(blk[off]) | int(blk[off + 1]) << 8) & 0x0FFF | (((u >> (4 * k)) & 15) << 12)
                blk[off], blk[off + 1] = sc & 0xFF, sc >> 8
    return raw


def dequant_q1_0(raw):
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)            # [n,1]
    bits = np.unpackbits(raw[:, 2:18], axis=1, bitorder="little")        # [n,128], element j = bit j%8 of byte j/8
    return np.where(bits == 1, d, -d).astype(np.float32)


def dequant_q2_0(raw):
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = raw[:, 2:18]
    q = np.stack([(qs >> (2 * k)) & 3 for k in range(4)], axis=2).reshape(len(raw), 64)  # j -> byte j/4, bits 2*(j%4)
    return ((q.astype(np.float32) - 1.0) * d).astype(np.float32)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outdir = os.path.join(root, "tests", "golden")
    os.makedirs(outdir, exist_ok=True)
    for name in TYPES:
        raw = random_blocks(name)
        if name == "Q2_0":
            vals = dequant_q2_0(raw)
        elif name == "Q1_0":
            vals = dequant_q1_0(raw)  # gguf-py lists Q1_0 but cannot dequantize it
        else:
            vals = quants.dequantize(raw.reshape(-1), T[name]).astype(np.float32)
        vals = np.ascontiguousarray(vals.reshape(-1), dtype="<f4")
        assert np.all(np.isfinite(vals)), name
        with open(os.path.join(outdir, f"{name}.bin"), "wb") as f:
            f.write(struct.pack("<I", N_BLOCKS))
            f.write(raw.tobytes())
            f.write(vals.tobytes())
        print(name, vals.size, "values")


if __name__ == "__main__":
    main()
