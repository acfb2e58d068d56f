#!/bin/sh
# router_split.sh - splits sekv eval's pinned corpus BY FILE into the
# trained router's training and held-out lists (assets/router_train.sha256,
# assets/router_heldout.sha256): a file goes to held-out when the first hex
# digit of the MD5 of its path is c..f (about a quarter), else to training.
# The documents of bench/qa/questions.jsonl are in neither list (the QA
# benchmark tunes prompts on them, so they are neither training nor clean
# held-out text). Run from the repository root; deterministic.
set -eu
corpus=assets/eval_corpus.sha256
qa=$(grep -o '"doc": *"[^"]*"' bench/qa/questions.jsonl | sed 's/.*"\([^"]*\)"$/\1/' | sort -u)
train=assets/router_train.sha256
held=assets/router_heldout.sha256
echo "# trained router: training files (tools/router_split.sh over $corpus, bench/qa documents left out)" > "$train"
echo "# trained router: held-out files (tools/router_split.sh over $corpus, bench/qa documents left out)" > "$held"
grep -v '^#' "$corpus" | while read -r sha path; do
	if printf '%s\n' "$qa" | grep -qxF "$path"; then
		continue
	fi
	d=$(printf '%s' "$path" | md5sum | cut -c1)
	case "$d" in
	c|d|e|f) echo "$sha  $path" >> "$held" ;;
	*) echo "$sha  $path" >> "$train" ;;
	esac
done
