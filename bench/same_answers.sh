#!/bin/sh
# same_answers.sh - shows that a change of structure changed no answer:
# ingests the sample with each of two builds (-t 1, throw-away libraries)
# and asks the three bench questions with --kv full and with SeKV, greedy,
# then compares the answers byte for byte.
#   sh bench/same_answers.sh OLD_BIN_DIR NEW_BIN_DIR
# (each a folder holding a `sekv` binary; NEW defaults to bin/). Prints one
# line per answer (`same` or `DIFFERENT`) and exits 1 when any differs.
# Thread counts above 1 may reorder float sums (README), so -t 1 only.
set -e
cd "$(dirname "$0")/.."
OLD=${1:?usage: same_answers.sh OLD_BIN_DIR [NEW_BIN_DIR]}
NEW=${2:-bin}
MODEL=${MODEL:-assets/models/gemma-3-270m-q4_k_m.gguf}
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
N=${BENCH_N:-48}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

answers() { # answers BIN_DIR OUT_DIR
	mkdir -p "$2"
	id=$("$1/sekv" ingest "$SAMPLE" -m "$MODEL" --db "$2/lib.db" -t 1 -q | tail -n 1)
	i=0
	for q in "What must you do when you convey a covered work in object code form?" \
		 "What does the LGPL allow you to do with a combined work?" \
		 "Is there any warranty for the program?"; do
		i=$((i + 1))
		for mode in full sekv; do
			"$1/sekv" ask "$id" "$q" -m "$MODEL" --db "$2/lib.db" --kv $mode -n "$N" -t 1 \
				> "$2/q$i.$mode" 2> /dev/null
		done
	done
}

answers "$OLD" "$TMP/old"
answers "$NEW" "$TMP/new"
bad=0
for f in q1.full q1.sekv q2.full q2.sekv q3.full q3.sekv; do
	if cmp -s "$TMP/old/$f" "$TMP/new/$f"; then
		echo "same      $f: $(head -c 70 "$TMP/new/$f" | tr '\n' ' ')"
	else
		echo "DIFFERENT $f"
		echo "  old: $(head -c 200 "$TMP/old/$f" | tr '\n' ' ')"
		echo "  new: $(head -c 200 "$TMP/new/$f" | tr '\n' ' ')"
		bad=1
	fi
done
exit $bad
