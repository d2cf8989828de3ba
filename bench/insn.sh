#!/usr/bin/env bash
# bench/insn.sh: instructions a message on the same-host path, per build,
# counted by callgrind on the perftest client (the server runs natively).
# A deterministic figure where timings here swing twice over from run to
# run (docs/PERFORMANCE.md): a change of the data path is judged by it
# first, then by bench/ab.sh. Not part of `make test`.
#
#   usage: bench/insn.sh BUILD_DIR...
#
# Per build, two runs over 127.0.0.1 (shm): 8-byte ib_send_lat -n 20000
# (per round trip: ibv_post_send, the poller's quick pass tcp_rx_fast,
# ibv_post_recv, and all of the client's instructions in libibverbs) and
# 64-byte ib_send_bw -n 200000 (per message: ibv_post_send, and all of
# libibverbs). Callgrind counts a `rep` string instruction once, whatever
# it costs (look for them with objdump), and runs the lock's
# compare-and-swap mode (no rseq under valgrind): lock costs are above
# the real ones. Needs valgrind (callgrind_annotate) and perftest.
# exit: 0 measured, 1 some run failed, 2 cannot run
set -uo pipefail

(($# >= 1)) || { echo "usage: bench/insn.sh BUILD_DIR..." >&2; exit 2; }
for p in valgrind callgrind_annotate ib_send_lat ib_send_bw; do
	command -v "$p" >/dev/null 2>&1 || { echo "bench/insn: $p not found (valgrind, perftest)" >&2; exit 2; }
done
for b in "$@"; do
	[[ -x $b/bin/softrnic ]] || { echo "bench/insn: $b/bin/softrnic missing" >&2; exit 2; }
done

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_tmp insn
failed=0

# count BUILD OUT PROG ARGS...: the client under callgrind into OUT;
# 0 if its run completed
count() {
	local b=$1 out=$2 p ok=1
	shift 2
	p=$((20000 + RANDOM % 30000))
	timeout -k 5 300 "$b/bin/softrnic" run -- "$@" -p "$p" >"$tmp/srv" 2>&1 &
	spid=$!
	sleep 0.4
	timeout -k 5 600 "$b/bin/softrnic" run -- valgrind --tool=callgrind \
		--callgrind-out-file="$out" "$@" -p "$p" 127.0.0.1 >"$tmp/cli" 2>&1 && ok=0
	wait "$spid" 2>/dev/null
	spid=
	return $ok
}

# per_call OUT FUNC: FUNC's inclusive instructions in OUT per call: the
# nodes of that name that have callers (LTO also shows the files it
# inlined into a function as caller-less nodes of its name), or "-"
per_call() {
	callgrind_annotate --tree=caller --inclusive=yes "$1" 2>/dev/null |
		awk -v f="$2" '
			/^$/ { calls = 0; next }
			/ < / && match($0, /\(([0-9,]+)x\)/) {
				c = substr($0, RSTART + 1, RLENGTH - 3); gsub(",", "", c); calls += c; next }
			/ \* / && calls && $0 ~ (":" f "(\\.[a-z_0-9.]+)?( |$)") {
				x = $1; gsub(",", "", x); tot += x; n += calls }
			END { if (n) printf "%.0f", tot / n; else print "-" }'
}

# lib OUT N: all instructions in libibverbs (self), divided by N
lib() {
	callgrind_annotate "$1" 2>/dev/null |
		awk -v n="$2" '/libibverbs\.so/ && $1 ~ /^[0-9,]+$/ { x = $1; gsub(",", "", x); s += x }
			END { if (s) printf "%.0f", s / n; else print "-" }'
}

printf '%-28s %10s %10s %10s %10s   %10s %10s\n' build lat_post lat_quick lat_recv lat_lib \
	bw64_post bw64_lib
for b in "$@"; do
	lp=- lq=- lr=- ll=- bp=- bl=-
	if count "$b" "$tmp/lat.out" ib_send_lat -d softrnic0 -s 8 -n 20000; then
		lp=$(per_call "$tmp/lat.out" op_post_send)
		lq=$(per_call "$tmp/lat.out" tcp_rx_fast)
		lr=$(per_call "$tmp/lat.out" op_post_recv)
		ll=$(lib "$tmp/lat.out" 20000)
	else
		echo "bench/insn: $b: ib_send_lat failed" >&2
		failed=1
	fi
	if count "$b" "$tmp/bw.out" ib_send_bw -d softrnic0 -s 64 -n 200000; then
		bp=$(per_call "$tmp/bw.out" op_post_send)
		bl=$(lib "$tmp/bw.out" 200000)
	else
		echo "bench/insn: $b: ib_send_bw failed" >&2
		failed=1
	fi
	printf '%-28s %10s %10s %10s %10s   %10s %10s\n' "$b" "$lp" "$lq" "$lr" "$ll" "$bp" "$bl"
done
exit $failed
