#!/usr/bin/env python3
"""gen_arch_goldens.py - tiny random-weight GGUFs of every model family sekv
runs, and golden logits for them from an independent float64 numpy forward.

For each case in CASES this writes, under OUTDIR (default tests/data/arch/):
  <case>.gguf  tensor names, shapes and metadata keys as llama.cpp's
               convert_hf_to_gguf.py writes them for that family, a vocabulary
               of the family's type, a chat template; 2-D weights stored as
               F32, F16, Q8_0 (gguf.quants.quantize), Q4_K or Q6_K (packed
               here; gguf-py has no K-quant encoder)
  <case>.json  {"case", "arch", "tokens", "positions", "logits", "hparams",
               "notes", ...}: logits[i] = next-token logits after
               tokens[0..positions[i]] in one causal pass (exact attention)

The forward consumes the dequantised stored values (gguf.quants.dequantize),
so only the forward pass is compared, never the quantiser. Each family's
forward follows Hugging Face transformers' semantics (modeling_llama /
qwen2 / mistral / phi3 / gemma3) plus llama.cpp's own choices where a GGUF
carries them (rope_freqs, YaRN, sliding-window pattern); tests/data/arch/README
states every convention and where it was checked. Needs numpy and gguf only;
seeded, byte-for-byte reproducible, a few seconds on one core.

usage: python3 tools/gen_arch_goldens.py [OUTDIR]
       python3 tools/gen_arch_goldens.py --crosscheck   (needs llama-cpp-python)
ARCHGOLD_ONLY=case,case limits either to some cases.
"""
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import zlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import TokenType as TT

N_TOKENS = 48                           # > 5 windows of 8
POSITIONS = [0, 1, 7, 8, 9, 20, 33, 47]  # first, last, both sides of the window edge


# ---------------------------------------------------------------- storage

def pack_q6_k(w):
    """w [rows][n], n % 256 == 0 -> Q6_K bytes [rows][n/256*210]:
    ql[128] qh[64] scales[16] (int8) d (f16); x = d*scale[e/16]*(q-32)."""
    rows, n = w.shape
    x = w.reshape(-1, 256).astype(np.float64)
    nb = x.shape[0]
    sub = x.reshape(nb, 16, 16)
    s = np.abs(sub).max(axis=2) / 31.0
    d16 = (s.max(axis=1) / 127.0).astype(np.float16)
    d = d16.astype(np.float64)[:, None]
    sc = np.clip(np.rint(np.divide(s, d, out=np.zeros_like(s), where=d > 0)), -128, 127)
    eff = (d * sc)[:, :, None]
    q = np.rint(np.divide(sub, eff, out=np.zeros_like(sub), where=eff != 0))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)
    lo, hi = q & 0x0F, q >> 4
    # element h*128 + t*32 + l: low nibble in ql[h*64 + (t%2)*32 + l], nibble t/2;
    # high two bits in qh[h*32 + l], bits 2t..2t+1
    ql = (lo[:, :, 0:2, :] | (lo[:, :, 2:4, :] << 4)).reshape(nb, 128)
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(nb, 64)
    blk = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8),
                          d16.reshape(nb, 1).view(np.uint8)], axis=1)
    return blk.reshape(rows, -1)


def pack_q4_k(w):
    """w [rows][n], n % 256 == 0 -> Q4_K bytes [rows][n/256*144]:
    d dmin (f16) scales[12] (6-bit scale and min of 8 sub-blocks) qs[128];
    x = d*sc[j]*q - dmin*m[j]."""
    rows, n = w.shape
    x = w.reshape(-1, 256).astype(np.float64)
    nb = x.shape[0]
    sub = x.reshape(nb, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    scale = (sub.max(axis=2) - lo) / 15.0
    d16 = (scale.max(axis=1) / 63.0).astype(np.float16)
    m16 = ((-lo).max(axis=1) / 63.0).astype(np.float16)
    d = d16.astype(np.float64)[:, None]
    dm = m16.astype(np.float64)[:, None]
    sc = np.clip(np.rint(np.divide(scale, d, out=np.zeros_like(scale), where=d > 0)), 0, 63)
    mn = np.clip(np.rint(np.divide(-lo, dm, out=np.zeros_like(lo), where=dm > 0)), 0, 63)
    eff = (d * sc)[:, :, None]
    q = np.rint(np.divide(sub + (dm * mn)[:, :, None], eff, out=np.zeros_like(sub), where=eff != 0))
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(nb, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(nb, 128)   # element c*64 + s*32 + l
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    scales = np.concatenate([
        sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6),
        mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6),
        (sc[:, 4:8] & 0x0F) | ((mn[:, 4:8] & 0x0F) << 4)], axis=1)
    blk = np.concatenate([d16.reshape(nb, 1).view(np.uint8), m16.reshape(nb, 1).view(np.uint8),
                          scales, qs], axis=1)
    return blk.reshape(rows, -1)


def store(w, qt):
    """w float32 in GGUF row order -> (array for GGUFWriter, raw_dtype, stored values as float64)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qt == QT.F32:
        return w, None, w.astype(np.float64)
    if qt == QT.F16:
        h = w.astype(np.float16)
        return h, None, h.astype(np.float64)
    if qt == QT.Q8_0:
        data = gguf.quants.quantize(w, qt)
    elif qt == QT.Q6_K:
        data = pack_q6_k(w)
    elif qt == QT.Q4_K:
        data = pack_q4_k(w)
    else:
        raise ValueError(qt)
    deq = gguf.quants.dequantize(data, qt).reshape(w.shape).astype(np.float64)
    # a packing bug shows as an error far above the format's own rounding
    rel = np.abs(deq - w).max() / np.abs(w).max()
    limit = {QT.Q8_0: 0.01, QT.Q6_K: 0.05, QT.Q4_K: 0.15}[qt]
    assert rel < limit, "%s round trip error %.3g" % (qt.name, rel)
    return data, qt, deq


# ---------------------------------------------------------------- vocabularies

# SentencePiece pieces in merge order; single characters last, as in the
# Llama/Gemma vocabularies (scores fall with the index)
SPM_PIECES = ["▁t", "er", "in", "▁a", "en", "on", "▁th", "es", "▁the", "▁s",
              "at", "or", "an", "▁o", "is", "▁c", "re", "ed", "▁w", "▁of",
              "ing", "▁and", "▁to", "▁in", "ar", "al", "▁d", "▁b", "▁f", "▁m",
              "▁p", "ion", "ou", "▁is", "▁question", "▁answer", "▁document",
              "▁long", "▁model", "▁page", "▁", "e", "t", "a", "o", "i", "n",
              "s", "r", "h", "l", "d", "c", "u", "m", "f", "p", "g", "w", "y",
              "b", ".", ",", "v", "k", "T", "I", "A", "S", "x", "j", "q", "z"]

# byte-level BPE merges in rank order ("left right"); each result is a token
BPE_MERGES = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s",
              "a t", "Ġ w", "Ġ o", "e n", "Ġ c", "i s", "a n", "o r", "e s",
              "Ġ b", "e d", "Ġ f", "in g", "Ġ p", "o u", "Ġa n", "a l", "a r",
              "Ġt o", "Ġ m", "Ġo f", "Ġ in", "Ġ d", "Ġ h", "Ġan d", "i c",
              "a s", "l e", "Ġt h", "i on", "o m", "Ċ Ċ", "Ġ q", "Ġq u", "Ġ Ġ"]


def byte_symbols():
    """GPT-2's byte -> printable character table, in its vocabulary order:
    the 188 printable bytes map to themselves, the rest to U+0100 upwards."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in keep] + [table[b] for b in range(256) if b not in keep]


def spm_vocab(layout):
    """-> dict tokens, scores, types, special ids, range of plain pieces."""
    if layout == "gemma3":
        head = [("<pad>", TT.CONTROL), ("<eos>", TT.CONTROL), ("<bos>", TT.CONTROL),
                ("<unk>", TT.CONTROL), ("<mask>", TT.CONTROL), ("[multimodal]", TT.USER_DEFINED),
                ("<start_of_turn>", TT.CONTROL), ("<end_of_turn>", TT.CONTROL), ("\n", TT.USER_DEFINED)]
        ids = {"bos": 2, "eos": 1, "unk": 3, "pad": 0}
    else:   # llama2, mistral (v0.1 layout), phi3 (llama2 layout + added tokens)
        head = [("<unk>", TT.UNKNOWN), ("<s>", TT.CONTROL), ("</s>", TT.CONTROL)]
        ids = {"bos": 1, "eos": 2, "unk": 0}
    tokens = [t for t, _ in head]
    types = [int(k) for _, k in head]
    scores = [-1000.0 if layout == "gemma3" else 0.0] * len(head)
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(int(TT.BYTE))
        scores.append(0.0)
    first = len(tokens)
    for i, p in enumerate(SPM_PIECES):
        tokens.append(p)
        types.append(int(TT.NORMAL))
        scores.append(-float(i))
    plain = (first, len(tokens))
    if layout == "phi3":
        for t in ["<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|system|>", "<|end|>", "<|user|>"]:
            tokens.append(t)
            types.append(int(TT.CONTROL))
            scores.append(-1000.0)
        ids.update(eos=tokens.index("<|endoftext|>"), pad=tokens.index("<|endoftext|>"))
    return {"model": "llama", "pre": "default", "tokens": tokens, "scores": scores,
            "types": types, "ids": ids, "plain": plain}


def bpe_vocab(pre):
    syms = byte_symbols()
    if pre == "smollm":
        specials_front = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>"]
        specials_back, n_pad = [], 0
    elif pre == "qwen2":
        specials_front = []
        specials_back, n_pad = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 2
    else:   # llama-bpe
        specials_front = []
        specials_back = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                         "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
                         "<|python_tag|>"]
        n_pad = 0
    tokens = list(specials_front) + syms
    types = [int(TT.CONTROL)] * len(specials_front) + [int(TT.NORMAL)] * len(syms)
    for m in BPE_MERGES:
        left, right = m.split(" ")
        assert left in tokens and right in tokens and left + right not in tokens, m
        tokens.append(left + right)
        types.append(int(TT.NORMAL))
    plain = (len(specials_front), len(tokens))
    tokens += specials_back
    types += [int(TT.CONTROL)] * len(specials_back)
    for i in range(n_pad):
        tokens.append("[PAD%d]" % len(tokens))
        types.append(int(TT.UNUSED))
    if pre == "smollm":
        ids = {"bos": 1, "eos": 2, "unk": 0, "pad": 2}
    elif pre == "qwen2":
        ids = {"bos": tokens.index("<|endoftext|>"), "eos": tokens.index("<|im_end|>"),
               "pad": tokens.index("<|endoftext|>")}
    else:
        ids = {"bos": tokens.index("<|begin_of_text|>"), "eos": tokens.index("<|eot_id|>")}
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": types,
            "merges": list(BPE_MERGES), "ids": ids, "plain": plain}


TEMPLATES = {
    "gemma3": ("{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' "
               "else 'user') + '\\n' + m['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"),
    "llama2": ("{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] | trim + "
               "' [/INST]' }}{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] | trim + ' ' + eos_token }}"
               "{% endif %}{% endfor %}"),
    "mistral": ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + "
                "' [/INST]' }}{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}"),
    "chatml": ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "llama3": ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
               "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"),
    "phi3": ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% if not add_generation_prompt %}"
             "{{ eos_token }}{% endif %}"),
}


# ---------------------------------------------------------------- cases

F32, F16, Q8, Q4K, Q6K = QT.F32, QT.F16, QT.Q8_0, QT.Q4_K, QT.Q6_K

CASES = [
    dict(case="gemma3", arch="gemma3", family="gemma3", vocab=("spm", "gemma3"), template="gemma3",
         n_embd=64, n_head=4, n_head_kv=1, d_head=32, n_ff=256, n_layer=6, eps=1e-6, n_ctx=32768,
         rope_base=1e6, rope_base_swa=1000.0, swa=8, swa_pattern=3, write_pattern=True, tied=True,
         types={"token_embd": Q8, "attn_q": (F16, Q8), "attn_k": Q8, "attn_v": F32, "attn_output": Q8,
                "ffn_gate": (Q8, F16), "ffn_up": Q8, "ffn_down": (Q6K, Q4K)}),
    dict(case="gemma3_linear", arch="gemma3", family="gemma3", vocab=("spm", "gemma3"), template="gemma3",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=256, n_layer=6, eps=1e-6, n_ctx=131072,
         rope_base=1e6, rope_base_swa=None, swa=8, swa_pattern=6, write_pattern=False, tied=True,
         rope_scaling=("linear", 8.0),
         types={"token_embd": F16, "attn_q": Q8, "attn_k": F16, "attn_v": Q8, "attn_output": F32,
                "ffn_gate": Q8, "ffn_up": (Q8, F16), "ffn_down": (Q4K, Q6K)}),
    dict(case="llama", arch="llama", family="llama", vocab=("spm", "llama2"), template="llama2",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=256, n_layer=4, eps=1e-5, n_ctx=2048,
         rope_base=10000.0, tied=False,
         types={"token_embd": F16, "output": Q8, "attn_q": Q8, "attn_k": F16, "attn_v": F32,
                "attn_output": Q8, "ffn_gate": Q8, "ffn_up": F16, "ffn_down": Q4K}),
    dict(case="llama_tied", arch="llama", family="llama", vocab=("bpe", "smollm"), template="chatml",
         n_embd=64, n_head=4, n_head_kv=4, d_head=16, n_ff=128, n_layer=3, eps=1e-5, n_ctx=8192,
         rope_base=100000.0, tied=True,
         types={"token_embd": Q8, "attn_q": F16, "attn_k": Q8, "attn_v": F16, "attn_output": F32,
                "ffn_gate": F16, "ffn_up": Q8, "ffn_down": Q8}),
    dict(case="llama3", arch="llama", family="llama", vocab=("bpe", "llama-bpe"), template="llama3",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=96, n_layer=4, eps=1e-5, n_ctx=131072,
         rope_base=500000.0, tied=False, write_head_dim=True,
         llama3_rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=64),
         types={"token_embd": F32, "output": F16, "attn_q": F16, "attn_k": Q8, "attn_v": Q8,
                "attn_output": F16, "ffn_gate": Q8, "ffn_up": F32, "ffn_down": Q8}),
    dict(case="qwen2", arch="qwen2", family="qwen2", vocab=("bpe", "qwen2"), template="chatml",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=256, n_layer=4, eps=1e-6, n_ctx=32768,
         rope_base=1e6, tied=True,
         types={"token_embd": Q8, "attn_q": (F16, Q8), "attn_k": Q8, "attn_v": F32, "attn_output": Q8,
                "ffn_gate": Q8, "ffn_up": F16, "ffn_down": Q6K}),
    dict(case="qwen2_yarn", arch="qwen2", family="qwen2", vocab=("bpe", "qwen2"), template="chatml",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=128, n_layer=3, eps=1e-6, n_ctx=256,
         rope_base=10000.0, tied=False, rope_scaling=("yarn", 4.0), yarn_orig_ctx=64,
         types={"token_embd": F16, "output": Q8, "attn_q": Q8, "attn_k": F32, "attn_v": F16,
                "attn_output": F16, "ffn_gate": F32, "ffn_up": Q8, "ffn_down": F16}),
    dict(case="mistral", arch="llama", family="llama", vocab=("spm", "mistral"), template="mistral",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=128, n_layer=4, eps=1e-5, n_ctx=32768,
         rope_base=10000.0, tied=False, swa=8, swa_pattern=0,
         types={"token_embd": Q8, "output": F16, "attn_q": F16, "attn_k": Q8, "attn_v": Q8,
                "attn_output": F16, "ffn_gate": F16, "ffn_up": Q8, "ffn_down": Q8}),
    dict(case="phi3", arch="phi3", family="phi3", vocab=("spm", "phi3"), template="phi3",
         n_embd=64, n_head=4, n_head_kv=2, d_head=16, n_ff=128, n_layer=3, eps=1e-5, n_ctx=4096,
         rope_base=10000.0, tied=False, phi3_sliding_window=2047, yarn_orig_ctx=4096,
         types={"token_embd": F16, "output": Q8, "attn_qkv": Q8, "attn_output": F16,
                "ffn_up": F16, "ffn_down": Q8}),
]


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


# ---------------------------------------------------------------- weights

def permute_qk(w, n_head):
    """HF q/k rows -> GGUF rows, as convert_hf_to_gguf's LlamaModel.permute:
    within each head, HF row j (j < d/2) goes to 2j and row d/2+j to 2j+1."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(d, base, p):
    """rope_freqs.weight values as convert_hf_to_gguf's LlamaModel.generate_extra_tensors
    computes them (one per rotated pair): 1, factor or a smooth blend by wavelength."""
    out = []
    for j in range(d // 2):
        freq = 1.0 / base ** (2 * j / d)
        wavelen = 2 * math.pi / freq
        lo_wl = p["original_context"] / p["low_freq_factor"]
        hi_wl = p["original_context"] / p["high_freq_factor"]
        if wavelen < hi_wl:
            out.append(1.0)
        elif wavelen > lo_wl:
            out.append(p["factor"])
        else:
            smooth = (p["original_context"] / wavelen - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / p["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def make_weights(c, n_vocab, rng):
    """-> list of (gguf name, float32 array in GGUF row order [out][in], type).
    Linear weights ~ N(0, gain^2/n_in) so activations stay O(1) (q and k a
    little larger, for peaked attention); norm weights 1 + N(0, 0.15^2);
    embeddings and the output head std 0.5, so logits spread by ~4.
    llama-family q/k rows are drawn in HF order and permuted as the
    converter does."""
    E, H, Hkv, D, F = c["n_embd"], c["n_head"], c["n_head_kv"], c["d_head"], c["n_ff"]
    ty = c["types"]

    def lin(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in)) * gain / math.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.15 * rng.standard_normal(n)).astype(np.float32)

    def pick(key, il):
        t = ty[key]
        return t[il % len(t)] if isinstance(t, tuple) else t

    out = [("token_embd.weight", (0.5 * rng.standard_normal((n_vocab, E))).astype(np.float32), ty["token_embd"])]
    for il in range(c["n_layer"]):
        b = "blk.%d." % il
        out.append((b + "attn_norm.weight", norm(E), F32))
        if c["family"] == "phi3":
            qkv = np.concatenate([lin(H * D, E, 1.5), lin(Hkv * D, E, 1.5), lin(Hkv * D, E)])
            out.append((b + "attn_qkv.weight", qkv, pick("attn_qkv", il)))
        else:
            q, k = lin(H * D, E, 1.5), lin(Hkv * D, E, 1.5)
            if c["family"] == "llama":
                q, k = permute_qk(q, H), permute_qk(k, Hkv)
            out.append((b + "attn_q.weight", q, pick("attn_q", il)))
            out.append((b + "attn_k.weight", k, pick("attn_k", il)))
            out.append((b + "attn_v.weight", lin(Hkv * D, E), pick("attn_v", il)))
        if c["family"] == "qwen2":
            for nm, n in (("attn_q.bias", H * D), ("attn_k.bias", Hkv * D), ("attn_v.bias", Hkv * D)):
                out.append((b + nm, (0.5 * rng.standard_normal(n)).astype(np.float32), F32))
        if c["family"] == "gemma3":
            out.append((b + "attn_q_norm.weight", norm(D), F32))
            out.append((b + "attn_k_norm.weight", norm(D), F32))
        out.append((b + "attn_output.weight", lin(E, H * D), pick("attn_output", il)))
        if c["family"] == "gemma3":
            out.append((b + "post_attention_norm.weight", norm(E), F32))
        out.append((b + "ffn_norm.weight", norm(E), F32))
        if c["family"] == "phi3":
            out.append((b + "ffn_up.weight", np.concatenate([lin(F, E), lin(F, E)]), pick("ffn_up", il)))
        else:
            out.append((b + "ffn_gate.weight", lin(F, E), pick("ffn_gate", il)))
            out.append((b + "ffn_up.weight", lin(F, E), pick("ffn_up", il)))
        out.append((b + "ffn_down.weight", lin(E, F), pick("ffn_down", il)))
        if c["family"] == "gemma3":
            out.append((b + "post_ffw_norm.weight", norm(E), F32))
    out.append(("output_norm.weight", norm(E), F32))
    if not c["tied"]:
        out.append(("output.weight", (0.5 * rng.standard_normal((n_vocab, E))).astype(np.float32), ty["output"]))
    if "llama3_rope" in c:
        out.append(("rope_freqs.weight", llama3_factors(D, c["rope_base"], c["llama3_rope"]), F32))
    return out


# ---------------------------------------------------------------- forward (float64)

def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis (eps inside the root)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_ggml_table(x):
    """ggml-cpu's GELU under GGML_GELU_FP16: the tanh GELU looked up at the
    fp16-rounded input and rounded to fp16 (crosscheck only; the goldens use
    gelu_tanh)."""
    h = x.astype(np.float16).astype(np.float64)
    y = gelu_tanh(h).astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, y))


def rope_tables(n, d, base, scaling=None, freq_factors=None, yarn_orig_ctx=None, opt=None):
    """cos, sin [n][d/2] for pair j at position p.
    theta = p * base^(-2j/d) / freq_factors[j]; linear: theta / factor;
    yarn (ggml rope_yarn with ext_factor 1, beta_fast 32, beta_slow 1):
      lo = max(0, floor(c(32))), hi = min(d-1, ceil(c(1))),
      c(b) = d * ln(n_ctx_orig / (2 pi b)) / (2 ln base),
      ramp_j = 1 - clamp((j - lo) / max(0.001, hi - lo), 0, 1),
      theta = theta/factor * (1 - ramp_j) + theta * ramp_j,
      cos and sin both multiplied by 1 + 0.1 ln(factor)."""
    opt = opt or {}
    j = np.arange(d // 2, dtype=np.float64)
    inv = base ** (-2.0 * j / d)
    if freq_factors is not None:
        inv = inv / freq_factors
    theta = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    mscale = 1.0
    if scaling is not None and scaling[0] == "linear":
        theta = theta / scaling[1]
    elif scaling is not None and scaling[0] == "yarn":
        factor = scaling[1]

        def corr(beta):
            return d * math.log(yarn_orig_ctx / (beta * 2 * math.pi)) / (2 * math.log(base))
        lo = max(0.0, math.floor(corr(32.0)))
        hi = min(d - 1.0, math.ceil(corr(1.0)))
        ramp = 0.0 if opt.get("yarn_no_ramp") else 1.0 - np.clip((j - lo) / max(0.001, hi - lo), 0.0, 1.0)
        theta = (theta / factor) * (1.0 - ramp) + theta * ramp
        mscale = 1.0 if opt.get("yarn_no_mscale") else 1.0 + 0.1 * math.log(factor)
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def rope_neox(x, cos, sin):
    """x [T][heads][d]: pair (j, j + d/2) rotated by theta_j (HF rotate_half)."""
    h = x.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_adjacent(x, cos, sin):
    """x [T][heads][d]: pair (2j, 2j+1) rotated by theta_j (only used to show
    that the pairing matters; the goldens use rope_neox on HF-layout q/k)."""
    c, s = cos[:, None, :], sin[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * c - x1 * s
    y[..., 1::2] = x0 * s + x1 * c
    return y


def attention(q, k, v, scale, window):
    """q [T][H][d], k v [T][Hkv][d] -> [T][H*d]. Query head h reads KV head
    h // (H / Hkv). Key j is visible to query i iff j <= i and, with a window
    W, i - j < W (W keys including itself)."""
    T, H, d = q.shape
    group = H // k.shape[1]
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed &= (i - j) < window
    out = np.empty((T, H, v.shape[2]))
    for h in range(H):
        s = (q[:, h, :] @ k[:, h // group, :].T) * scale
        s = np.where(allowed, s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ v[:, h // group, :]
    return out.reshape(T, -1)


def layer_is_swa(c, il, pattern=None):
    """llama.cpp set_swa_pattern(n, dense_first=false): layer il slides iff
    il % n < n - 1 (n = 0: every layer)."""
    if not c.get("swa"):
        return False
    n = c["swa_pattern"] if pattern is None else pattern
    return n == 0 or il % n < n - 1


def forward(c, W, tokens, opt=None):
    """W: GGUF name -> stored values (float64). Returns logits [T][n_vocab]."""
    opt = opt or {}
    fam = c["family"]
    E, H, Hkv, D, F, eps = c["n_embd"], c["n_head"], c["n_head_kv"], c["d_head"], c["n_ff"], c["eps"]
    T = len(tokens)
    x = W["token_embd.weight"][tokens]
    if fam == "gemma3":
        x = x * math.sqrt(E)
    ff = W.get("rope_freqs.weight") if not opt.get("no_rope_freqs") else None
    scaling = None if opt.get("no_scaling") else c.get("rope_scaling")
    for il in range(c["n_layer"]):
        b = "blk.%d." % il
        swa = layer_is_swa(c, il, opt.get("swa_pattern")) and not opt.get("no_swa")
        h = rms_norm(x, W[b + "attn_norm.weight"], eps)
        if fam == "phi3":
            qkv = h @ W[b + "attn_qkv.weight"].T
            q, k, v = np.split(qkv, [H * D, H * D + Hkv * D], axis=1)
        else:
            wq, wk = W[b + "attn_q.weight"], W[b + "attn_k.weight"]
            if fam == "llama" and not opt.get("skip_unpermute"):
                wq, wk = unpermute_qk(wq, H), unpermute_qk(wk, Hkv)
            q, k, v = h @ wq.T, h @ wk.T, h @ W[b + "attn_v.weight"].T
            if fam == "qwen2":
                q = q + W[b + "attn_q.bias"]
                k = k + W[b + "attn_k.bias"]
                v = v + W[b + "attn_v.bias"]
        q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
        if fam == "gemma3":
            q = rms_norm(q, W[b + "attn_q_norm.weight"], eps)
            k = rms_norm(k, W[b + "attn_k_norm.weight"], eps)
            if swa:
                base = c["rope_base_swa"] if c["rope_base_swa"] and not opt.get("default_base_swa") else 10000.0
                if opt.get("base_swa_is_freq_base"):
                    base = c["rope_base"]
                cos, sin = rope_tables(T, D, base, scaling if opt.get("scaling_all_layers") else None)
            else:
                cos, sin = rope_tables(T, D, c["rope_base"], scaling)
        else:
            cos, sin = rope_tables(T, D, c["rope_base"], scaling, ff, c.get("yarn_orig_ctx"), opt)
        rot = rope_adjacent if opt.get("adjacent_rope") else rope_neox
        q, k = rot(q, cos, sin), rot(k, cos, sin)
        scale = 1.0 / math.sqrt(E / H if opt.get("scale_by_n_embd") else D)
        a = attention(q, k, v, scale, c["swa"] if swa else None)
        a = a @ W[b + "attn_output.weight"].T
        if fam == "gemma3":
            a = rms_norm(a, W[b + "post_attention_norm.weight"], eps)
        x = x + a
        h = rms_norm(x, W[b + "ffn_norm.weight"], eps)
        if fam == "phi3":
            gu = h @ W[b + "ffn_up.weight"].T
            gate, up = (gu[:, F:], gu[:, :F]) if opt.get("up_then_gate") else (gu[:, :F], gu[:, F:])
            f = silu(gate) * up
        elif fam == "gemma3":
            act = gelu_ggml_table if opt.get("ggml_gelu") else gelu_tanh
            f = act(h @ W[b + "ffn_gate.weight"].T) * (h @ W[b + "ffn_up.weight"].T)
        else:
            f = silu(h @ W[b + "ffn_gate.weight"].T) * (h @ W[b + "ffn_up.weight"].T)
        f = f @ W[b + "ffn_down.weight"].T
        if fam == "gemma3":
            f = rms_norm(f, W[b + "post_ffw_norm.weight"], eps)
        x = x + f
    x = rms_norm(x, W["output_norm.weight"], eps)
    head = W["output.weight"] if "output.weight" in W else W["token_embd.weight"]
    return x @ head.T


# ---------------------------------------------------------------- GGUF writing

def write_gguf(c, path, vocab, stored):
    w = gguf.GGUFWriter(path, c["arch"])
    a = c["arch"]
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name("sekv test %s" % c["case"])
    qtypes = {t for _, _, t in stored}
    ftype = (gguf.LlamaFileType.MOSTLY_Q4_K_M if QT.Q4_K in qtypes else
             gguf.LlamaFileType.MOSTLY_Q6_K if QT.Q6_K in qtypes else
             gguf.LlamaFileType.MOSTLY_Q8_0 if QT.Q8_0 in qtypes else gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["eps"])
    if a == "llama":
        w.add_vocab_size(len(vocab["tokens"]))
        w.add_rope_dimension_count(c["d_head"])
        if c.get("write_head_dim"):
            w.add_key_length(c["d_head"])
            w.add_value_length(c["d_head"])
        if c.get("swa"):
            w.add_sliding_window(c["swa"])
    if a == "gemma3":
        w.add_key_length(c["d_head"])
        w.add_value_length(c["d_head"])
        w.add_sliding_window(c["swa"])
        if c["write_pattern"]:
            w.add_sliding_window_pattern(c["swa_pattern"])
        if c["rope_base_swa"]:
            w.add_rope_freq_base_swa(c["rope_base_swa"])
    if a == "phi3":
        w.add_rope_scaling_orig_ctx_len(c["yarn_orig_ctx"])
        w.add_rope_dimension_count(c["d_head"])
        w.add_sliding_window(c["phi3_sliding_window"])
    if c.get("rope_scaling"):
        kind, factor = c["rope_scaling"]
        w.add_rope_scaling_type(gguf.RopeScalingType(kind))
        w.add_rope_scaling_factor(factor)
        if kind == "yarn":
            w.add_rope_scaling_orig_ctx_len(c["yarn_orig_ctx"])
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    w.add_tokenizer_model(vocab["model"])
    w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"])
    w.add_token_types(vocab["types"])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    ids = vocab["ids"]
    w.add_bos_token_id(ids["bos"])
    w.add_eos_token_id(ids["eos"])
    if "unk" in ids:
        w.add_unk_token_id(ids["unk"])
    if "pad" in ids:
        w.add_pad_token_id(ids["pad"])
    w.add_add_bos_token(vocab["pre"] not in ("qwen2", "smollm") and c["vocab"][1] != "phi3")
    w.add_add_eos_token(False)
    if c["family"] == "gemma3" or vocab["pre"] == "smollm":
        w.add_add_space_prefix(False)
    w.add_chat_template(TEMPLATES[c["template"]])

    for name, (data, raw, _), _ in stored:
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_gguf(path, c, vocab, W):
    """Read the file back with gguf.GGUFReader: every tensor present, shaped
    ne = [in, out], and dequantising to exactly the values the forward used."""
    r = gguf.GGUFReader(path)
    assert r.fields["general.architecture"].contents() == c["arch"]
    assert r.fields["tokenizer.ggml.tokens"].contents() == vocab["tokens"]
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(W), set(got) ^ set(W)
    for name, t in got.items():
        want = W[name]
        assert [int(n) for n in t.shape] == list(want.shape[::-1]), name
        data = np.asarray(t.data)
        if t.tensor_type in (QT.F32, QT.F16):
            vals = data.astype(np.float64).reshape(want.shape)
        else:
            vals = gguf.quants.dequantize(data, t.tensor_type).astype(np.float64).reshape(want.shape)
        assert np.array_equal(vals, want), name
    assert W["token_embd.weight"].shape[0] == len(vocab["tokens"])


def floats(a):
    return [float("%.9g" % v) for v in np.asarray(a, dtype=np.float64).ravel().tolist()]


def variants_of(c):
    """(label, forward options) dropping one convention each."""
    variants = []
    if c.get("swa"):
        variants.append(("no_sliding_window", {"no_swa": True}))
    if c.get("rope_scaling"):
        variants.append(("no_rope_scaling", {"no_scaling": True}))
    if "llama3_rope" in c:
        variants.append(("no_rope_freqs", {"no_rope_freqs": True}))
    if c["family"] == "llama":
        variants.append(("neox_rope_on_gguf_rows", {"skip_unpermute": True}))
    else:
        variants.append(("adjacent_pair_rope", {"adjacent_rope": True}))
    if c["family"] == "gemma3":
        if c["rope_base_swa"]:
            variants.append(("rope_base_swa_10000", {"default_base_swa": True}))
        variants.append(("rope_base_swa_is_freq_base", {"base_swa_is_freq_base": True}))
        if c["write_pattern"]:
            variants.append(("swa_pattern_6", {"swa_pattern": 6}))
        if c.get("rope_scaling"):
            variants.append(("rope_scaling_on_swa_layers_too", {"scaling_all_layers": True}))
        if c["d_head"] * c["n_head"] != c["n_embd"]:
            variants.append(("attn_scale_from_n_embd_over_n_head", {"scale_by_n_embd": True}))
    if c.get("rope_scaling", ("",))[0] == "yarn":
        variants.append(("yarn_without_mscale", {"yarn_no_mscale": True}))
        variants.append(("yarn_without_ramp", {"yarn_no_ramp": True}))
    if c["family"] == "phi3":
        variants.append(("ffn_up_read_as_up_then_gate", {"up_then_gate": True}))
    return variants


def build(c, out, all_f32=False):
    """Write <out>/<case>.gguf (every tensor F32 when all_f32) and, unless
    all_f32, <out>/<case>.json. Returns (path, stored values, tokens, logits)."""
    rng = np.random.default_rng(seed_of(c["case"]))
    kind, layout = c["vocab"]
    vocab = spm_vocab(layout) if kind == "spm" else bpe_vocab(layout)
    n_vocab = len(vocab["tokens"])
    raw = make_weights(c, n_vocab, rng)
    stored = [(name, store(arr, F32 if all_f32 else qt), F32 if all_f32 else qt) for name, arr, qt in raw]
    W = {name: s[2] for name, s, _ in stored}

    lo, hi = vocab["plain"]
    tokens = [vocab["ids"]["bos"]] + [int(t) for t in rng.integers(lo, hi, N_TOKENS - 1)]
    logits = forward(c, W, tokens)

    path = os.path.join(out, c["case"] + ".gguf")
    write_gguf(c, path, vocab, stored)
    check_gguf(path, c, vocab, W)
    if all_f32:
        return path, W, tokens, logits
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()

    # how far the logits move when one convention is dropped: what a test
    # tolerance must stay well below
    sens = {}
    for label, opt in variants_of(c):
        alt = forward(c, W, tokens, opt)
        sens[label] = float("%.4g" % np.abs(alt[POSITIONS] - logits[POSITIONS]).max())

    hp = {k: c[k] for k in ("n_embd", "n_head", "n_head_kv", "d_head", "n_ff", "n_layer", "eps",
                            "rope_base", "tied")}
    hp.update(n_vocab=n_vocab, n_ctx_train=c["n_ctx"],
              rope_type="norm (GGUF rows permuted; HF rotate_half on unpermuted rows)"
              if c["family"] == "llama" else "neox",
              attn_scale=1.0 / math.sqrt(c["d_head"]),
              sliding_window=c.get("swa") or None,
              swa_layers=[il for il in range(c["n_layer"]) if layer_is_swa(c, il)])
    if c["family"] == "gemma3":
        hp.update(embd_scale=math.sqrt(c["n_embd"]), query_pre_attn_scalar=c["d_head"],
                  rope_base_swa=c["rope_base_swa"] or 10000.0, swa_pattern=c["swa_pattern"],
                  swa_pattern_in_gguf=c["write_pattern"], rope_base_swa_in_gguf=bool(c["rope_base_swa"]),
                  final_logit_softcapping=None)
    if c.get("rope_scaling"):
        hp["rope_scaling"] = {"type": c["rope_scaling"][0], "factor": c["rope_scaling"][1],
                              "layers": "global only" if c["family"] == "gemma3" else "all"}
        if c["rope_scaling"][0] == "yarn":
            hp["rope_scaling"].update(original_context_length=c["yarn_orig_ctx"], ext_factor=1.0,
                                      beta_fast=32.0, beta_slow=1.0, attn_factor=1.0,
                                      mscale=1.0 + 0.1 * math.log(c["rope_scaling"][1]))
    if "rope_freqs.weight" in W:
        hp["rope_freqs"] = floats(W["rope_freqs.weight"])
        hp["llama3_rope_source"] = c["llama3_rope"]
    hp["tensor_types"] = {name: qt.name for name, _, qt in stored}

    doc = {
        "case": c["case"], "arch": c["arch"], "gguf": c["case"] + ".gguf", "gguf_sha256": digest,
        "generator": "tools/gen_arch_goldens.py (numpy %s, gguf %s, float64 forward)"
                     % (np.__version__, importlib.metadata.version("gguf")),
        "tokens": tokens, "positions": POSITIONS,
        "logits": [floats(logits[p]) for p in POSITIONS],
        "hparams": hp, "sensitivity_max_abs_diff": sens,
        "notes": NOTES[c["case"]],
    }
    with open(os.path.join(out, c["case"] + ".json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    L = logits[POSITIONS]
    print("%-14s n_vocab %3d  %7d bytes  logit std %.2f  max|l| %.2f  sens %s"
          % (c["case"], n_vocab, os.path.getsize(path), L.std(axis=1).mean(), np.abs(L).max(), sens))
    return path, W, tokens, logits


def crosscheck(only):
    """--crosscheck: every case again with all tensors F32 (so no quantised
    activations blur the comparison), run through llama.cpp by way of
    llama-cpp-python, and compared with this forward and with each variant
    that drops one convention. Prints max |diff| over POSITIONS; the golden
    convention should be the nearest by orders of magnitude, except where
    llama.cpp knowingly differs (mistral's sliding window)."""
    import tempfile
    from llama_cpp import Llama
    tmp = tempfile.mkdtemp(prefix="archgold-")
    for c in CASES:
        if only and c["case"] not in only:
            continue
        path, W, tokens, logits = build(c, tmp, all_f32=True)
        llm = Llama(model_path=path, n_ctx=64, n_batch=64, n_ubatch=64, n_threads=1,
                    logits_all=True, type_k=0, type_v=0, flash_attn=False, verbose=False)  # F32 KV cache
        llm.eval(tokens)
        got = np.array(llm.scores[:len(tokens)], dtype=np.float64)[POSITIONS]
        del llm
        rows = [("golden", logits)] + [(label, forward(c, W, tokens, opt)) for label, opt in variants_of(c)]
        if c["family"] == "gemma3":
            rows.insert(1, ("golden_with_ggml_fp16_gelu", forward(c, W, tokens, {"ggml_gelu": True})))
        print("%-14s " % c["case"] + "  ".join("%s %.3g" % (label, np.abs(got - L[POSITIONS]).max())
                                               for label, L in rows))
        os.unlink(path)
    os.rmdir(tmp)


NOTES = {
    "gemma3": "Gemma 3 layout with key_length 32 != n_embd/n_head and 1 KV head. GGUF norm weights already "
              "hold 1 + w (converter adds 1), so every RMSNorm is x/rms*g. sliding_window 8, "
              "attention.sliding_window_pattern 3 written (layers 2 and 5 global), rope.freq_base 1e6 on global "
              "layers, rope.freq_base_swa 1000 written (non-default on purpose) on sliding layers. Tied output.",
    "gemma3_linear": "No sliding_window_pattern and no freq_base_swa keys: defaults 6 (only layer 5 global) and "
                     "10000. rope.scaling.type linear, factor 8 applies to the global layer only "
                     "(llama.cpp: freq_scale_swa stays 1). Tied output.",
    "llama": "Llama 2 / TinyLlama style: SentencePiece vocab, GQA 4/2, separate output.weight, ffn_down Q4_K. "
             "attn_q/attn_k rows permuted as the converter does; llama.cpp applies adjacent-pair (NORM) RoPE.",
    "llama_tied": "SmolLM2 style: byte-level BPE vocab (pre smollm), MHA 4/4, no output.weight (logits use "
                  "token_embd, here Q8_0).",
    "llama3": "Llama 3.x style: BPE vocab (pre llama-bpe), rope_freqs.weight (8 floats) divides the per-pair "
              "frequencies; computed with the converter's llama3 formula but original context 64 (real: 8192) "
              "so the factors bite at 48 tokens. key_length/value_length written. Separate output.weight.",
    "qwen2": "Qwen2.5-0.5B style: q/k/v biases, NEOX RoPE, tied output, ffn_down Q6_K, 2 [PAD] tokens at the "
             "end of the vocab (rows of token_embd).",
    "qwen2_yarn": "YaRN: rope.scaling.type yarn, factor 4, original_context_length 64, freq_base 10000 "
                  "(chosen so the ramp is partial at pairs 1-2 of 8). Untied output.",
    "mistral": "Mistral v0.1 style (arch llama): llama.attention.sliding_window 8 on every layer. NOTE: "
               "llama.cpp's converter does not write this key for Mistral and llama.cpp ignores it for arch "
               "llama; HF MistralForCausalLM applies config.sliding_window to every layer, which is what this "
               "golden does.",
    "phi3": "Phi-3 style: fused attn_qkv [q; k; v] rows (GQA 4/2 here; Phi-3-mini is MHA), fused ffn_up rows "
            "[gate; up] (2*n_ff), SiLU, NEOX RoPE. phi3.attention.sliding_window 2047 and "
            "rope.scaling.original_context_length 4096 written as the converter does; both are inert at 48 "
            "tokens (llama.cpp disables Phi-3 SWA).",
}


def main():
    args = sys.argv[1:]
    only = set(os.environ.get("ARCHGOLD_ONLY", "").split(",")) - {""}
    if args[:1] == ["--crosscheck"]:
        crosscheck(only)
        return
    out = args[0] if args else "tests/data/arch"
    os.makedirs(out, exist_ok=True)
    for c in CASES:
        if not only or c["case"] in only:
            build(c, out)


if __name__ == "__main__":
    main()
