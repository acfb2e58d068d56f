#!/usr/bin/env python3
"""llamacpp_qa.py - the QA benchmark's questions answered by llama.cpp, the
reference sekv's `--kv full` answer accuracy is held against (issue 18:
"not below llama.cpp's on the same model and questions").

Same questions, documents and check as run_qa.py (its functions are
imported, not copied), the same prompt an instruction-tuned model gets
from sekv (app/app.h APP_DOC_SYSTEM as the system message, the document
as the first user message, the question as the next user message,
rendered by the GGUF's own chat template through llama-cpp-python's
Jinja2 formatter), greedy, at most -n tokens (32, as run_qa.py), full KV.
The system text is read from app/app.h so the two stay one.
Prints answer_acc and writes one JSON record per question to --out.

usage: bench/qa/llamacpp_qa.py --model MODEL.gguf [-n 32] [-t 2] [--limit N]
Needs llama-cpp-python (make bench-deps).
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run_qa  # noqa: E402


def app_doc_system():
    """APP_DOC_SYSTEM's string from app/app.h (adjacent C literals joined)."""
    src = open(os.path.join(ROOT, "app", "app.h"), encoding="utf-8").read()
    m = re.search(r"#define APP_DOC_SYSTEM\s*\\?\s*((?:\"(?:[^\"\\]|\\.)*\"\s*\\?\s*)+)", src)
    if not m:
        run_qa.die("APP_DOC_SYSTEM not found in app/app.h")
    return "".join(json.loads(s) for s in re.findall(r"\"(?:[^\"\\]|\\.)*\"", m.group(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--questions", default=os.path.join(HERE, "questions.jsonl"))
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-qa-llamacpp.jsonl"))
    a = ap.parse_args()
    from llama_cpp import Llama

    system = app_doc_system()
    qs = run_qa.load_questions(a.questions)
    tmp = tempfile.mkdtemp(prefix="sekv-llamacpp-qa-")
    texts = {}
    for doc in dict.fromkeys(q["doc"] for q in qs):
        text, _ = run_qa.read_doc(doc, tmp)
        if text is not None:
            texts[doc] = text
    run_qa.check(qs, texts)
    qs = [q for q in qs if q["doc"] in texts]
    if a.limit > 0:
        qs = qs[:a.limit]
    llm = Llama(model_path=a.model, n_ctx=a.n_ctx, n_batch=512, n_threads=a.threads, verbose=False)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t0 = time.monotonic()
    ok = 0
    with open(a.out, "w", encoding="utf-8") as out:
        for i, q in enumerate(qs, 1):
            msgs = [{"role": "system", "content": system},
                    {"role": "user", "content": texts[q["doc"]]},
                    {"role": "user", "content": q["question"]}]
            r = llm.create_chat_completion(messages=msgs, temperature=0.0, top_k=1,
                                           max_tokens=a.n_predict)
            ans = r["choices"][0]["message"]["content"] or ""
            correct = q["answer"] in ans
            ok += correct
            out.write(json.dumps({"method": "llama.cpp", "doc": q["doc"], "question": q["question"],
                                  "expected": q["answer"], "answer": ans, "correct": correct}) + "\n")
            print(f"[{i:3d}/{len(qs)}] {'ok ' if correct else '-- '} {q['answer']!r:28.28s} <- "
                  f"{ans.strip()[:70]!r}", flush=True)
    print(f"llama.cpp QA: {len(qs)} questions, -n {a.n_predict}, {a.threads} threads, "
          f"{(time.monotonic() - t0) / 60:.1f} min: answer_acc {ok / len(qs):.3f} ({ok} of {len(qs)})")


if __name__ == "__main__":
    main()
