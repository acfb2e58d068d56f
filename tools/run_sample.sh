#!/bin/sh
# run_sample.sh - `make run`: ingest the bundled sample document once (the
# library keeps it; later runs resume it without prefilling again) and open
# the chat UI on it.
set -e
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
TITLE="GNU GPL 3 + LGPL 3 (sample)"
id=$(./bin/sekv ls -q 2>/dev/null | awk -F '\t' -v t="$TITLE" '$2 == t && $0 !~ /incomplete|ingesting/ { print $1 }' | tail -n 1)
if [ -z "$id" ]; then
	echo "run: ingesting the sample document (one-time prefill)..."
	id=$(./bin/sekv ingest "$SAMPLE" --title "$TITLE" | tail -n 1)
fi
exec ./bin/sekv chat "$id"
