#!/bin/sh
# compare_llamacpp.sh [-m NAME|PATH] [--rival-only] - `make bench-compare`:
# our engine against llama.cpp on the same GGUF file and the same token ids
# (the sample document), with the same batch size and thread count,
# alternating runs and taking medians. Cases: prefill 512 and 4096 tokens,
# prefill with every token's -log p (512), decode 128 tokens after a
# 4096-token context (the long lengths shrink to fit a model trained on a
# shorter context); then the decode bytes per token against this machine's
# copy bandwidth (bin/sekv-membw). Ends with five `RATIO name X` lines
# (ours/llama.cpp).
# -m (or MODEL): a model name of assets/recipes/ or a GGUF path, default
# gemma-3-270m. Any architecture both sides load; the ids come from our
# tokenizer, or from llama.cpp's where ours cannot read the vocabulary.
# --rival-only: the rival's runs alone (no ratios), for a model our engine
# cannot load yet. Needs bin/sekv, bin/sekv-bench, bin/sekv-membw and
# llama-cpp-python (`make bench-deps`). RIVAL_BIN=DIR (`make bench-compare
# RIVAL_BIN=DIR`) puts another build's DIR/sekv-bench in llama.cpp's place,
# e.g. the build before a change: the same cases, runs and medians, ratios
# this build / that one.
set -e
cd "$(dirname "$0")/.."
MODEL=${MODEL:-gemma-3-270m}
T=${BENCH_THREADS:-2}
REPS=${BENCH_REPS:-3}
SAMPLE=assets/samples/gnu-gpl-3-and-lgpl-3.txt
CTX=4096
N_DECODE=128
N_SHORT=512
N_LONG=4096
ONLY_RIVAL=0

die() {
	echo "compare_llamacpp: $*" >&2
	exit 1
}

usage="usage: compare_llamacpp.sh [-m NAME|PATH] [--rival-only]"
while [ $# -gt 0 ]; do
	case $1 in
	-m)
		[ $# -ge 2 ] || die "-m needs a model name or path"
		MODEL=$2
		shift 2
		;;
	--rival-only) ONLY_RIVAL=1 && shift ;;
	-h | --help) echo "$usage" && exit 0 ;;
	*) die "$1: unknown option; $usage" ;;
	esac
done
MODEL_ARG=$MODEL
MODEL=$(sh assets/fetch_model.sh --path "$MODEL")

RIVAL_BIN=${RIVAL_BIN:-}
if [ -n "$RIVAL_BIN" ]; then
	RIVAL="build $RIVAL_BIN"
	[ -x "$RIVAL_BIN/sekv-bench" ] || die "$RIVAL_BIN/sekv-bench: missing"
else
	RIVAL=llama.cpp
fi
# rival ARGS...: one run of the other side with sekv-bench's arguments
rival() {
	if [ -n "$RIVAL_BIN" ]; then
		"$RIVAL_BIN/sekv-bench" "$@"
	else
		python3 bench/llamacpp_bench.py "$@"
	fi
}

if [ -z "$RIVAL_BIN" ] && ! python3 -c 'import llama_cpp' 2>/dev/null; then
	die "python3: llama_cpp: not importable; run \`make bench-deps\` (installs llama-cpp-python)"
fi
for b in bin/sekv bin/sekv-bench bin/sekv-membw; do
	[ -x "$b" ] || die "$b: missing; run \`make bin/sekv bin/sekv-bench bin/sekv-membw\`"
done
[ -r "$MODEL" ] || die "$MODEL: not readable; run \`make model MODEL=$MODEL_ARG\`
  (names: \`sh assets/fetch_model.sh --list\`) or give a GGUF path"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT HUP TERM

# The trained context bounds the long cases (read from the GGUF header:
# general.architecture, then ARCH.context_length).
n_ctx_train=$(./bin/sekv inspect "$MODEL" 2> /dev/null | awk '
	$1 == "general.architecture:" { a = $4; gsub(/"/, "", a) }
	$1 ~ /\.context_length:$/ { k = $1; sub(/:$/, "", k); c[k] = $4 }
	END { print c[a ".context_length"] + 0 }')
if [ "$n_ctx_train" -gt 0 ] && [ "$n_ctx_train" -lt $((CTX + N_DECODE)) ]; then
	[ "$n_ctx_train" -ge $((2 * N_SHORT)) ] ||
		die "$MODEL: trained context $n_ctx_train: too short for these cases"
	CTX=$((n_ctx_train - N_DECODE))
	[ "$N_LONG" -le "$n_ctx_train" ] || N_LONG=$n_ctx_train
	echo "note: $MODEL: trained context $n_ctx_train: prefill $N_LONG, decode after $CTX"
fi

TOK=$TMP/tokens
if ./bin/sekv tokenize -m "$MODEL" --bos -- "$(cat "$SAMPLE")" > "$TOK" 2> "$TMP/err"; then
	tok_by="our tokenizer"
elif [ -z "$RIVAL_BIN" ]; then
	python3 bench/llamacpp_bench.py -m "$MODEL" --tokenize "$SAMPLE" > "$TOK" 2> "$TMP/err2" ||
		die "tokenize: ours: $(cat "$TMP/err"); llama.cpp: $(cat "$TMP/err2")"
	tok_by="llama.cpp's tokenizer (ours: $(cat "$TMP/err"))"
else
	die "tokenize: $(cat "$TMP/err")"
fi
n_tok=$(wc -w < "$TOK")
if [ "$n_tok" -lt $((CTX + N_DECODE)) ] || [ "$n_tok" -lt "$N_LONG" ]; then
	die "$SAMPLE: $n_tok tokens, the cases need $((CTX + N_DECODE))"
fi

# A short untimed run of each side first, so a model one side cannot load
# says so at once and not after the waits below.
if [ "$ONLY_RIVAL" = 0 ]; then
	./bin/sekv-bench -m "$MODEL" -t "$T" --tokens "$TOK" --mode prefill -n 16 \
		> /dev/null 2> "$TMP/err" ||
		die "our engine cannot run $MODEL: $(tail -n 3 "$TMP/err")
  (--rival-only times $RIVAL alone)"
fi
rival -m "$MODEL" -t "$T" --tokens "$TOK" --mode prefill -n 16 > /dev/null 2> "$TMP/err" ||
	die "$RIVAL cannot run $MODEL: $(tail -n 3 "$TMP/err")"

echo "== $RIVAL comparison: $MODEL, $T threads, $REPS runs each (medians), $n_tok sample tokens"
echo "   (token ids: $tok_by)"
[ "$ONLY_RIVAL" = 0 ] || echo "   (--rival-only: $RIVAL's runs alone, no ratios)"
# Other processes on the cores distort both sides (llama.cpp's spinning
# OpenMP threads most). cpu_busy SECONDS: percent of the CPUs busy over that
# time; wait_quiet: waits (up to 60 s) for them to fall to 10% before a run.
cpu_busy() {
	(head -n 1 /proc/stat; sleep "$1"; head -n 1 /proc/stat) 2>/dev/null | awk '
		{ idle = $5 + $6; tot = 0; for (i = 2; i <= NF; i++) tot += $i }
		NR == 1 { i0 = idle; t0 = tot }
		NR == 2 { printf "%.0f", (tot > t0 ? 100 * (1 - (idle - i0) / (tot - t0)) : 0) }'
}
n_busy=0
wait_quiet() {
	w=0
	while b=$(cpu_busy 0.5) && [ "${b:-0}" -gt 10 ]; do
		if [ "$w" -ge 60 ]; then
			echo "  warning: CPUs still ${b}% busy after 60 s; running anyway"
			n_busy=$((n_busy + 1))
			return 0
		fi
		sleep 2
		w=$((w + 3))
	done
}

# run_case NAME MODE N [extra options]: REPS alternating runs of each side.
run_case() {
	name=$1 mode=$2 n=$3
	shift 3
	i=1
	while [ "$i" -le "$REPS" ]; do
		[ "$ONLY_RIVAL" = 0 ] || { rival_run "$name" "$mode" "$n" "$@"; i=$((i + 1)); continue; }
		wait_quiet
		./bin/sekv-bench -m "$MODEL" -t "$T" --tokens "$TOK" --mode "$mode" -n "$n" "$@" \
			> "$TMP/out" || die "$name: sekv-bench failed"
		echo "  $name run $i ours:      $(cat "$TMP/out")"
		cat "$TMP/out" >> "$TMP/ours_$name"
		if [ "$name" = decode ]; then
			# the bandwidth varies on shared machines: measure it next
			# to every decode run and use the median
			wait_quiet
			./bin/sekv-membw -t "$T" > "$TMP/bw" 2> /dev/null || die "sekv-membw failed"
			tr '\n' ' ' < "$TMP/bw" > "$TMP/out"
			echo "  bandwidth run $i:      $(cat "$TMP/out")"
			echo >> "$TMP/out"
			cat "$TMP/out" >> "$TMP/membw"
		fi
		rival_run "$name" "$mode" "$n" "$@"
		i=$((i + 1))
	done
}
# rival_run NAME MODE N [extra options]: run $i of the rival
rival_run() {
	name=$1 mode=$2 n=$3
	shift 3
	wait_quiet
	rival -m "$MODEL" -t "$T" --tokens "$TOK" --mode "$mode" -n "$n" "$@" \
		> "$TMP/out" || die "$name: $RIVAL failed"
	echo "  $name run $i $RIVAL: $(cat "$TMP/out")"
	cat "$TMP/out" >> "$TMP/llama_$name"
}

# median FILE FIELD: median of a numeric field over the lines of FILE.
median() {
	awk -v f="$2" '{ print $f }' "$1" | sort -g |
		awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

CASES="prefill_$N_SHORT prefill_$N_LONG prefill_surprisal_$N_SHORT decode"
run_case "prefill_$N_SHORT" prefill "$N_SHORT"
run_case "prefill_$N_LONG" prefill "$N_LONG"
run_case "prefill_surprisal_$N_SHORT" prefill_surprisal "$N_SHORT"
run_case decode decode "$N_DECODE" --ctx "$CTX"

echo "== same work: mean -log p of the same tokens on both sides (untimed runs)"
for args in "--mode prefill_surprisal -n $N_SHORT" "--mode decode -n 16 --ctx $CTX"; do
	if [ "$ONLY_RIVAL" = 0 ]; then
		# shellcheck disable=SC2086 # args holds several options on purpose
		./bin/sekv-bench -m "$MODEL" -t "$T" --tokens "$TOK" $args --verify 2> "$TMP/v" > /dev/null ||
			die "verify: sekv-bench failed: $(cat "$TMP/v")"
		echo "  ours      $args: $(grep '^verify' "$TMP/v")"
	fi
	# shellcheck disable=SC2086
	rival -m "$MODEL" -t "$T" --tokens "$TOK" $args --verify \
		2> "$TMP/v" > /dev/null || die "verify: $RIVAL failed: $(cat "$TMP/v")"
	echo "  $RIVAL $args: $(grep '^verify' "$TMP/v")"
done

if [ -z "$RIVAL_BIN" ]; then
	echo "== llama.cpp settings"
	python3 bench/llamacpp_bench.py -m "$MODEL" -t "$T" --tokens "$TOK" --mode prefill -n "$N_SHORT" --info \
		2> "$TMP/info" > /dev/null || die "llama.cpp info run failed"
	sed 's/^/  /' "$TMP/info"
fi

if [ "$ONLY_RIVAL" = 1 ]; then
	echo "== results (medians of $REPS; $RIVAL alone)"
	printf '%-24s %14s %16s\n' case "rival tok/s" "rival RSS MiB"
	for c in $CASES; do
		printf '%-24s %14.1f %16.1f\n' "$c" "$(median "$TMP/llama_$c" 2)" "$(median "$TMP/llama_$c" 4)"
	done
	exit 0
fi

echo "== memory bandwidth ($T threads, median of the $REPS runs next to decode)"
copy_gb_s=$(median "$TMP/membw" 2)
read_gb_s=$(median "$TMP/membw" 4)
echo "  copy $copy_gb_s GB/s (read + write)   read $read_gb_s GB/s"

echo "== results (medians of $REPS)"
[ "$n_busy" -eq 0 ] || echo "warning: $n_busy runs started while other processes used the CPUs"
printf '%-24s %12s %14s %7s %14s %16s\n' case "ours tok/s" "rival tok/s" ratio "ours RSS MiB" "rival RSS MiB"
echo "(rival: $RIVAL)"
for c in $CASES; do
	o=$(median "$TMP/ours_$c" 2) l=$(median "$TMP/llama_$c" 2)
	ro=$(median "$TMP/ours_$c" 4) rl=$(median "$TMP/llama_$c" 4)
	r=$(awk -v o="$o" -v l="$l" 'BEGIN { printf "%.3f", (l > 0 ? o / l : 0) }')
	printf '%-24s %12.1f %14.1f %7s %14.1f %16.1f\n' "$c" "$o" "$l" "$r" "$ro" "$rl"
	echo "RATIO $c $r" >> "$TMP/ratios"
done

bpt=$(median "$TMP/ours_decode" 6)
dec=$(median "$TMP/ours_decode" 2)
awk -v b="$bpt" -v c="$copy_gb_s" -v rd="$read_gb_s" -v d="$dec" 'BEGIN {
	lim = b / (c * 1e9); ours = d > 0 ? 1 / d : 0
	printf "decode: %.1f MB read per token (all weights + KV at the mean context)\n", b / 1e6
	printf "bandwidth limit: %.3f ms/token = %.1f tok/s at copy %.2f GB/s (%.1f tok/s at read %.2f GB/s)\n",
		lim * 1e3, 1 / lim, c, rd * 1e9 / b, rd
	printf "ours: %.3f ms/token = %.1f%% of the copy-bandwidth limit\n", ours * 1e3, (ours > 0 ? 100 * lim / ours : 0)
	printf "RATIO decode_vs_bandwidth_limit %.3f\n", (ours > 0 ? lim / ours : 0)
}' > "$TMP/bw"
grep -v '^RATIO' "$TMP/bw"
cat "$TMP/ratios"
grep '^RATIO' "$TMP/bw"
