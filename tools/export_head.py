#!/usr/bin/env python3
"""Write the joint schema head of a `clef` GGUF as `joint_head.safetensors` + `joint_head_config.json`
(the head-less distribution form of spec clef-head.md §5: PyTorch `JointSchemaHead` state_dict names and
layout), so a head-less qwen35 GGUF plus these two files can be tested against the `clef` GGUF.

usage: export_head.py CLEF.gguf OUT_DIR [--dtype f32|f16]

- names: the inverse of the converter's map (§5.2); q/k/v of each attention are concatenated back into
  `in_proj_weight` [3W, W] / `in_proj_bias` [3W]; joint block dec.blk.{R+j} -> layers.{j}.
- layout: a ggml tensor ne = {in, out} is the torch [out, in] matrix with the same bytes: no transposes.
- `decision.scales` (stored transformed) is turned back into the raw scalars prior_logit_scale =
  ln s0, joint_logit_scale = ln s1, residual_gate = logit(s2), written as float64 0-dim tensors so that
  the loader's exp/sigmoid (in f64, then f32) gives back the stored f32 scales exactly.
- quantized head tensors (Q8_0, ...) are dequantized with gguf-py; matrices are written as --dtype.
Needs PyPI gguf, numpy, safetensors (tools/setup.sh installs them).
"""
import argparse, json, math
from pathlib import Path

import numpy as np
import gguf
from safetensors.numpy import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf"); ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.gguf)
    arch = r.fields["general.architecture"].contents()
    kv = lambda k: r.fields[f"{arch}.{k}"].contents()
    R, J, nh = int(kv("decision.routing_block_count")), int(kv("decision.block_count")), int(kv("decision.head_count"))
    H = int(kv("embedding_length"))

    t = {}
    for x in r.tensors:
        if x.name.startswith(("decision.", "dec.blk.")) or x.name == "token_types.weight":
            arr = gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32)
            # ggml ne {in, out} -> torch [out, in]
            t[x.name] = arr.reshape([int(d) for d in reversed(list(x.shape))]) if len(x.shape) > 1 else arr.reshape(-1)
    W = t["decision.proj_memory.weight"].shape[0]
    F = t["dec.blk.0.ffn_up.weight"].shape[0]
    mat = np.float16 if a.dtype == "f16" else np.float32

    out = {}
    def put(name, arr):
        out[name] = np.ascontiguousarray(arr.astype(mat if arr.ndim > 1 else np.float32))

    top = {
        "decision.hidden_norm": "hidden_norm", "decision.proj_memory": "memory_projection",
        "decision.proj_question": "question_projection", "decision.proj_option_question": "option_question_projection",
        "decision.proj_global": "global_projection", "decision.proj_option_context": "option_context_projection",
        "decision.proj_option_lexical": "option_lexical_projection", "token_types": "type_embedding",
        "decision.option_summary_norm": "option_summary_norm", "decision.field_norm": "field_norm",
        "decision.option_norm": "option_norm", "decision.scorer": "residual_scorer.0", "decision.scorer_out": "residual_scorer.3",
    }
    for g, p in top.items():
        for s in ("weight", "bias"):
            if f"{g}.{s}" in t:
                arr = t[f"{g}.{s}"]
                if g == "decision.scorer_out" and s == "weight":
                    arr = arr.reshape(1, W)
                put(f"{p}.{s}", arr)
    for il in range(R + J):
        g = f"dec.blk.{il}."
        if il < R:
            p = f"evidence_layers.{il}."
            names = {"cross_attn_norm": "query_norm", "cross_attn_norm_kv": "memory_norm", "cross_attn_o": "attention.out_proj",
                     "ffn_norm": "feedforward_norm", "ffn_up": "feedforward.0", "ffn_down": "feedforward.3"}
            in_proj = {"cross_attn": "attention"}
        else:
            p = f"layers.{il - R}."
            names = {"attn_norm": "norm1", "cross_attn_norm": "norm2", "ffn_norm": "norm3", "attn_o": "self_attn.out_proj",
                     "cross_attn_o": "multihead_attn.out_proj", "ffn_up": "linear1", "ffn_down": "linear2"}
            in_proj = {"attn": "self_attn", "cross_attn": "multihead_attn"}
        for gn, pn in names.items():
            for s in ("weight", "bias"):
                put(f"{p}{pn}.{s}", t[f"{g}{gn}.{s}"])
        for gn, pn in in_proj.items():
            put(f"{p}{pn}.in_proj_weight", np.concatenate([t[f"{g}{gn}_{x}.weight"] for x in "qkv"], axis=0))
            put(f"{p}{pn}.in_proj_bias", np.concatenate([t[f"{g}{gn}_{x}.bias"] for x in "qkv"], axis=0))

    s0, s1, s2 = (float(v) for v in t["decision.scales"])
    out["prior_logit_scale"] = np.array(math.log(s0), dtype=np.float64)
    out["joint_logit_scale"] = np.array(math.log(s1), dtype=np.float64)
    out["residual_gate"] = np.array(math.log(s2 / (1.0 - s2)), dtype=np.float64)

    od = Path(a.out_dir); od.mkdir(parents=True, exist_ok=True)
    save_file(out, str(od / "joint_head.safetensors"), metadata={"source": Path(a.gguf).name})
    cfg = {"hidden_size": H, "width": W, "routing_layers": R, "layers": J, "heads": nh, "feedforward": F}
    (od / "joint_head_config.json").write_text(json.dumps(cfg) + "\n")
    print(f"wrote {od}/joint_head.safetensors: {len(out)} tensors ({a.dtype} matrices), config {cfg}")


if __name__ == "__main__":
    main()
