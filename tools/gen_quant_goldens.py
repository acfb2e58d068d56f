#!/usr/bin/env python3
"""gen_quant_goldens.py - dequantisation goldens for tests/test_quant.c from an
independent implementation: the PyPI `gguf` package (gguf.GGUFReader,
gguf.quants.dequantize), not sekv's quant.c.

Writes tests/golden/quant_rows.json:
  "model_rows": for one tensor of each type in the default model (F32, Q8_0,
      Q5_0, Q4_K, Q6_K), rows 0, 1 and the middle row: tensor name, type,
      row index, n (row length) and the dequantised floats;
  "blocks": for every other type sekv decodes (F16, BF16, Q4_0, Q4_1, Q5_1,
      Q5_K) and again for the model's types, a few pseudo-random blocks
      (fixed seed, finite fp16 scales) as hex bytes plus their dequantised
      floats.
Floats are written with 9 significant digits, which round-trips fp32 exactly.

usage: python3 tools/gen_quant_goldens.py [MODEL] [OUT]
"""
import importlib.metadata
import json
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

MODEL = sys.argv[1] if len(sys.argv) > 1 else "assets/models/gemma-3-270m-q4_k_m.gguf"
OUT = sys.argv[2] if len(sys.argv) > 2 else "tests/golden/quant_rows.json"

MODEL_TENSORS = [
    "blk.0.attn_norm.weight",    # F32, 1-D: one row
    "token_embd.weight",         # Q8_0
    "blk.0.attn_k.weight",       # Q5_0
    "blk.0.attn_output.weight",  # Q4_K
    "blk.0.ffn_down.weight",     # Q6_K
]

# byte offsets of the fp16 scale fields inside one block, per type
F16_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2],
    QT.Q8_0: [0], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
}
N_BLOCKS = {QT.F16: 64, QT.BF16: 64}  # elements for the float types


def floats(a):
    return [float("%.9g" % v) for v in np.asarray(a, dtype=np.float32).tolist()]


def model_rows():
    reader = gguf.GGUFReader(MODEL)
    by_name = {t.name: t for t in reader.tensors}
    out = []
    for name in MODEL_TENSORS:
        t = by_name[name]
        n = int(t.shape[0])
        n_rows = int(np.prod([int(x) for x in t.shape[1:]])) if len(t.shape) > 1 else 1
        raw = np.asarray(t.data)
        if t.tensor_type in (QT.F32, QT.F16, QT.BF16):
            rows = raw.reshape(n_rows, n).astype(np.float32)
        else:
            rows = gguf.quants.dequantize(raw.reshape(n_rows, -1), t.tensor_type).reshape(n_rows, n)
        for r in sorted({0, min(1, n_rows - 1), n_rows // 2}):
            out.append({"tensor": name, "type": t.tensor_type.name, "row": r,
                        "n": n, "values": floats(rows[r])})
    return out


def random_blocks(rng, qt, n_blocks):
    if qt == QT.F16:
        # random bit patterns without inf/NaN (exponent 31): normals and
        # subnormals of both signs, then a few fixed edge values
        bits = rng.integers(0, 0x10000, size=N_BLOCKS[qt], dtype=np.uint16)
        bits[(bits & 0x7c00) == 0x7c00] &= 0x83ff
        bits[:8] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x3c00]
        raw = bits.view(np.uint8)
        return raw, gguf.quants.dequantize(raw, qt)
    if qt == QT.BF16:
        f = (rng.standard_normal(N_BLOCKS[qt]) * 10.0 ** rng.integers(-30, 30, N_BLOCKS[qt])).astype(np.float32)
        raw16 = (f.view(np.uint32) >> 16).astype(np.uint16)
        return raw16.view(np.uint8), gguf.quants.dequantize(raw16.view(np.uint8), qt)
    block_elems, block_bytes = GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qt]:
        # finite scales of either sign spanning a few decades
        s = (rng.uniform(-1, 1, n_blocks) * 10.0 ** rng.uniform(-4, 0, n_blocks)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    vals = gguf.quants.dequantize(raw, qt).reshape(-1)
    return raw.reshape(-1), vals


def blocks():
    rng = np.random.default_rng(20240917)
    out = []
    for qt in [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
               QT.Q4_K, QT.Q5_K, QT.Q6_K]:
        block_elems, _ = GGML_QUANT_SIZES[qt]
        n_blocks = 2 if block_elems == 256 else 4
        raw, vals = random_blocks(rng, qt, n_blocks)
        out.append({"type": qt.name, "type_id": int(qt.value), "n": int(vals.size),
                    "hex": bytes(np.asarray(raw, np.uint8)).hex(),
                    "values": floats(vals)})
    return out


def main():
    doc = {"generator": "tools/gen_quant_goldens.py (PyPI gguf %s)" % importlib.metadata.version("gguf"),
           "model": MODEL.rsplit("/", 1)[-1],
           "model_rows": model_rows(), "blocks": blocks()}
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
