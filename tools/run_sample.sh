#!/bin/sh
# run_sample.sh - `make run`: ingest the bundled sample document once with
# the model in SEKV_MODEL (the library keeps it; later runs open the stored
# copy without prefilling again) and open the chat UI on it. A copy
# ingested by another model is not reused (its memory is that model's KV).
set -e
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
TITLE="GNU GPL 3 + LGPL 3 (sample)"
MODEL_FILE=$(basename "${SEKV_MODEL:-}")
id=$(./bin/sekv ls -q 2>/dev/null | awk -F '\t' -v t="$TITLE" -v m="$MODEL_FILE" \
	'$NF == t && (m == "" || $(NF - 1) == m) && $2 == "ready" { print $1 }' | tail -n 1)
if [ -z "$id" ]; then
	echo "run: ingesting the sample document with ${MODEL_FILE:-the default model} (one-time prefill)..."
	id=$(./bin/sekv ingest "$SAMPLE" --title "$TITLE" | tail -n 1)
fi
exec ./bin/sekv chat "$id"
