"""attn_rules.py - evidence scoring rules compared by attn_study.py.

A rule maps one question's dump (mass [step][head][pos], steps, passages)
to a score per passage; recall@k is whether the expected answer lies in
one of the k best passages' text.
"""
import collections
import re
import sqlite3

import numpy as np


class Q:
    """One question's dump, reduced to what the rules need."""

    def __init__(self, q, meta, m, pid, bounds, text):
        self.q, self.meta = q, meta
        self.heads = [tuple(h) for h in meta["heads"]]
        self.pid, self.bounds = pid, bounds
        self.text = text
        self.n_pas = len(bounds)
        doc = pid >= 0
        self.qflag = np.array([s["q"] for s in meta["steps"]])
        self.toks = meta["ids"]
        # mass per step, head, passage (document positions only)
        mp = np.zeros((m.shape[0], m.shape[1], self.n_pas), dtype=np.float64)
        for s in range(m.shape[0]):
            for h in range(m.shape[1]):
                mp[s, h] = np.bincount(pid[doc], weights=m[s, h, doc], minlength=self.n_pas)
        self.mp = mp
        self.mdoc = m[:, :, doc].sum(axis=2)                     # [step][head] mass on doc
        self.tokmax = None
        exp = q["answer"].encode()
        self.hit = np.array([exp in text[b0:b1] for b0, b1 in bounds])


def recall(qs, scores, k):
    hits = []
    for q, s in zip(qs, scores):
        top = np.argsort(-s, kind="stable")[:k]
        hits.append(bool(q.hit[top].any()))
    return sum(hits) / len(hits)


def bm25_scores(q):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE p USING fts5(i UNINDEXED, body)")
    db.executemany("INSERT INTO p(i, body) VALUES (?, ?)",
                   [(i, q.text[b0:b1].decode("utf-8", "replace")) for i, (b0, b1) in enumerate(q.bounds)])
    terms = re.findall(r"\w+", q.q["question"])
    s = np.zeros(q.n_pas)
    if terms:
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        for i, b in db.execute("SELECT i, bm25(p) FROM p WHERE p MATCH ?", (match,)):
            s[i] = -b  # fts5 bm25(): lower is better
    return s


def steps_mask(q, which, prefix_len, suffix_len):
    n = len(q.qflag)
    nq = int(q.qflag.sum())
    idx = np.arange(n)
    if which == "all":
        return np.ones(n, bool)
    if which == "question":
        return q.qflag == 1
    if which == "qtext":
        return (idx >= prefix_len) & (idx < nq - suffix_len)
    if which == "after":  # the engine's: every token from the question's text on
        return idx >= prefix_len
    if which == "qtext+ans":
        return ((idx >= prefix_len) & (idx < nq - suffix_len)) | (q.qflag == 0)
    if which == "answer":
        return q.qflag == 0
    if which == "template":
        return idx < prefix_len
    raise ValueError(which)


def score(q, heads, which, norm, prefix_len, suffix_len, contrast=0.0):
    hi = [q.heads.index(h) for h in heads]
    sm = steps_mask(q, which, prefix_len, suffix_len)
    mp = q.mp[:, hi, :]
    if norm == "row":  # each step and head spreads 1 over the document
        mp = mp / np.maximum(mp.sum(axis=2, keepdims=True), 1e-12)
    s = mp[sm].sum(axis=(0, 1))
    if contrast:
        base = mp[steps_mask(q, "template", prefix_len, suffix_len)].sum(axis=(0, 1))
        base = base / max(base.sum(), 1e-12) * s.sum()
        s = s - contrast * base
    return s


def template_lengths(qs):
    """Token counts of the fixed turn text before and after the question."""
    seqs = [q.toks[:int(q.qflag.sum())] for q in qs]
    pre = 0
    while all(len(s) > pre and s[pre] == seqs[0][pre] for s in seqs):
        pre += 1
    suf = 0
    while all(len(s) > suf and s[-1 - suf] == seqs[0][-1 - suf] for s in seqs):
        suf += 1
    return pre, suf


def rank_of(s):
    r = np.empty(len(s))
    r[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
    return r


def fuse(a, b, k=60):
    return 1.0 / (k + rank_of(a)) + 1.0 / (k + rank_of(b))


def study(args, qs_raw, texts, methods, load, passages_of):
    for method in methods:
        qs = []
        for i, qr in enumerate(qs_raw):
            meta, m = load(f"{args.work}/{method}-{i:03d}")
            text = meta["text"].encode()
            pid, bounds = passages_of(meta["start"], len(text))
            qs.append(Q(qr, meta, m, pid, bounds, text))
        pre, suf = template_lengths(qs)
        heads = qs[0].heads
        print(f"== {method}: {len(qs)} questions, template {pre}+{suf} tokens, "
              f"passages/doc {np.mean([q.n_pas for q in qs]):.0f}, "
              f"answer straddles a passage boundary: {sum(not q.hit.any() for q in qs)}")
        bm = [bm25_scores(q) for q in qs]
        print(f"bm25 (same passages)              @1 {recall(qs, bm, 1):.3f} @3 {recall(qs, bm, 3):.3f}")
        cur = [(5, 1), (5, 2), (11, 2)]
        for which in ("all", "question", "qtext", "qtext+ans", "answer"):
            for norm in ("raw", "row"):
                sc = [score(q, cur, which, norm, pre, suf) for q in qs]
                print(f"{'5:1,5:2,11:2':14s} {which:10s} {norm:4s}   @1 {recall(qs, sc, 1):.3f} "
                      f"@3 {recall(qs, sc, 3):.3f}")
        print("single heads (qtext, row):")
        line = []
        for h in heads:
            sc = [score(q, [h], "qtext", "row", pre, suf) for q in qs]
            line.append(f"{h[0]}:{h[1]} {recall(qs, sc, 3):.2f}")
        print("  " + "  ".join(line))
        sc = [score(q, cur, "after", "raw", pre, suf, contrast=1.0) for q in qs]
        print(f"engine rule: from the question's text on, minus fixed part   @1 {recall(qs, sc, 1):.3f} "
              f"@3 {recall(qs, sc, 3):.3f}")
        for which in ("all", "qtext"):
            for c in (0.5, 1.0):
                sc = [score(q, cur, which, "row", pre, suf, contrast=c) for q in qs]
                print(f"contrast {c:.1f} {which:10s} row         @1 {recall(qs, sc, 1):.3f} "
                      f"@3 {recall(qs, sc, 3):.3f}")
        for which in ("all", "qtext"):
            sc = [fuse(score(q, cur, which, "row", pre, suf), b) for q, b in zip(qs, bm)]
            print(f"rrf(attn {which}, bm25)                 @1 {recall(qs, sc, 1):.3f} @3 {recall(qs, sc, 3):.3f}")
        # leave-one-document-out greedy head selection
        docs = list(dict.fromkeys(q.q["doc"] for q in qs))
        for which in ("all", "qtext"):
            hits1 = hits3 = 0
            chosen = collections.Counter()
            for d in docs:
                train = [q for q in qs if q.q["doc"] != d]
                test = [q for q in qs if q.q["doc"] == d]
                sel, best = [], -1
                while len(sel) < 4:
                    cand = []
                    for h in heads:
                        if h in sel:
                            continue
                        sc = [score(q, sel + [h], which, "row", pre, suf) for q in train]
                        cand.append((recall(train, sc, 3) + 0.1 * recall(train, sc, 1), h))
                    v, h = max(cand)
                    if v <= best:
                        break
                    sel.append(h)
                    best = v
                chosen.update(sel)
                sc = [score(q, sel, which, "row", pre, suf) for q in test]
                hits1 += recall(test, sc, 1) * len(test)
                hits3 += recall(test, sc, 3) * len(test)
            print(f"LODO greedy heads {which:10s}          @1 {hits1 / len(qs):.3f} @3 {hits3 / len(qs):.3f}"
                  f"   picked: {dict(chosen)}")
