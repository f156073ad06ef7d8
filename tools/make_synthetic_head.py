#!/usr/bin/env python3
"""A synthetic Clef-Flash joint schema head with the real shapes (spec clef-head.md §5): random
weights as `joint_head.safetensors` (bf16 matrices as the published file, per [3p]; f32 vectors and
scalars) + `joint_head_config.json`, for benchmarks beside the 9B-shaped GGUFs of make_synthetic.py.
Not a model: its answers mean nothing; its cost is the real head's.

usage: make_synthetic_head.py OUT_DIR [--hidden 4096] [--width 1024] [--heads 16] [--ffn 4096]
                              [--routing 2] [--joint 4] [--seed 1]

The defaults are Clef-Flash's: H = 4096, W = 1024, 16 heads, FFN 4096, 2 routing + 4 joint blocks,
122 tensors, 121,762,820 parameters (~244 MB). Written with numpy and the safetensors layout by hand
(8-byte header length, JSON header, data), so only numpy is needed.
"""
import argparse, json, struct
from pathlib import Path

import numpy as np


def names_and_shapes(H, W, F, R, J):
    """(torch name, shape) of every tensor of JointSchemaHead's state_dict (spec §5.2)."""
    out = [("hidden_norm.weight", [H]), ("hidden_norm.bias", [H])]
    for p in ("memory", "question", "option_question", "global", "option_context", "option_lexical"):
        out.append((f"{p}_projection.weight", [W, H]))
    out.append(("type_embedding.weight", [3, W]))
    for n in ("option_summary_norm", "field_norm", "option_norm"):
        out += [(f"{n}.weight", [W]), (f"{n}.bias", [W])]
    out += [("residual_scorer.0.weight", [W, 4 * W]), ("residual_scorer.0.bias", [W]),
            ("residual_scorer.3.weight", [1, W]), ("residual_scorer.3.bias", [1])]
    out += [("prior_logit_scale", []), ("joint_logit_scale", []), ("residual_gate", [])]

    def attn(prefix):
        return [(f"{prefix}.in_proj_weight", [3 * W, W]), (f"{prefix}.in_proj_bias", [3 * W]),
                (f"{prefix}.out_proj.weight", [W, W]), (f"{prefix}.out_proj.bias", [W])]

    def norm(prefix):
        return [(f"{prefix}.weight", [W]), (f"{prefix}.bias", [W])]

    for i in range(R):
        b = f"evidence_layers.{i}"
        out += norm(f"{b}.query_norm") + norm(f"{b}.memory_norm") + attn(f"{b}.attention") + norm(f"{b}.feedforward_norm")
        out += [(f"{b}.feedforward.0.weight", [F, W]), (f"{b}.feedforward.0.bias", [F]),
                (f"{b}.feedforward.3.weight", [W, F]), (f"{b}.feedforward.3.bias", [W])]
    for j in range(J):
        b = f"layers.{j}"
        out += norm(f"{b}.norm1") + norm(f"{b}.norm2") + norm(f"{b}.norm3")
        out += attn(f"{b}.self_attn") + attn(f"{b}.multihead_attn")
        out += [(f"{b}.linear1.weight", [F, W]), (f"{b}.linear1.bias", [F]),
                (f"{b}.linear2.weight", [W, F]), (f"{b}.linear2.bias", [W])]
    return out


def bf16_bytes(a):
    """float32 → bfloat16 (round to nearest even) as little-endian bytes."""
    u = a.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--routing", type=int, default=2)
    ap.add_argument("--joint", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    H, W, F, R, J = a.hidden, a.width, a.ffn, a.routing, a.joint
    rng = np.random.default_rng(a.seed)
    header, chunks, at, params = {}, [], 0, 0
    for name, shape in names_and_shapes(H, W, F, R, J):
        n = int(np.prod(shape)) if shape else 1
        params += n
        if len(shape) == 2:
            # Linear weights N/sqrt(in): activations keep their scale through the blocks.
            data, dtype = bf16_bytes(rng.standard_normal(n, dtype=np.float32) / np.sqrt(shape[1])), "BF16"
        elif name.endswith("norm.weight") or ".norm" in name and name.endswith(".weight"):
            data, dtype = (1 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype("<f4").tobytes(), "F32"
        else:
            data, dtype = (0.05 * rng.standard_normal(n, dtype=np.float32)).astype("<f4").tobytes(), "F32"
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        chunks.append(data)
        at += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "joint_head.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)
    cfg = {"hidden_size": H, "width": W, "routing_layers": R, "layers": J, "heads": a.heads, "feedforward": F}
    (out / "joint_head_config.json").write_text(json.dumps(cfg) + "\n")
    print(f"{out}/joint_head.safetensors: {len(header)} tensors, {params:,} parameters, {8 + len(head) + at:,} bytes")


if __name__ == "__main__":
    main()
