#!/usr/bin/env python3
"""llamacpp_bench.py - tokens/s of llama.cpp on one GGUF file, the
counterpart of bin/sekv-bench (same CLI, same output line).

Drives llama.cpp through llama-cpp-python's low-level ctypes API
(`make bench-deps`). n_batch = n_ubatch = B like our engine; other context
parameters are llama.cpp's defaults (flash attention "auto", f16 KV cache).
Only the llama_decode calls (and reading the logits pointer) are timed.
Prints `tok_s X peak_rss_mib Y bytes_per_token 0`. Works on any GGUF
llama.cpp loads; `--tokenize FILE` instead prints FILE's token ids by the
model's own tokenizer (its BOS when the model adds one), for models our
tokenizer cannot read.
"""
import argparse
import ctypes
import os
import resource
import sys
import time

try:
    import llama_cpp as L
except ImportError as e:
    sys.exit(f"llamacpp_bench: import llama_cpp: {e} (run `make bench-deps`)")

LOG_LINES = []


@L.llama_log_callback
def _log(level, text, user_data):
    """Keeps llama.cpp's log out of the output; --info prints parts of it."""
    LOG_LINES.append(text.decode("utf-8", "replace") if text else "")


def fail(msg):
    print(f"llamacpp_bench: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", dest="model", required=True)
    ap.add_argument("-t", dest="threads", type=int, default=0)
    ap.add_argument("--tokens")
    ap.add_argument("--mode", choices=["prefill", "prefill_surprisal", "decode"])
    ap.add_argument("-n", dest="n", type=int, default=0)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--verify", action="store_true",
                    help="print mean -log p of the scored tokens on stderr")
    ap.add_argument("--info", action="store_true",
                    help="print llama.cpp's version and attention settings on stderr")
    ap.add_argument("--tokenize", metavar="FILE",
                    help="print FILE's token ids (UTF-8 text) and exit")
    a = ap.parse_args()
    if a.tokenize:
        return a
    if not a.tokens or not a.mode or not a.n:
        fail("options: -m, --tokens, --mode and -n are required")
    if a.n < 1 or a.ctx < 1 or a.batch < 1 or a.threads < 0:
        fail("options: -n, --ctx, --batch must be >= 1 and -t >= 0")
    return a


def read_tokens(path, need):
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError as e:
        fail(f"open: {path}: {e.strerror}")
    ids = []
    for i, w in enumerate(words):
        if not w.isdigit() or int(w) > 0x7FFFFFFF:
            fail(f"read tokens: {path}: field {i + 1} '{w}' is not a token id")
        ids.append(int(w))
    if len(ids) < need:
        fail(f"read tokens: {path}: {len(ids)} ids, this run needs {need}")
    return ids


def nll_rows(logits, n_vocab, rows, targets):
    """Sum of -log softmax(logits[r])[t] over (r, t); numpy, untimed."""
    import numpy as np
    a = np.ctypeslib.as_array(logits, shape=(max(rows) + 1, n_vocab))
    x = a[rows].astype(np.float64)
    mx = x.max(axis=1)
    lse = mx + np.log(np.exp(x - mx[:, None]).sum(axis=1))
    return float((lse - x[np.arange(len(rows)), targets]).sum())


class Bench:
    """One model and context; batch holds up to n_batch tokens of seq 0."""

    def __init__(self, a, n_ctx):
        L.llama_log_set(_log, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(a.model.encode(), mp)
        if not self.model:
            fail(f"load: {a.model}: llama.cpp could not load it")
        cp = L.llama_context_default_params()
        cp.n_ctx = (n_ctx + 255) // 256 * 256
        cp.n_batch = cp.n_ubatch = a.batch
        # like our engine, 0 means all cores (llama.cpp's own default is 4)
        cp.n_threads = cp.n_threads_batch = a.threads or os.cpu_count() or 1
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            fail(f"context: {a.model}: n_ctx {cp.n_ctx}: llama.cpp could not create it")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(a.batch, 0, 1)
        self.n_batch = a.batch
        self.pos = 0

    def clear(self):
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        self.pos = 0

    def decode(self, ids, all_logits, last_logits):
        """Runs ids (<= n_batch) at the next positions; returns (seconds,
        logits pointer). Logits for every token or only the last one."""
        b = self.batch
        b.n_tokens = len(ids)
        for i, t in enumerate(ids):
            b.token[i] = t
            b.pos[i] = self.pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = int(all_logits or (last_logits and i == len(ids) - 1))
        t0 = time.perf_counter()
        rc = L.llama_decode(self.ctx, b)
        out = None
        if rc == 0 and (all_logits or last_logits):
            out = L.llama_get_logits(self.ctx)
            out[0]  # reads the buffer, so nothing is left pending
        dt = time.perf_counter() - t0
        if rc != 0:
            fail(f"llama_decode: {len(ids)} tokens at {self.pos}: returned {rc}")
        self.pos += len(ids)
        return dt, out

    def check_outputs(self, n, all_logits, last_logits):
        """The last batch of n tokens produced the logit rows asked for:
        rows 0 and n-1 for all_logits, n-1 for last_logits (untimed)."""
        rows = [0, n - 1] if all_logits else [n - 1] if last_logits else []
        for i in rows:
            if not L.llama_get_logits_ith(self.ctx, i):
                fail(f"logits: batch row {i} of {n} missing")

    def prefill(self, ids, all_logits, last_logits, verify_nll=None):
        """Prefills ids in chunks of n_batch; returns the decode seconds."""
        secs = 0.0
        for p in range(0, len(ids), self.n_batch):
            chunk = ids[p:p + self.n_batch]
            last = last_logits and p + self.n_batch >= len(ids)
            dt, out = self.decode(chunk, all_logits, last)
            secs += dt
            self.check_outputs(len(chunk), all_logits, last)
            if verify_nll is not None and all_logits:
                # row r predicts chunk[r + 1]; the first token of the next
                # chunk is predicted by this chunk's last row
                nxt = ids[p + 1:p + len(chunk) + 1]
                verify_nll[0] += nll_rows(out, self.n_vocab, list(range(len(nxt))), nxt)
                verify_nll[1] += len(nxt)
        return secs


def tokenize(a):
    """Prints the ids of a.tokenize's text on one line; the model's special
    tokens (its BOS) are added as the model asks, text is not parsed for
    them. Loads the vocabulary only."""
    L.llama_log_set(_log, ctypes.c_void_p(0))
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        fail(f"load: {a.model}: llama.cpp could not load it")
    try:
        # without its final newlines, like the text the shell's "$(cat FILE)"
        # gives our tokenizer in compare_llamacpp.sh
        with open(a.tokenize, "rb") as f:
            text = f.read().rstrip(b"\n")
    except OSError as e:
        fail(f"open: {a.tokenize}: {e.strerror}")
    vocab = L.llama_model_get_vocab(model)
    n_max = len(text) + 16
    buf = (L.llama_token * n_max)()
    n = L.llama_tokenize(vocab, text, len(text), buf, n_max, True, False)
    if n < 0:
        fail(f"tokenize: {a.tokenize}: needs {-n} ids, room for {n_max}")
    print(" ".join(str(buf[i]) for i in range(n)))
    L.llama_model_free(model)


def info():
    """llama.cpp's version and the settings it chose, from its log."""
    keys = ("flash_attn", "Flash Attention", "n_ctx ", "n_batch", "n_ubatch",
            "n_outputs_max ", "SWA cache", "KV buffer", "output buffer",
            "compute buffer", "model buffer")
    print(f"llama.cpp {L.llama_version().decode()} "
          f"(llama-cpp-python {L.__version__})", file=sys.stderr)
    print(L.llama_print_system_info().decode().strip(), file=sys.stderr)
    for line in "".join(LOG_LINES).splitlines():
        if any(k in line for k in keys):
            print("  " + line.strip(), file=sys.stderr)


def main():
    a = parse_args()
    if a.tokenize:
        tokenize(a)
        return
    decode = a.mode == "decode"
    ids = read_tokens(a.tokens, a.ctx + a.n if decode else a.n)
    bench = Bench(a, a.ctx + a.n if decode else a.n)
    if any(t >= bench.n_vocab for t in ids[:a.ctx + a.n if decode else a.n]):
        fail(f"read tokens: {a.tokens}: an id is outside the vocabulary ({bench.n_vocab})")
    # One untimed token faults the weights in and builds the graphs (our
    # engine warms up the same way); then the cache is emptied.
    bench.decode(ids[:1], False, True)
    bench.clear()
    nll = [0.0, 0]
    if not decode:
        secs = bench.prefill(ids[:a.n], a.mode == "prefill_surprisal", True,
                             nll if a.verify else None)
    else:
        bench.prefill(ids[:a.ctx], False, False)
        secs = 0.0
        for i in range(a.n):
            dt, out = bench.decode(ids[a.ctx + i:a.ctx + i + 1], False, True)
            secs += dt
            if a.verify and i + 1 < a.n:
                nll[0] += nll_rows(out, bench.n_vocab, [0], [ids[a.ctx + i + 1]])
                nll[1] += 1
    if a.verify and nll[1]:
        first = ids[a.ctx] if decode else ids[0]
        last = ids[a.ctx + a.n - 1] if decode else ids[a.n - 1]
        print(f"verify: n_tokens {a.n} first {first} last {last} "
              f"n_scored {nll[1]} mean_nll {nll[0] / nll[1]:.4f}", file=sys.stderr)
    if a.info:
        info()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"tok_s {a.n / secs if secs > 0 else 0.0:.3f} "
          f"peak_rss_mib {rss:.1f} bytes_per_token 0")


if __name__ == "__main__":
    main()
