#!/usr/bin/env bash
# bench/shm.sh: softrnic between two processes of one host (the shared-
# memory channel, DESIGN.md decision 23) beside the best same-host
# transport there is, measured in the same run, as ratios. Not part of
# `make test`.
#
#   ib_write_bw -s 16 MiB (Gb/s)  vs  a 16 MiB memcpy (one core), and
#                                     ucx_perftest -t ucp_put_bw -s 16777216
#   ib_send_lat / ib_write_lat -s 8 (t_typical, µs)
#                                 vs  ucx_perftest -t ucp_am_lat -s 8 (median)
#   ib_send_bw -s 64 (Mpps)       vs  ucx_perftest -t ucp_am_bw -s 64
#   bench/ring_lat.c: the shm ring alone, 8 B one-way, vs one cache line
#                                 each way (where the latency goes)
#   ib_write_bw -s 16 MiB as uid 65534 (run as root: two unprivileged
#   `softrnic run`s, rings from the descriptor server) vs the memcpy
#
# UCX runs with UCX_TLS=sm,self (Debian ucx-utils), softrnic with its
# defaults (SOFTRNIC_SHM on). Each figure is the median of BENCH_RUNS
# (default 3) interleaved rounds. All on 127.0.0.1.
#
# usage: bench/shm.sh
# env:   BENCH_RUNS, BENCH_SECS (default 3), BENCH_ITERS (default 200000,
#        as many round trips as the ucp_am_lat run beside it),
#        BENCH_BUILD (default build/), BENCH_SHM=0 to measure softrnic on TCP
# exit:  0 all measured, 1 some run failed, 2 cannot run
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$ROOT/build}
SOFTRNIC=$BUILD/bin/softrnic
RUNS=${BENCH_RUNS:-3}
SECS=${BENCH_SECS:-3}
ITERS=${BENCH_ITERS:-200000}
T=$((SECS + 40))
unset SOFTRNIC_LIBDIR
[[ ${BENCH_SHM:-1} == 0 ]] && export SOFTRNIC_SHM=0

have() { command -v "$1" >/dev/null 2>&1; }
[[ -x $SOFTRNIC ]] || { echo "bench/shm: $SOFTRNIC missing; run make" >&2; exit 2; }
for p in ib_write_bw ib_send_bw ib_send_lat ib_write_lat cc; do
	have "$p" || { echo "bench/shm: $p not found (perftest, gcc)" >&2; exit 2; }
done
have ucx_perftest || echo "bench/shm: ucx_perftest not found (apt-get install ucx-utils): no UCX column" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/softrnic-shm-bench.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
cc -O2 -o "$tmp/memcpy_bw" "$ROOT/bench/memcpy_bw.c" || exit 2
cc -O2 -I "$ROOT/src" -o "$tmp/ring_lat" "$ROOT/bench/ring_lat.c" "$ROOT/src/chan/shm_ring.c" || exit 2
failed=0

port() { echo $((20000 + RANDOM % 30000)); }

# pair OUT SERVER-CMD... ::: CLIENT-CMD...: both bounded; client output in OUT
pair() {
	local out=$1 s=() spid
	shift
	while [[ $1 != ::: ]]; do s+=("$1"); shift; done
	shift
	timeout -k 5 "$T" "${s[@]}" >"$out.srv" 2>&1 &
	spid=$!
	pids+=("$spid")
	sleep 0.5
	timeout -k 5 "$T" "$@" >"$out" 2>&1
	wait "$spid" 2>/dev/null
	pids=("${pids[@]/$spid}")
}

# perftest COL ARGS...: column COL of the client's result row
perftest() {
	local col=$1 p
	shift
	p=$(port)
	pair "$tmp/pt" "$SOFTRNIC" run -- "$@" -d softrnic0 -p "$p" ::: \
		"$SOFTRNIC" run -- "$@" -d softrnic0 -p "$p" 127.0.0.1
	awk -v col="$col" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { v = $col }
		END { if (v + 0 > 0) print v + 0 }' "$tmp/pt"
}

# perftest_user COL ARGS...: the same, both sides as uid 65534 (root
# only; nothing printed otherwise)
USER_RUN=()
[[ $(id -u) == 0 ]] && have setpriv && USER_RUN=(setpriv --reuid=65534 --regid=65534 --clear-groups)
perftest_user() {
	local col=$1 p
	shift
	((${#USER_RUN[@]})) || return
	p=$(port)
	pair "$tmp/pt" "${USER_RUN[@]}" "$SOFTRNIC" run -- "$@" -d softrnic0 -p "$p" ::: \
		"${USER_RUN[@]}" "$SOFTRNIC" run -- "$@" -d softrnic0 -p "$p" 127.0.0.1
	awk -v col="$col" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { v = $col }
		END { if (v + 0 > 0) print v + 0 }' "$tmp/pt"
}

# ucx COL ARGS...: column COL of ucx_perftest's "Final:" line
# (3 median latency µs, 7 overall MB/s, 9 overall msg/s)
ucx() {
	local col=$1 p
	shift
	have ucx_perftest || return
	p=$(port)
	UCX_TLS=sm,self pair "$tmp/ucx" env UCX_TLS=sm,self ucx_perftest -p "$p" ::: \
		env UCX_TLS=sm,self ucx_perftest 127.0.0.1 -p "$p" "$@"
	awk -v col="$col" '$1 == "Final:" && $col + 0 > 0 { print $col }' "$tmp/ucx"
}

declare -A S
add() { if [[ -n $2 ]]; then S[$1]+="$2 "; else echo "bench/shm: $1: a run failed" >&2; failed=1; fi; }
median() { printf '%s\n' $1 | sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

for ((r = 1; r <= RUNS; r++)); do
	echo "bench/shm: round $r of $RUNS" >&2
	add memcpy "$(awk '{ printf "%.2f\n", $1 * 8 }' < <("$tmp/memcpy_bw" 16777216))"
	if have ucx_perftest; then
		add ucx_put "$(ucx 7 -t ucp_put_bw -s 16777216 -n 200 | awk '{ printf "%.2f\n", $1 * 1048576 * 8 / 1e9 }')"
		add ucx_lat "$(ucx 3 -t ucp_am_lat -s 8 -n 200000)"
		add ucx_rate "$(ucx 9 -t ucp_am_bw -s 64 -n 2000000 | awk '{ printf "%.3f\n", $1 / 1e6 }')"
	fi
	add write_bw "$(perftest 4 ib_write_bw -s 16777216 -D "$SECS" --report_gbits)"
	add send_lat "$(perftest 5 ib_send_lat -s 8 -n "$ITERS")"
	add write_lat "$(perftest 5 ib_write_lat -s 8 -n "$ITERS")"
	add send_rate "$(perftest 5 ib_send_bw -s 64 -D "$SECS" --report_gbits)"
	((${#USER_RUN[@]})) &&
		add write_bw_user "$(perftest_user 4 ib_write_bw -s 16777216 -D "$SECS" --report_gbits)"
	ring=$("$tmp/ring_lat" 200000 3)
	add floor_lat "$(awk '/^floor/ { print $(NF - 2) }' <<<"$ring")"
	add ring_lat "$(awk '/^shm_ring/ { print $(NF - 5) }' <<<"$ring")"
done

m() { median "${S[$1]:-}"; }
ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
row() { printf '| %s | %s | %s | %s | %s |\n' "$1" "${2:--}" "$3" "${4:--}" "$5"; }
echo
echo "Same host, softrnic ${BENCH_SHM:+(SOFTRNIC_SHM=$BENCH_SHM) }vs memcpy and UCX (UCX_TLS=sm,self); medians of $RUNS runs"
echo
echo "| benchmark | softrnic | limit (same run) | ratio | better |"
echo "|---|---|---|---:|---|"
row "ib_write_bw 16 MiB" "$(m write_bw) Gb/s" "memcpy 16 MiB: $(m memcpy) Gb/s" "$(ratio "$(m write_bw)" "$(m memcpy)")" higher
row "ib_write_bw 16 MiB" "$(m write_bw) Gb/s" "ucp_put_bw 16 MiB: $(m ucx_put) Gb/s" "$(ratio "$(m write_bw)" "$(m ucx_put)")" higher
row "ib_send_lat 8 B" "$(m send_lat) µs" "ucp_am_lat 8 B: $(m ucx_lat) µs" "$(ratio "$(m send_lat)" "$(m ucx_lat)")" lower
row "ib_write_lat 8 B" "$(m write_lat) µs" "ucp_am_lat 8 B: $(m ucx_lat) µs" "$(ratio "$(m write_lat)" "$(m ucx_lat)")" lower
row "ib_send_bw 64 B" "$(m send_rate) Mpps" "ucp_am_bw 64 B: $(m ucx_rate) Mpps" "$(ratio "$(m send_rate)" "$(m ucx_rate)")" higher
((${#USER_RUN[@]})) &&
	row "ib_write_bw 16 MiB, as uid 65534" "$(m write_bw_user) Gb/s" "memcpy 16 MiB: $(m memcpy) Gb/s" "$(ratio "$(m write_bw_user)" "$(m memcpy)")" higher
row "shm ring alone, 8 B one-way" "$(m ring_lat) µs" "a cache line each way: $(m floor_lat) µs" "$(ratio "$(m ring_lat)" "$(m floor_lat)")" lower
echo
echo "(The last row is bench/ring_lat.c: softrnic's ring without the layers"
echo "above it. ib_send_lat minus it is what those layers cost.)"
echo
echo "raw: $(for k in "${!S[@]}"; do printf '%s=[%s] ' "$k" "${S[$k]% }"; done)"
exit $failed
