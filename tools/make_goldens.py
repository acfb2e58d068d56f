#!/usr/bin/env python3
"""make_goldens.py - golden data from an independent implementation.

Reference: llama.cpp through llama-cpp-python (PyPI; `make bench-deps`
or `pip install llama-cpp-python` builds it). Not run by CI; the outputs
are committed under tests/golden/:

  tokenizer_gemma3.json  token ids of >= 20 strings (no BOS, special-token
                         parsing off, as sekv tokenizes document text)
  logits_gemma3.json     top-10 next-token logits at 5 positions of a
                         ~1,500-token prompt (longer than the 512 window)

usage: tools/make_goldens.py [MODEL.gguf] [OUTDIR]
"""
import json
import os
import sys

from llama_cpp import Llama

MODEL = sys.argv[1] if len(sys.argv) > 1 else "assets/models/gemma-3-270m-q4_k_m.gguf"
OUT = sys.argv[2] if len(sys.argv) > 2 else "tests/golden"

STRINGS = [
    "Hello world",
    " Hello world",
    "Hello  world   with    runs",
    "\ttab\tseparated\tvalues\t",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    "   leading and trailing spaces   ",
    "1234567890 3.14159 2026-11-29 1,000,000",
    "日本語のテキストと中文文本",
    "한국어 문장입니다.",
    "Emoji: 😀🎉👍🏽 and flags 🇫🇷",
    "<start_of_turn>user\nHi<end_of_turn>",
    "<bos> is literal text here <eos>",
    "Ünïcödé àccents: café, naïve, Ångström",
    "def f(x):\n    return x ** 2  # square\n",
    "https://example.org/path?q=1&r=two#frag",
    "ALL CAPS AND lowercase MiXeD",
    "Tabs\t\tand\n\nnewlines\r\nmixed",
    "Привет, мир! Ελληνικά κείμενα.",
    "a",
    "",
    "The GNU General Public License is a free, copyleft license for software.",
    "<unused0> <mask> [multimodal] <start_of_image>",
    "x" * 50,
    "Mr. O'Neill's \"quoted\" text — with dashes – and … ellipses",
]


def main():
    llm = Llama(model_path=MODEL, n_ctx=2048, n_batch=512, n_threads=os.cpu_count(),
                logits_all=True, verbose=False)
    cases = []
    for s in STRINGS:
        ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=False)
        cases.append({"text": s, "ids": list(ids)})
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer_gemma3.json"), "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(MODEL), "reference": "llama.cpp via llama-cpp-python",
                   "cases": cases}, f, ensure_ascii=False, indent=1)

    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        text = f.read()
    ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)[:1500]
    llm.reset()
    llm.eval(ids)
    # One position per fifth of the prompt (two beyond the 512 window and
    # beyond 1,024), each where the reference's top-6 logits are best
    # separated: llama.cpp rounds activations to 8 bits, so near-ties in
    # its top-5 say nothing about order; well-separated ones must match.
    import numpy as np
    scores = np.array(llm.scores[:len(ids)])
    top6 = -np.sort(-scores, axis=1)[:, :6]
    gap = (top6[:, :-1] - top6[:, 1:]).min(axis=1)
    bounds = [1 + i * (len(ids) - 1) // 5 for i in range(6)]
    positions = [a + int(np.argmax(gap[a:b])) for a, b in zip(bounds, bounds[1:])]
    top = []
    for p in positions:
        row = llm.scores[p]
        order = sorted(range(len(row)), key=lambda i: -float(row[i]))[:10]
        top.append([{"id": int(i), "logit": float(row[i])} for i in order])
    with open(os.path.join(OUT, "logits_gemma3.json"), "w") as f:
        json.dump({"model": os.path.basename(MODEL), "reference": "llama.cpp via llama-cpp-python",
                   "prompt_ids": list(map(int, ids)), "positions": positions,
                   "min_top6_gap": [float(gap[p]) for p in positions], "top": top}, f)
    print("wrote", len(cases), "tokenizer cases and", len(positions), "logit rows")


if __name__ == "__main__":
    main()
