#!/bin/sh
# run.sh - `make bench`: the end-to-end figures of the sample document in
# one run (prefill and decode tokens/s, resident and host bytes against the
# full KV cache, resume vs prefill time, zoomed spans per token), with three
# questions answered with --kv full and with SeKV side by side.
# Uses a throw-away library; threads from SEKV_THREADS (default: all cores).
set -e
cd "$(dirname "$0")/.."
DB=$(mktemp -d)/bench.db
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
S=./bin/sekv
N=${BENCH_N:-48}

echo "== ingest $SAMPLE"
t0=$(date +%s.%N)
id=$($S ingest "$SAMPLE" --db "$DB" 2>ingest.log | tail -n 1)
t1=$(date +%s.%N)
cat ingest.log; rm -f ingest.log
echo "ingest wall: $(echo "$t1 - $t0" | bc) s"

for q in "What must you do when you convey a covered work in object code form?" \
	 "What does the LGPL allow you to do with a combined work?" \
	 "Is there any warranty for the program?"; do
	for mode in full sekv; do
		$S ask "$id" "$q" --db "$DB" --kv $mode -n $N --json > ask.json
		python3 - "$mode" "$q" <<'PY'
import json, sys
j = json.load(open("ask.json"))
mode, q = sys.argv[1], sys.argv[2]
full = j["full_kv_bytes"]
print(f"-- [{mode}] {q}")
print(f"   answer: {j['answer'][:400]!r}")
print(f"   decode_tps {j['decode_tps']:.2f}  resume_s {j['resume_s']:.3f}  prefill_s {j['prefill_s']}"
      f"  resident/full {j['resident_bytes']/full:.4f}  host/full {j['host_bytes']/full:.4f}"
      f"  disk/full {j['disk_bytes']/full:.3f}  zoom/token {j.get('zoom_per_token', 0):.2f}")
PY
	done
done
rm -f ask.json
