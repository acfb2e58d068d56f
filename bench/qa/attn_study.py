#!/usr/bin/env python3
"""attn_study.py - how should evidence be scored? A study over the QA
benchmark's questions (bench/qa/questions.jsonl).

Every question is asked once per method through bin/sekv-attn-dump, which
records the attention mass of every query head of every global layer on
every document position, step by step (question tokens, then answer
tokens). Scoring rules (which heads, which steps, how mass is normalised
and pooled into the engine's 80-token passages) are then compared offline
by evidence recall@1/@3, with BM25 (SQLite FTS5) over the same passages
beside them. Heads chosen on the benchmark itself are reported with
leave-one-document-out selection, so a rule is never scored on the
questions it was picked on.

usage: python3 bench/qa/attn_study.py [--work DIR] [--methods full,sekv]
Needs numpy (pip install numpy). Dumps are kept in --work (default
build/attn-study) and reused.
"""
import argparse
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run_qa  # noqa: E402  (question loading, document reading)

PASSAGE = 80


def ingest(args, docs, texts_files):
    db = os.path.join(args.work, "qa.db")
    idfile = os.path.join(args.work, "ids.json")
    ids = json.load(open(idfile)) if os.path.exists(idfile) else {}
    for doc in docs:
        if doc in ids:
            continue
        cmd = [args.bin, "ingest", texts_files[doc], "-q", "--keep-full-kv", "--db", db, "-t", str(args.threads),
               "-m", args.model]
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode:
            sys.exit(f"ingest {doc}: {p.stderr}")
        ids[doc] = p.stdout.strip().splitlines()[-1]
        json.dump(ids, open(idfile, "w"))
    return db, ids


def dump(args, db, docid, q, method, out):
    if os.path.exists(out + ".json"):
        return
    cmd = [args.dump, out, docid, q, "--db", db, "-t", str(args.threads), "-m", args.model,
           "--kv", method, "-n", "32", "--temp", "0", "-q"]
    if method == "sekv":
        cmd += ["--budget", str(args.budget)]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit(f"dump {q!r}: {p.stderr}")


def load(out):
    meta = json.load(open(out + ".json"))
    nh, npos = len(meta["heads"]), meta["n_pos"]
    m = np.fromfile(out + ".bin", dtype=np.float32).reshape(len(meta["steps"]), nh, npos)
    return meta, m


def passages_of(start, text_len):
    """Passage id per position (-1: not document) and [start, end) per passage,
    as engine/evidence/evidence.c cuts them."""
    pid = np.full(len(start), -1, dtype=np.int64)
    bounds, k = [], 0
    for i, s in enumerate(start):
        if s < 0:
            continue
        if k % PASSAGE == 0:
            if bounds:
                bounds[-1][1] = s
            bounds.append([0 if not bounds else s, text_len])
        pid[i] = len(bounds) - 1
        k += 1
    return pid, bounds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "attn-study"))
    ap.add_argument("--methods", default="full")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "sekv"))
    ap.add_argument("--dump", default=os.path.join(ROOT, "bin", "sekv-attn-dump"))
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--budget", type=float, default=0.10)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--dump-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    qs = run_qa.load_questions(os.path.join(HERE, "questions.jsonl"))
    texts, files = {}, {}
    for doc in dict.fromkeys(q["doc"] for q in qs):
        t, f = run_qa.read_doc(doc, args.work)
        if t is not None:
            texts[doc], files[doc] = t, f
    qs = [q for q in qs if q["doc"] in texts]
    db, ids = ingest(args, list(texts), files)
    methods = args.methods.split(",")
    for method in methods:
        for i, q in enumerate(qs):
            dump(args, db, ids[q["doc"]], q["question"], method, os.path.join(args.work, f"{method}-{i:03d}"))
            print(f"\r{method} dumped {i + 1}/{len(qs)}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    if args.dump_only:
        return
    from attn_rules import study  # the rules under test live beside this script
    study(args, qs, texts, methods, load, passages_of)


if __name__ == "__main__":
    main()
