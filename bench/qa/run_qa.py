#!/usr/bin/env python3
"""run_qa.py - `make bench-qa`: question answering over real documents.

Reads bench/qa/questions.jsonl ({"doc", "question", "answer"} per line; the
documents are files of a Debian machine, referenced by path, never copied
here), checks that every expected answer occurs verbatim (case-sensitive)
in its document and not in its question (any violation stops the run), then
ingests each document once into a throw-away library and asks every
question with `--kv full` and with SeKV at `--budget` (default 0.10).

Reported per method (DESIGN.md section 6):
  answer_acc         the answer contains the expected string (case-sensitive)
  evidence_recall@k  the expected string lies inside the text of one of the
                     top-k passages of `ask --json`'s `evidence` field; "n/a"
                     while the binary does not emit that field
and a lexical baseline for evidence: BM25 (SQLite FTS5 bm25()) over the
same passages as the engine's evidence (`ask --evidence-top` large lists
every passage with its text), and, for reference, over the file cut into
non-overlapping ~60-word passages.

One JSON record per question and method goes to --out (JSON lines):
method, budget, task "qa", correct, full_correct, doc, question, expected,
answer, stopped (when the binary reports it), evidence_at_1/evidence_at_3
(null when absent), bm25_same_at_1/bm25_same_at_3 (the engine's passages),
bm25_at_1/bm25_at_3 (60-word passages), plus timing fields.

Python 3 standard library only.
"""
import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PASSAGE_WORDS = 60  # ~80 Gemma tokens of English prose
METHODS = ("full", "sekv", "streaming", "snapkv", "h2o", "quest", "summary")  # sekv ask --kv
EVERY_PASSAGE = 1 << 20  # --evidence-top: every passage, for BM25 over the same ones


def die(msg):
    print(f"bench-qa: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_questions(path):
    qs = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                q = json.loads(line)
            except json.JSONDecodeError as e:
                die(f"{path}:{i}: not JSON: {e}")
            for k in ("doc", "question", "answer"):
                if not isinstance(q.get(k), str) or not q[k]:
                    die(f"{path}:{i}: missing or empty '{k}'")
            q["line"] = i
            qs.append(q)
    return qs


def read_doc(path, tmpdir):
    """The document's text and the file to ingest (.gz decompressed into
    tmpdir); None when the file is missing."""
    if not os.path.isfile(path):
        return None, None
    if path.endswith(".gz"):
        out = os.path.join(tmpdir, os.path.basename(path)[:-3])
        with gzip.open(path, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = out
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(), path


def check(qs, texts):
    """Every expected string in its document, none in its question."""
    bad = []
    for q in qs:
        text = texts.get(q["doc"])
        if text is None:
            continue
        if q["answer"] not in text:
            bad.append(f"line {q['line']}: answer {q['answer']!r} not found verbatim in {q['doc']}")
        if q["answer"] in q["question"]:
            bad.append(f"line {q['line']}: answer {q['answer']!r} occurs in the question")
    if bad:
        print("bench-qa: CHECK FAILED:", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        sys.exit(1)


def passages(text, words=PASSAGE_WORDS):
    """Non-overlapping windows of `words` whitespace-separated words:
    list of (start, end) char offsets into text."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    out = []
    for i in range(0, len(spans), words):
        chunk = spans[i:i + words]
        out.append((chunk[0][0], chunk[-1][1]))
    return out


class BM25:
    """One in-memory FTS5 table of every document's passages."""

    def __init__(self):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE p USING fts5(doc UNINDEXED, start UNINDEXED, "
                        "end UNINDEXED, body)")

    def add(self, doc, text):
        rows = [(doc, s, e, text[s:e]) for s, e in passages(text)]
        return self.add_passages(doc, rows)

    def add_passages(self, doc, rows):
        """rows: (doc, start, end, text) per passage."""
        self.db.executemany("INSERT INTO p(doc, start, end, body) VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def rank(self, doc, question, k):
        terms = re.findall(r"\w+", question)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        cur = self.db.execute("SELECT start, end, body FROM p WHERE p MATCH ? AND doc = ? "
                              "ORDER BY bm25(p) LIMIT ?", (match, doc, k))
        return cur.fetchall()


def evidence_hits(ev, expected, text):
    """[hit@1, hit@3] from an `evidence` list, None when absent."""
    if not isinstance(ev, list):
        return None
    def key(i_e):
        i, e = i_e
        r = e.get("rank") if isinstance(e, dict) else None
        return (r if isinstance(r, (int, float)) else i + 1, i)
    ranked = [e for _, e in sorted(enumerate(ev), key=key)]
    hits = []
    for e in ranked[:3]:
        if not isinstance(e, dict):
            hits.append(False)
            continue
        t = e.get("text")
        if not isinstance(t, str) and isinstance(e.get("start"), int) and isinstance(e.get("end"), int):
            t = text[e["start"]:e["end"]]
        hits.append(isinstance(t, str) and expected in t)
    return [any(hits[:1]), any(hits[:3])]


def run(cmd, timeout):
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return p, time.monotonic() - t0


def fmt(x):
    return "n/a" if x is None else f"{x:.3f}"


def share(vals):
    vals = [v for v in vals if v is not None]
    return (sum(1 for v in vals if v) / len(vals)) if vals else None


def main():
    ap = argparse.ArgumentParser(description="QA benchmark: answer accuracy and evidence recall, "
                                 "full KV vs SeKV, with a BM25 evidence baseline")
    ap.add_argument("--questions", default=os.path.join(HERE, "questions.jsonl"))
    ap.add_argument("--limit", type=int, default=0, help="first N questions (after --docs)")
    ap.add_argument("--docs", default="", help="comma-separated substrings; keep documents whose path contains one")
    ap.add_argument("--methods", default="full,sekv", help="comma-separated `sekv ask --kv` values: "
                    "full, sekv, and the rivals at the same budget: streaming, snapkv, h2o, quest, summary")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-qa.jsonl"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "sekv"))
    ap.add_argument("--model", default=os.environ.get("SEKV_MODEL", ""),
                    help="GGUF model (default: the binary's default)")
    ap.add_argument("-n", "--n-predict", type=int, default=int(os.environ.get("BENCH_QA_N", "32")))
    ap.add_argument("--budget", type=float, default=0.10, help="SeKV budget (default 0.10)")
    ap.add_argument("-t", "--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per sekv call")
    ap.add_argument("--ask-args", default="", help="extra `sekv ask` options, e.g. \"--quote\"")
    ap.add_argument("--ingest-args", default="", help="extra `sekv ingest` options, e.g. "
                    "\"--rank-energy 0.99\"")
    ap.add_argument("--library", default="", help="keep the library in FILE (default: a throw-"
                    "away one); a document already there, ready, with the same title and model, "
                    "is reused without a new ingest")
    ap.add_argument("--rebuild-args", default=None, help="with --library: build each reused "
                    "document's memory again with these `sekv ingest --rebuild` options, e.g. "
                    "\"--budget 0.3 --recent 16\" (\"\": the defaults)")
    ap.add_argument("--check-only", action="store_true", help="only check the questions against the documents")
    ap.add_argument("--quiet", action="store_true", help="no line per question")
    args = ap.parse_args()

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            die(f"unknown method {m!r} ({', '.join(METHODS)})")
    methods.sort(key=lambda m: m != "full")  # full first: its result is each SeKV record's full_correct

    qs = load_questions(args.questions)
    if args.docs:
        keys = [d for d in args.docs.split(",") if d]
        qs = [q for q in qs if any(k in q["doc"] for k in keys)]

    tmp = tempfile.mkdtemp(prefix="sekv-bench-qa-")
    try:
        texts, files = {}, {}
        for doc in dict.fromkeys(q["doc"] for q in qs):
            text, path = read_doc(doc, tmp)
            if text is None:
                n = sum(1 for q in qs if q["doc"] == doc)
                print(f"bench-qa: skip {doc}: file missing ({n} questions skipped)", file=sys.stderr)
                continue
            texts[doc], files[doc] = text, path
        check(qs, texts)  # all questions of present documents, before --limit
        qs = [q for q in qs if q["doc"] in texts]
        if args.limit > 0:
            qs = qs[:args.limit]
        if not qs:
            die("no questions to run")
        ndocs = len(dict.fromkeys(q["doc"] for q in qs))
        print(f"bench-qa: check passed: {len(qs)} questions over {ndocs} documents")
        if args.check_only:
            return
        if not os.access(args.bin, os.X_OK):
            die(f"{args.bin} missing: run make all first")

        common = ["--db", args.library or os.path.join(tmp, "qa.db"), "-t", str(args.threads)]
        if args.model:
            common += ["-m", args.model]

        bm25 = BM25()       # ~60-word passages of the file's text
        bm25_same = BM25()  # the engine's own passages (every passage of `evidence`)
        same_docs = set()
        t_start = time.monotonic()
        ids = {}
        have = {}
        if args.library and os.path.exists(args.library):
            p, _ = run([args.bin, "ls"] + common[:2], args.timeout)
            model = os.path.basename(args.model) if args.model else None
            for line in p.stdout.splitlines():
                f = line.split("\t")
                if len(f) >= 7 and f[1] == "ready" and (model is None or f[5] == model):
                    have[f[6]] = f[0]
        for doc in dict.fromkeys(q["doc"] for q in qs):
            npass = bm25.add(doc, texts[doc])
            title = os.path.basename(files[doc])
            if title in have:
                ids[doc] = have[title]
                dt = 0.0
                if args.rebuild_args is not None:
                    p, dt = run([args.bin, "ingest", "--rebuild", ids[doc], "-q"] + common +
                                shlex.split(args.rebuild_args), args.timeout)
                    if p.returncode != 0:
                        die(f"rebuild {doc} failed ({p.returncode}): {p.stderr.strip()}")
                print(f"reuse {doc}: id {ids[doc]}, rebuilt in {dt:.1f} s, {npass} BM25 passages",
                      flush=True)
                continue
            # a new document's memory is built as --rebuild-args says for reused ones
            p, dt = run([args.bin, "ingest", files[doc], "-q", "--keep-full-kv"] + common +
                        shlex.split(args.ingest_args) + shlex.split(args.rebuild_args or ""),
                        args.timeout)
            if p.returncode != 0:
                die(f"ingest {doc} failed ({p.returncode}): {p.stderr.strip()}")
            ids[doc] = p.stdout.strip().splitlines()[-1]
            print(f"ingest {doc}: id {ids[doc]}, {dt:.1f} s, {npass} BM25 passages", flush=True)

        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        out = open(args.out, "w", encoding="utf-8")
        recs = {m: [] for m in methods}
        bm, bm_same = [], []
        for i, q in enumerate(qs, 1):
            doc, exp = q["doc"], q["answer"]
            top = bm25.rank(doc, q["question"], 3)
            b = [any(exp in r[2] for r in top[:1]), any(exp in r[2] for r in top[:3])]
            bm.append(b)
            bs = None
            full_correct = None
            for m in methods:
                cmd = [args.bin, "ask", ids[doc], q["question"], "--kv", m, "-n", str(args.n_predict),
                       "--json", "--temp", "0", "-q", "--evidence-top", str(EVERY_PASSAGE)] + common
                if m != "full":
                    cmd += ["--budget", str(args.budget)]
                cmd += shlex.split(args.ask_args)
                p, dt = run(cmd, args.timeout)
                j, err = {}, None
                if p.returncode != 0:
                    err = p.stderr.strip() or f"exit {p.returncode}"
                else:
                    try:
                        j = json.loads(p.stdout)
                    except json.JSONDecodeError as e:
                        err = f"bad JSON: {e}"
                answer = j.get("answer", "") if isinstance(j.get("answer"), str) else ""
                correct = err is None and exp in answer
                if m == "full":
                    full_correct = correct
                ev = evidence_hits(j.get("evidence"), exp, texts[doc]) if err is None else None
                if doc not in same_docs and isinstance(j.get("evidence"), list) and j["evidence"]:
                    rows = [(doc, e["start"], e["end"], e["text"]) for e in j["evidence"]
                            if isinstance(e, dict) and isinstance(e.get("text"), str)]
                    bm25_same.add_passages(doc, rows)
                    same_docs.add(doc)
                if bs is None and doc in same_docs:
                    top_s = bm25_same.rank(doc, q["question"], 3)
                    bs = [any(exp in r[2] for r in top_s[:1]), any(exp in r[2] for r in top_s[:3])]
                    bm_same.append(bs)
                rec = {"method": m, "budget": 1.0 if m == "full" else args.budget, "task": "qa",
                       "correct": correct, "full_correct": full_correct,
                       "doc": doc, "question": q["question"], "expected": exp, "answer": answer,
                       "evidence_at_1": ev[0] if ev else None, "evidence_at_3": ev[1] if ev else None,
                       "bm25_at_1": b[0], "bm25_at_3": b[1],
                       "bm25_same_at_1": bs[0] if bs else None, "bm25_same_at_3": bs[1] if bs else None,
                       "ask_s": round(dt, 3)}
                if "stopped" in j:
                    rec["stopped"] = j["stopped"]
                if isinstance(j.get("evidence"), list):
                    rec["evidence"] = [{k: e.get(k) for k in ("rank", "start", "end", "score")}
                                       for e in j["evidence"][:3] if isinstance(e, dict)]
                for k in ("answer_tokens", "decode_tps", "resident_ratio", "length", "device_tier",
                          "full_kv_bytes", "resident_bytes"):
                    if k in j:
                        rec[k] = j[k]
                if err:
                    rec["error"] = err
                recs[m].append(rec)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                if not args.quiet:
                    mark = "ERR" if err else ("ok " if correct else "-- ")
                    shown = (err or answer).replace("\n", "\\n")[:70]
                    print(f"[{i:3d}/{len(qs)}] {m:4s} {mark} {exp!r:28.28s} <- {shown}", flush=True)
        out.close()
        wall = time.monotonic() - t_start

        print()
        print(f"QA benchmark: {len(qs)} questions, {ndocs} documents, -n {args.n_predict}, "
              f"{args.threads} threads, {wall / 60:.1f} min" + (f", ask {args.ask_args}" if args.ask_args else "")
              + (f", ingest {args.ingest_args}" if args.ingest_args else ""))
        head = f"{'method':8s} {'budget':>6s} {'n':>4s} {'answer_acc':>10s} {'ev_recall@1':>11s} {'ev_recall@3':>11s}"
        print(head)
        print("-" * len(head))
        for m in methods:
            rs = recs[m]
            acc = share([r["correct"] for r in rs])
            e1 = share([r["evidence_at_1"] for r in rs])
            e3 = share([r["evidence_at_3"] for r in rs])
            bud = "1.00" if m == "full" else f"{args.budget:.2f}"
            errs = sum(1 for r in rs if "error" in r)
            print(f"{m:8s} {bud:>6s} {len(rs):4d} {fmt(acc):>10s} {fmt(e1):>11s} {fmt(e3):>11s}"
                  + (f"   ({errs} errors)" if errs else ""))
        print(f"{'bm25':8s} {'-':>6s} {len(bm_same):4d} {'n/a':>10s} {fmt(share([b[0] for b in bm_same])):>11s} "
              f"{fmt(share([b[1] for b in bm_same])):>11s}   (the engine's passages)")
        print(f"{'bm25-60w':8s} {'-':>6s} {len(bm):4d} {'n/a':>10s} {fmt(share([b[0] for b in bm])):>11s} "
              f"{fmt(share([b[1] for b in bm])):>11s}   (60-word passages)")
        for m in methods:
            if m != "full" and recs.get("full") and recs[m]:
                both = sum(1 for a, s in zip(recs["full"], recs[m]) if a["correct"] and s["correct"])
                print(f"{m} correct where full is correct: {both} of {sum(r['correct'] for r in recs['full'])}")
        stops = {}
        for m in methods:
            for r in recs[m]:
                if "stopped" in r:
                    stops.setdefault(m, {}).setdefault(str(r["stopped"]), 0)
                    stops[m][str(r["stopped"])] += 1
        for m, s in stops.items():
            print(f"stopped ({m}): " + ", ".join(f"{k} {v}" for k, v in sorted(s.items())))
        print(f"records: {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
