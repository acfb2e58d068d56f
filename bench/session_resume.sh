#!/bin/sh
# session_resume.sh - the session targets of issue 10: a 30-turn session
# over a document, resumed by a new process (resume_s, model and tokenizer
# loading excluded) against prefilling the same number of tokens
# (prefill_s of an ingest of that many tokens of the sample), and the disk
# bytes of the document and of the session against full_kv_bytes (the
# sliding-window rows included).
#   sh bench/session_resume.sh [DOC_BYTES]
# DOC_BYTES: bytes of the sample the document takes (default 400: a short
# document, so the turns are most of the memory; 42803: the whole sample,
# about 9K tokens). Prints one line per figure. Not run by CI.
set -e
cd "$(dirname "$0")/.."
MODEL=${MODEL:-assets/models/gemma-3-270m-q4_k_m.gguf}
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
DOC_BYTES=${1:-400}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
S="./bin/sekv"
A="-m $MODEL --db $TMP/lib.db -t 2 -q"

head -c "$DOC_BYTES" "$SAMPLE" > "$TMP/doc.txt"
doc=$($S ingest "$TMP/doc.txt" $A | tail -n 1)
$S ask "$doc" "Note for later: my locker code is 4817." $A -n 8 --no-evidence --temp 0 \
	--json > "$TMP/first.json"
for i in $(seq 2 29); do
	$S ask --session 1 "Question $i: what does the license say about copies?" $A -n 16 \
		--no-evidence --temp 0 > /dev/null
done
$S ask --session 1 "What is my locker code?" $A -n 8 --no-evidence --temp 0 --budget 0.3 \
	--json > "$TMP/last.json"
n_tok=$($S sessions $A | cut -f5 | cut -d' ' -f1)
n_doc=$(sqlite3 "$TMP/lib.db" "SELECT n_tok FROM documents WHERE id = $doc")
python3 - "$TMP/last.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
print("answer after 30 turns: %r, resume_s %.3f" % (j["answer"], j["resume_s"]))
EOF
sqlite3 "$TMP/lib.db" "SELECT 'document prefill_s ' || prefill_s || ' for ' || n_tok || ' tokens' FROM documents"
python3 -c "import json, sys; print('document resume_s %.3f (first question)' % json.load(open(sys.argv[1]))['resume_s'])" "$TMP/first.json"
# disk against full KV, the sliding-window rows included: the document
# alone (text apart), and the document with its 30-turn session (the full
# KV of all their tokens)
python3 - "$TMP/first.json" "$TMP/last.json" <<'EOF'
import json, sys
f, l = (json.load(open(p)) for p in sys.argv[1:3])
row = f["full_kv_bytes"] / f["memory_tokens"]
doc, doc_full = f["disk_bytes"] - f["session_disk_bytes"], row * f["length"]
print("document: %d tokens, disk_bytes %d, full_kv_bytes %d, swa_bytes %d: disk/full %.3f"
      % (f["length"], doc, doc_full, f["swa_bytes"], doc / doc_full))
print("document + session: %d tokens, disk_bytes %d (session %d), full_kv_bytes %d: disk/full %.3f"
      % (l["memory_tokens"], l["disk_bytes"], l["session_disk_bytes"], l["full_kv_bytes"],
         l["disk_bytes"] / l["full_kv_bytes"]))
EOF
# the same number of tokens prefilled: a prefix of the sample that long
total=$((n_doc + n_tok))
bytes=$((total * 5))
while :; do
	# the sample twice over when one copy is too short
	cat "$SAMPLE" "$SAMPLE" | head -c "$bytes" > "$TMP/same.txt"
	got=$($S tokenize -m "$MODEL" -- "$(cat "$TMP/same.txt")" | wc -w)
	[ "$got" -ge "$total" ] && break
	bytes=$((bytes + bytes / 4))
done
$S ingest "$TMP/same.txt" -m "$MODEL" --db "$TMP/prefill.db" -t 2 -q > /dev/null
sqlite3 "$TMP/prefill.db" "SELECT 'prefill_s ' || prefill_s || ' for ' || n_tok || ' tokens' FROM documents"
echo "tokens: document $n_doc, session $n_tok (prefilled for comparison: $got)"
sqlite3 "$TMP/lib.db" "SELECT 'session disk bytes: slices ' ||
	((SELECT SUM(length(spans) + length(exact_pos) + length(ranks) + length(tokens) +
	 length(surprisal) + length(is_anchor)) FROM session_part) +
	(SELECT SUM(length(k_bar) + length(v_bar) + length(exact_k) + length(exact_v) +
	 length(fac_s) + length(fac_u) + length(fac_v) + IFNULL(length(lm_k), 0) +
	 IFNULL(length(lm_s), 0)) FROM session_part_layer)) ||
	', sliding-window rows ' || (SELECT SUM(length(k) + length(v)) FROM session_swa)"
$S ls $A
