#!/usr/bin/env python3
"""decode_speed.py - `make bench` case (issue 9 part 5): decode tokens/s of
full KV and SeKV over the same stored document at about the longest context
the model allows, beside the ideal speed-up from the bytes each decoded token
reads, ending with `RATIO sekv_decode_vs_ideal X`; and, from the ingest, the
time building the memory takes against the prefill (`RATIO
build_vs_prefill X`).

The document is this machine's licence texts (/usr/share/common-licenses),
repeated in a fixed order up to --tokens tokens, ingested once into a
throw-away library. Each method answers the same questions --repeat times,
alternating full and SeKV so that both see the same machine load. The
decode figure counts the answers' tokens (ask --json decode_tps: sampled
tokens, each one step through the KV method). The question turn's tokens are
reported apart: with SeKV each of them also pays the output projection
whose surprisal the session keeps for segmenting the turn into the memory
(issue 10), a cost of growing the conversation, not of decoding.

Bytes read per decoded token (DESIGN.md section 6 names):
  full: weights + full_kv_bytes + swa_bytes
  sekv: weights + kv_read_bytes_per_token (resident rows + the factors the
        step rebuilt) + swa_bytes
weights = the GGUF file's size (every tensor is read once per token; the
few MiB of vocabulary metadata make the ideal slightly smaller than true).
ideal = full / sekv; measured = sekv tokens/s / full tokens/s.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

QUESTIONS = [
    "What must you do when you convey a covered work in object code form?",
    "Is there any warranty for the program?",
    "What happens to your licence if you violate the terms?",
]


def run(cmd, stderr=None):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"decode_speed: {' '.join(cmd[:3])}: {p.stderr.strip()}")
    if stderr is not None:
        stderr.append(p.stderr)
    return p.stdout


def build_share(log):
    """Segmentation + summaries + factors against prefill time (issue 19's
    target: at most 0.25), from ingest's summary line "ingest: prefill Xs
    (...), chunks committed in Ys, memory built in Zs"."""
    m = re.search(r"ingest: prefill ([0-9.]+)s .* memory built in ([0-9.]+)s", log)
    if not m:
        return None
    prefill, build = float(m.group(1)), float(m.group(2))
    print(f"ingest: prefill {prefill:.1f} s, memory built (segmentation, summaries, "
          f"landmarks, factors) in {build:.1f} s")
    print(f"RATIO build_vs_prefill {build / prefill:.3f}")
    return build / prefill


def build_doc(path, tokens):
    """Licence texts in name order, repeated, cut to about `tokens` tokens
    (4.5 bytes per token measured on these texts; the ingest says the exact
    count)."""
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    parts, size, want = [], 0, int(tokens * 4.5)
    while size < want and files:
        for f in files:
            try:
                t = open(f, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            parts.append(t)
            size += len(t)
            if size >= want:
                break
    text = "\n\n".join(parts)[:want]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sekv", default="./bin/sekv")
    ap.add_argument("--model", default="assets/models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--tokens", type=int, default=30000,
                    help="document tokens (Gemma 3 270M holds 32768 with the question)")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--threads", default=os.environ.get("SEKV_THREADS", "2"))
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--reuse", nargs=2, metavar=("DB", "DOC"),
                    help="answer over document DOC of library DB (ingested by an earlier run) "
                         "instead of ingesting again")
    a = ap.parse_args()

    if a.reuse:
        db, doc_id = a.reuse
        print(f"== decode speed: document {doc_id} of {db}", flush=True)
    else:
        tmp = tempfile.mkdtemp()
        db, doc = os.path.join(tmp, "speed.db"), os.path.join(tmp, "licences.txt")
        build_doc(doc, a.tokens)
        print(f"== decode speed: ingest {os.path.getsize(doc)} bytes (about {a.tokens} tokens) "
              f"into {db}", flush=True)
        log = []
        doc_id = run([a.sekv, "ingest", doc, "--db", db, "-m", a.model, "-t", a.threads,
                      "--keep-full-kv"], log).split()[-1]
        build_share(log[0])

    tot = {"full": [0, 0.0], "sekv": [0, 0.0]}
    ques = {"full": [0, 0.0], "sekv": [0, 0.0]}
    read = {"full": [], "sekv": []}
    last = {}
    for r in range(a.repeat):
        for q in QUESTIONS:
            for kv in ("full", "sekv") if r % 2 == 0 else ("sekv", "full"):
                j = json.loads(run([a.sekv, "ask", doc_id, q, "--db", db, "-m", a.model,
                                    "--kv", kv, "-n", str(a.n), "--no-evidence", "--json",
                                    "-t", a.threads]))
                tot[kv][0] += j["answer_tokens"]
                tot[kv][1] += j["answer_tokens"] / max(j["decode_tps"], 1e-9)
                ques[kv][0] += j["question_tokens"]
                ques[kv][1] += j["question_s"]
                if j["answer_tokens"] > 0:
                    read[kv].append(j["kv_read_bytes_per_token"])
                last[kv] = j
    tps = {k: v[0] / v[1] for k, v in tot.items()}
    w = os.path.getsize(a.model)
    full_kv, swa = last["full"]["full_kv_bytes"], last["full"]["swa_bytes"]
    sekv_read = sum(read["sekv"]) / max(len(read["sekv"]), 1)
    b_full, b_sekv = w + full_kv + swa, w + sekv_read + swa
    ideal, measured = b_full / b_sekv, tps["sekv"] / tps["full"]
    print(f"document: {last['full']['length']} tokens; weights {w / 2**20:.1f} MiB, "
          f"full KV {full_kv / 2**20:.1f} MiB, sliding-window rows {swa / 2**20:.1f} MiB")
    print(f"full KV: {tps['full']:.2f} tokens/s, {b_full / 2**20:.1f} MiB read per token")
    print(f"SeKV:    {tps['sekv']:.2f} tokens/s, {b_sekv / 2**20:.1f} MiB read per token "
          f"(KV {sekv_read / 2**20:.2f} MiB: resident rows + rebuilt factors)")
    print(f"question turns: full KV {ques['full'][0] / ques['full'][1]:.2f} tokens/s, SeKV "
          f"{ques['sekv'][0] / ques['sekv'][1]:.2f} tokens/s (SeKV also scores every question "
          f"token's surprisal for the session's memory)")
    print(f"answers: {tot['full'][0]} tokens with full KV, {tot['sekv'][0]} with SeKV")
    print(f"speed-up: measured {measured:.3f}x, ideal {ideal:.3f}x")
    print(f"RATIO sekv_decode_vs_ideal {measured / ideal:.3f}")


if __name__ == "__main__":
    main()
