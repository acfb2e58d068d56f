#!/usr/bin/env python3
"""llamacpp_smoke.py MODEL.gguf... - checks that the installed llama.cpp
(llama-cpp-python, `make bench-deps`) loads each GGUF file and generates:
a short greedy completion of one prompt per model, its text and speed.
`make bench-deps` runs it on the default model, where a llama.cpp built for
the wrong instruction set fails first (the AMX crash). Exit status 1 when a
model does not load or generates nothing; a crash ends the process.

usage: python3 tools/llamacpp_smoke.py [-n TOKENS] [-t THREADS] MODEL...
"""
import argparse
import os
import sys
import time

try:
    import llama_cpp
    from llama_cpp import Llama
except ImportError as e:
    sys.exit(f"llamacpp_smoke: import llama_cpp: {e} (run `make bench-deps`)")

PROMPT = "The GNU General Public License is"
GGML_LOG_LEVEL_ERROR = 4


@llama_cpp.llama_log_callback
def _log(level, text, user_data):
    """llama.cpp's log, its errors only (on stderr)."""
    if level == GGML_LOG_LEVEL_ERROR and text:
        sys.stderr.write(text.decode("utf-8", "replace"))


def smoke(path, n, threads):
    """Loads path, greedily completes PROMPT with up to n tokens; prints
    one line; returns True when at least one token came out."""
    t0 = time.perf_counter()
    try:
        llm = Llama(model_path=path, n_ctx=512, n_threads=threads,
                    n_threads_batch=threads, verbose=False)
    except (ValueError, RuntimeError) as e:
        print(f"FAIL {path}: load: {e}")
        return False
    t1 = time.perf_counter()
    out = llm.create_completion(PROMPT, max_tokens=n, temperature=0.0, top_k=1)
    t2 = time.perf_counter()
    n_out = out["usage"]["completion_tokens"]
    text = out["choices"][0]["text"].replace("\n", "\\n")
    arch = llm.metadata.get("general.architecture", "?")
    print(f"ok {os.path.basename(path)} ({arch}): load {t1 - t0:.1f} s, "
          f"{n_out} tokens in {t2 - t1:.2f} s ({n_out / (t2 - t1):.1f} tok/s "
          f"with the prompt): {PROMPT}{text[:160]}")
    return n_out > 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=32, help="tokens to generate")
    ap.add_argument("-t", type=int, default=os.cpu_count() or 1, help="threads")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    llama_cpp.llama_log_set(_log, None)
    ok = True
    for m in a.models:
        ok = smoke(m, a.n, a.t) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
