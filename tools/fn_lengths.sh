#!/bin/sh
# fn_lengths.sh - lists C functions longer than a limit, longest first.
# Usage: tools/fn_lengths.sh [LIMIT] [DIR...]  (default 80; app engine store ui)
# A function is a line at column 0 naming NAME( that does not end in ';',
# through the next '}' at column 0 (house style: K&R, braces at column 0);
# its length counts the signature through the closing brace.
limit=${1:-80}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- app engine store ui
find "$@" -name '*.c' -o -name '*.cc' | sort | xargs awk -v limit="$limit" '
FNR == 1 { sig = 0; body = 0 }
!body && /^[A-Za-z_][A-Za-z0-9_ \t\*]*\(/ && !/;[ \t]*$/ && !/^(typedef|struct [A-Za-z0-9_]+ *\{)/ {
	sig = FNR; s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \t\*]+/); name = w[n]
}
!body && sig && /^\{/ { body = 1 }
body && /^\}/ {
	if (FNR - sig + 1 > limit) printf "%5d %s:%d %s\n", FNR - sig + 1, FILENAME, sig, name
	body = 0; sig = 0
}' | sort -rn
