#!/usr/bin/env python3
"""gen_quant_goldens.py - goldens for tests/test_quant.c from an independent
implementation: the PyPI `gguf` package (gguf.GGUFReader, gguf.quants), not
sekv's quant.c.

Writes tests/golden/quant_rows.json, one "cases" list; each case is a row of
one tensor type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
Q4_K, Q5_K, Q6_K, IQ4_NL) with
  "type", "source" ("quantize": gguf.quants.quantize of seeded random data;
      "model": a row of a real tensor; "random": seeded random bytes with
      finite fp16 scales), "n" (elements), "hex" (the stored bytes),
  "values" (gguf.quants.dequantize of those bytes: fp32 little-endian, hex),
  "dot_seed", "dot", "dot_abs": numpy's float64 sum of values[i] * y[i] and
      of |values[i] * y[i]|, y being tests/run.c's test_fill_random(y, n,
      dot_seed) (xorshift64, reproduced below bit for bit),
  and for "model" cases "model" (file name), "tensor", "row".
Model rows come from the default Gemma 3 270M, SmolLM2-135M-Instruct (Q4_1,
Q8_0) and Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Q5_0, Q8_0, Q4_K, Q6_K): one
or two rows of a few tensors, never a whole tensor. "model" is the file name
of the model's recipe (assets/recipes/), whose sha256 the file must have;
test_quant.c reads a case's row back through gguf.c when the tests run with
that model.

usage: python3 tools/gen_quant_goldens.py [GEMMA SMOLLM2 QWEN [OUT]]
  (default: the recipes' files in assets/models/, `make model MODEL=NAME`)
"""
import hashlib
import importlib.metadata
import json
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

RECIPES = ["gemma-3-270m", "smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"]


def recipe(name):
    """(file, sha256) of assets/recipes/NAME.recipe."""
    fields = {}
    with open("assets/recipes/%s.recipe" % name) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                fields.setdefault(parts[0], parts[1])
    return fields["file"], fields["sha256"]


ARGS = sys.argv[1:]
FILES = [recipe(r) for r in RECIPES]
GEMMA, SMOLLM2, QWEN = [ARGS[i] if len(ARGS) > i else "assets/models/" + FILES[i][0]
                        for i in range(3)]
OUT = ARGS[3] if len(ARGS) > 3 else "tests/golden/quant_rows.json"
NAMES = {}  # path -> recipe file name, after its sha256 is checked


def check_model(path, i):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    if h.hexdigest() != FILES[i][1]:
        sys.exit("%s: sha256 %s, not the recipe %s's" % (path, h.hexdigest(), RECIPES[i]))
    NAMES[path] = FILES[i][0]


# (model, tensor, rows): row indices, negative ones from the end
MODEL_ROWS = [
    (GEMMA, "blk.0.attn_norm.weight", [0]),        # F32, 1-D
    (GEMMA, "token_embd.weight", [0, -1]),          # Q8_0
    (GEMMA, "blk.0.attn_k.weight", [0, -1]),        # Q5_0
    (GEMMA, "blk.0.attn_output.weight", [0, -1]),   # Q4_K
    (GEMMA, "blk.0.ffn_down.weight", [0]),          # Q6_K
    (SMOLLM2, "blk.0.attn_q.weight", [0, -1]),      # Q4_1, 576 columns
    (SMOLLM2, "blk.29.ffn_down.weight", [288]),     # Q4_1, 1536 columns
    (SMOLLM2, "token_embd.weight", [24576]),        # Q8_0
    (QWEN, "token_embd.weight", [-1]),              # Q5_0
    (QWEN, "output.weight", [75968]),               # Q8_0
    (QWEN, "blk.11.ffn_down.weight", [0]),          # Q4_K, 4864 columns
    (QWEN, "blk.0.ffn_down.weight", [-1]),          # Q6_K, 4864 columns
]

QUANTIZABLE = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0]
RANDOM = [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K,
          QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_NL]

# byte offsets of the fp16 scale fields inside one block, per type
F16_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2],
    QT.Q6_K: [208], QT.IQ4_NL: [0],
}

M64 = (1 << 64) - 1


def fill_random(n, seed):
    """tests/run.c test_fill_random: xorshift64, (s >> 11) / 2^52 - 1 in
    double (exact), rounded to float."""
    s = (seed * 2654435761 + 1) & M64
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        s ^= (s << 13) & M64
        s ^= s >> 7
        s ^= (s << 17) & M64
        out[i] = (s >> 11) / 4503599627370496.0 - 1.0
    return out.astype(np.float32)


def case(qt, source, raw, vals, seed, **extra):
    vals = np.asarray(vals, dtype=np.float32).reshape(-1)
    y = fill_random(vals.size, seed).astype(np.float64)
    prod = vals.astype(np.float64) * y
    c = {"type": qt.name, "source": source, "n": int(vals.size),
         "hex": bytes(np.asarray(raw, np.uint8).reshape(-1)).hex(),
         "values": vals.astype("<f4").tobytes().hex(),
         "dot_seed": seed, "dot": float(np.dot(vals.astype(np.float64), y)),
         "dot_abs": float(np.abs(prod).sum())}
    c.update(extra)
    return c


def model_cases(seed):
    out, readers = [], {}
    for path, name, rows in MODEL_ROWS:
        if path not in readers:
            readers[path] = gguf.GGUFReader(path)
        t = next(t for t in readers[path].tensors if t.name == name)
        n = int(t.shape[0])
        n_rows = int(np.prod([int(x) for x in t.shape[1:]])) if len(t.shape) > 1 else 1
        raw = np.asarray(t.data).view(np.uint8).reshape(n_rows, -1)
        for r in rows:
            r = r % n_rows
            vals = gguf.quants.dequantize(raw[r:r + 1], t.tensor_type).reshape(-1)
            assert vals.size == n
            out.append(case(t.tensor_type, "model", raw[r], vals, seed,
                            model=NAMES[path], tensor=name, row=r))
            seed += 1
    return out


def quantize_cases(rng, seed):
    out = []
    for qt in QUANTIZABLE:
        n = 64 if qt in (QT.F32, QT.F16, QT.BF16) else 128
        # blocks of different spreads and offsets, so Q4_1/Q5_1 mins vary
        x = rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-3, 1, n // 32), 32)
        x = (x + np.repeat(rng.uniform(-2, 2, n // 32), 32)).astype(np.float32)
        raw = gguf.quants.quantize(x.reshape(1, n), qt).view(np.uint8).reshape(-1)
        vals = gguf.quants.dequantize(raw, qt)
        out.append(case(qt, "quantize", raw, vals, seed))
        seed += 1
    return out


def random_raw(rng, qt):
    if qt == QT.F16:
        # bit patterns without inf/NaN (exponent 31): normals and
        # subnormals of both signs, then a few fixed edge values
        bits = rng.integers(0, 0x10000, size=64, dtype=np.uint16)
        bits[(bits & 0x7c00) == 0x7c00] &= 0x83ff
        bits[:8] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x7bff, 0xfbff, 0x3c00]
        return bits.view(np.uint8)
    if qt == QT.BF16:
        f = (rng.standard_normal(64) * 10.0 ** rng.integers(-30, 30, 64)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    block_elems, block_bytes = GGML_QUANT_SIZES[qt]
    n_blocks = 2 if block_elems == 256 else 4
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qt]:
        # finite scales of either sign spanning a few decades
        s = (rng.uniform(-1, 1, n_blocks) * 10.0 ** rng.uniform(-4, 0, n_blocks)).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def random_cases(rng, seed):
    out = []
    for qt in RANDOM:
        raw = random_raw(rng, qt)
        out.append(case(qt, "random", raw, gguf.quants.dequantize(raw, qt), seed))
        seed += 1
    return out


def main():
    for i, path in enumerate([GEMMA, SMOLLM2, QWEN]):
        check_model(path, i)
    rng = np.random.default_rng(20240917)
    cases = quantize_cases(rng, 1000) + random_cases(rng, 2000) + model_cases(3000)
    doc = {"generator": "tools/gen_quant_goldens.py (PyPI gguf %s, numpy %s)" %
           (importlib.metadata.version("gguf"), np.__version__),
           "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
