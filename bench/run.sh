#!/usr/bin/env bash
# bench/run.sh: softrnic's figures beside the limit they chase, measured in
# the same run, as a ratio. Not part of `make test`.
#
#   bandwidth     ib_{write,read,send}_bw at 64 KiB and 1 MiB  vs  raw TCP
#                 loopback, one stream, same write size (iperf3, else qperf)
#   latency       ib_{send,write,read}_lat at 8 B (t_typical)   vs  raw TCP
#                 ping-pong (sockperf at 14 B, its minimum, else qperf
#                 tcp_lat at 8 B)
#   message rate  ib_{send,write}_bw -s 64 (Mpps)               vs  raw TCP
#                 64 B messages/s (sockperf throughput, else qperf tcp_bw)
#
# Every figure is measured BENCH_RUNS times (default 5) and the median is
# reported, with the min and max beside it. The runs are interleaved: each
# round measures the raw-TCP limits and then softrnic, so that a change of
# machine load hits both sides of a ratio alike. All traffic is on 127.0.0.1.
# Nothing is built or installed: it needs build/ (`make`) and perftest, and
# names the Debian package of every missing tool.
#
# usage: bench/run.sh          (from anywhere)
# env:   BENCH_RUNS   runs per figure (default 5)
#        BENCH_SECS   seconds per bandwidth/rate/TCP run (default 3)
#        BENCH_ITERS  iterations per perftest latency run (default 10000)
#        BENCH_BUDGET seconds for the whole script; figures not measured by
#                     then are reported with fewer runs (default: computed)
#        BENCH_OUT    markdown copy of the table (default bench/results-latest.md)
#        BENCH_BUILD  build tree (default build/)
# exit:  0 all figures measured, 1 some run failed or was skipped, 2 cannot run
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$ROOT/build}
SOFTRNIC=$BUILD/bin/softrnic
RUNS=${BENCH_RUNS:-5}
SECS=${BENCH_SECS:-3}
ITERS=${BENCH_ITERS:-10000}
OUT=${BENCH_OUT:-$ROOT/bench/results-latest.md}

for v in RUNS SECS ITERS; do
	if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
		echo "bench: BENCH_$v must be a positive integer, not '${!v}'" >&2
		exit 2
	fi
done
# One round: 8 perftest runs of SECS (+ ~1 s setup each), 3 latency runs of a
# second or two, 4 raw-TCP runs of SECS; the budget allows twice that.
BUDGET=${BENCH_BUDGET:-$((RUNS * 2 * (12 * SECS + 16) + 30))}
CASE_TIMEOUT=$((SECS + 30))	# per process; a latency run takes ~1-2 s

# --- what is there ----------------------------------------------------------

if [[ ! -x $SOFTRNIC || ! -e $BUILD/lib/libibverbs.so.1 ]]; then
	echo "bench: $SOFTRNIC or $BUILD/lib/libibverbs.so.1 is missing; run \`make\` first" >&2
	exit 2
fi
unset SOFTRNIC_LIBDIR	# measure the libraries of $BUILD, nothing else

missing=()	# Debian packages not installed
have() { command -v "$1" >/dev/null 2>&1; }
for prog in ib_write_bw ib_read_bw ib_send_bw ib_send_lat ib_write_lat ib_read_lat; do
	if ! have "$prog"; then
		echo "bench: $prog not found; install Debian's perftest (apt-get install perftest)" >&2
		exit 2
	fi
done
for tool in iperf3 sockperf qperf; do
	have "$tool" || missing+=("$tool")
done
have ss || missing+=("iproute2")

if have iperf3; then
	BW_TOOL=iperf3
elif have qperf; then
	BW_TOOL=qperf
else
	BW_TOOL=
fi
if have sockperf; then
	LAT_TOOL=sockperf
elif have qperf; then
	LAT_TOOL=qperf
else
	LAT_TOOL=
fi
RATE_TOOL=$LAT_TOOL

# --- processes and ports -----------------------------------------------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/softrnic-bench.XXXXXX")
pids=()		# every background process this script started
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT TERM HUP

forget() {	# forget PID: drop it from pids (it has been waited for)
	local p keep=()
	for p in "${pids[@]}"; do
		[[ $p == "$1" ]] || keep+=("$p")
	done
	pids=("${keep[@]}")
}

listening() {
	if have ss; then
		[[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 30000))
		listening "$p" || { echo "$p"; return; }
	done
	echo $((20000 + RANDOM % 30000))
}

# wait_listen PORT PID: until PORT is listened on (5 s) or PID has exited.
wait_listen() {
	for _ in $(seq 100); do
		listening "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# bounded OUT SECONDS CMD...: run CMD under timeout with stdout+stderr to OUT,
# in the background so that a signal to this script is handled at once (the
# EXIT trap then ends it by PID); returns CMD's status (124: timed out).
bounded() {
	local out=$1 t=$2 pid rc
	shift 2
	timeout -k 5 "$t" "$@" >"$out" 2>&1 &
	pid=$!
	pids+=("$pid")
	wait "$pid"
	rc=$?
	forget "$pid"
	return "$rc"
}

failures=0
note_fail() {	# note_fail WHAT LOGFILE...: say what failed, with the logs' tails
	local f
	failures=$((failures + 1))
	echo "bench: FAILED: $1" >&2
	shift
	for f in "$@"; do
		[[ -s $f ]] && tail -n 5 "$f" | sed "s|^|    $(basename "$f"): |" >&2
	done
}

# --- parsing -------------------------------------------------------------------

# perftest_col FILE COL: column COL of perftest's (last) result row
# ("#bytes #iterations numbers..."), empty if there is none or it is not > 0.
perftest_col() {
	awk -v col="$2" '
		/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { v = $col }
		END { if (v + 0 > 0) print v + 0 }' "$1"
}

# --- one measurement of softrnic: a perftest server and client ---------------

# perftest FIGURE_COL PROG ARGS...: set RESULT to the figure (column
# FIGURE_COL of the client's result row), or to nothing on failure.
# (Results go through RESULT, not stdout, so that no measurement runs in a
# $(...) subshell, where the pids and failures it records would be lost.)
RESULT=
perftest() {
	local col=$1 prog=$2 port spid src crc v log=$tmp/pt
	shift 2
	RESULT=
	port=$(free_port)
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -d softrnic0 -p "$port" "$@" \
		>"$log.srv" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listen "$port" "$spid"
	bounded "$log.cli" "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -d softrnic0 -p "$port" "$@" 127.0.0.1
	crc=$?
	wait "$spid"
	src=$?
	forget "$spid"
	v=$(perftest_col "$log.cli" "$col")
	if ((crc != 0 || src != 0)) || [[ -z $v ]]; then
		note_fail "$prog $* (client exit $crc, server exit $src)" "$log.srv" "$log.cli"
		return
	fi
	RESULT=$v
}

# --- the raw-TCP limits ---------------------------------------------------------

# One server per tool for the whole script, on 127.0.0.1 where the tool can
# bind an address (qperf cannot: it listens on every address).
declare -A server_port
start_server() {	# start_server TOOL
	local port pid
	port=$(free_port)
	case $1 in
	iperf3) iperf3 -s -B 127.0.0.1 -p "$port" >"$tmp/$1.srv" 2>&1 & ;;
	sockperf) sockperf server --tcp -i 127.0.0.1 -p "$port" >"$tmp/$1.srv" 2>&1 & ;;
	# busy-polling server for the latency limit: non-blocking sockets,
	# recvfrom in a loop, as a busy-polling RDMA program waits
	sockperf-bp) sockperf server --tcp -i 127.0.0.1 -p "$port" --nonblocked >"$tmp/$1.srv" 2>&1 & ;;
	qperf) qperf -lp "$port" >"$tmp/$1.srv" 2>&1 & ;;
	esac
	pid=$!
	pids+=("$pid")
	if ! wait_listen "$port" "$pid"; then
		note_fail "$1 server did not start" "$tmp/$1.srv"
		return 1
	fi
	server_port[$1]=$port
}

# tcp_bw SIZE: one stream of SIZE-byte writes for SECS; prints Gb/s.
tcp_bw() {
	local log=$tmp/tcp_bw port=${server_port[$BW_TOOL]:-} v
	RESULT=
	[[ -n $port ]] || return
	case $BW_TOOL in
	iperf3)
		bounded "$log" "$CASE_TIMEOUT" iperf3 -c 127.0.0.1 -p "$port" -t "$SECS" -l "$1" -f g
		v=$(awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Gbits/sec") v = $(i - 1) }
			END { if (v + 0 > 0) print v + 0 }' "$log")
		;;
	qperf)
		bounded "$log" "$CASE_TIMEOUT" qperf -lp "$port" 127.0.0.1 -t "$SECS" -m "$1" -uu tcp_bw
		v=$(awk '$1 == "bw" && $4 == "bytes/sec" && $3 > 0 { printf "%.4f\n", $3 * 8 / 1e9 }' "$log")
		;;
	esac
	[[ -n $v ]] || { note_fail "$BW_TOOL TCP bandwidth, $1-byte writes" "$log"; return; }
	RESULT=$v
}

# tcp_lat: one-way latency of a small-message TCP ping-pong (half the round
# trip, as perftest reports send/write latency), in µs: 8 bytes with qperf,
# 14 with sockperf (its smallest message: its own header).
tcp_lat() {
	local log=$tmp/tcp_lat port=${server_port[$LAT_TOOL]:-} v
	RESULT=
	[[ -n $port ]] || return
	case $LAT_TOOL in
	sockperf)
		# busy-polling on both ends (--nonblocked), as perftest's
		# latency tests poll their CQ; the busy server runs only for
		# this measurement (it keeps a CPU busy)
		start_server sockperf-bp || return
		port=${server_port[sockperf-bp]}
		bounded "$log" "$CASE_TIMEOUT" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" \
			-m 14 -t "$SECS" --mps=max --nonblocked
		kill "${pids[-1]}" 2>/dev/null
		wait "${pids[-1]}" 2>/dev/null
		unset 'pids[-1]'
		# the median; else the mean ("Latency is X usec")
		v=$(awk '{ gsub(/\033\[[0-9;]*m/, "") }
			/percentile 50\.000 =/ { m = $NF }
			/Summary: Latency is/ { for (i = 1; i <= NF; i++) if ($i == "is") a = $(i + 1) }
			END { v = (m != "") ? m : a; if (v + 0 > 0) print v + 0 }' "$log")
		;;
	qperf)
		bounded "$log" "$CASE_TIMEOUT" qperf -lp "$port" 127.0.0.1 -t "$SECS" -m 8 -uu tcp_lat
		v=$(awk '$1 == "latency" && $4 == "ns" && $3 > 0 { printf "%.3f\n", $3 / 1000 }' "$log")
		;;
	esac
	[[ -n $v ]] || { note_fail "$LAT_TOOL TCP latency" "$log"; return; }
	RESULT=$v
}

# tcp_rate: 64-byte messages per second, one stream, in Mpps (sockperf
# throughput leaves Nagle on, as its throughput mode does by default; qperf
# writes each message with its own send()).
tcp_rate() {
	local log=$tmp/tcp_rate port=${server_port[$RATE_TOOL]:-} v
	RESULT=
	[[ -n $port ]] || return
	case $RATE_TOOL in
	sockperf)
		bounded "$log" "$CASE_TIMEOUT" sockperf throughput --tcp -i 127.0.0.1 -p "$port" \
			-m 64 -t "$SECS" --mps=max
		v=$(awk '{ gsub(/\033\[[0-9;]*m/, "") }
			/Summary: Message Rate is/ { for (i = 1; i <= NF; i++) if ($i == "is") r = $(i + 1) }
			END { if (r + 0 > 0) printf "%.6f\n", r / 1e6 }' "$log")
		;;
	qperf)
		bounded "$log" "$CASE_TIMEOUT" qperf -lp "$port" 127.0.0.1 -t "$SECS" -m 64 -uu tcp_bw
		v=$(awk '$1 == "bw" && $4 == "bytes/sec" && $3 > 0 { printf "%.6f\n", $3 / 64 / 1e6 }' "$log")
		;;
	esac
	[[ -n $v ]] || { note_fail "$RATE_TOOL TCP 64-byte message rate" "$log"; return; }
	RESULT=$v
}

# --- the benchmarks ---------------------------------------------------------------

# name|section|column|perftest command|limit key
# Columns of perftest's row: 4 BW average, 5 MsgRate (the *_bw tests with
# --report_gbits); 5 t_typical, the median (the *_lat tests).
CASES=(
	"ib_write_bw 64KiB|bw|4|ib_write_bw -s 65536 -D $SECS --report_gbits|tcp_bw_65536"
	"ib_read_bw 64KiB|bw|4|ib_read_bw -s 65536 -D $SECS --report_gbits|tcp_bw_65536"
	"ib_send_bw 64KiB|bw|4|ib_send_bw -s 65536 -D $SECS --report_gbits|tcp_bw_65536"
	"ib_write_bw 1MiB|bw|4|ib_write_bw -s 1048576 -D $SECS --report_gbits|tcp_bw_1048576"
	"ib_read_bw 1MiB|bw|4|ib_read_bw -s 1048576 -D $SECS --report_gbits|tcp_bw_1048576"
	"ib_send_bw 1MiB|bw|4|ib_send_bw -s 1048576 -D $SECS --report_gbits|tcp_bw_1048576"
	"ib_send_lat 8B|lat|5|ib_send_lat -s 8 -n $ITERS|tcp_lat"
	"ib_write_lat 8B|lat|5|ib_write_lat -s 8 -n $ITERS|tcp_lat"
	"ib_read_lat 8B|lat|5|ib_read_lat -s 8 -n $ITERS|tcp_rtt"
	"ib_send_bw 64B|rate|5|ib_send_bw -s 64 -D $SECS --report_gbits|tcp_rate_64"
	"ib_write_bw 64B|rate|5|ib_write_bw -s 64 -D $SECS --report_gbits|tcp_rate_64"
)
declare -A samples	# key -> space-separated measurements
add() { [[ -z $2 ]] || samples[$1]+="$2 "; }

measure_limits() {	# measure_limits SECTION
	local v
	case $1 in
	bw)
		[[ -n $BW_TOOL ]] || return
		tcp_bw 65536
		add tcp_bw_65536 "$RESULT"
		tcp_bw 1048576
		add tcp_bw_1048576 "$RESULT"
		;;
	lat)
		[[ -n $LAT_TOOL ]] || return
		tcp_lat
		v=$RESULT
		add tcp_lat "$v"
		# ib_read_lat reports the whole round trip (a READ is a request
		# and a response), so it is compared with the TCP round trip.
		[[ -n $v ]] && add tcp_rtt "$(awk -v v="$v" 'BEGIN { printf "%.3f\n", 2 * v }')"
		;;
	rate)
		[[ -n $RATE_TOOL ]] || return
		tcp_rate
		add tcp_rate_64 "$RESULT"
		;;
	esac
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] && commit+=" (modified)"

echo "softrnic bench: $RUNS runs per figure, ${SECS} s per bandwidth run; $(nproc) CPUs; load average before: $load_before" >&2
((${#missing[@]})) && echo "bench: not installed (Debian packages): ${missing[*]}" >&2
[[ $BW_TOOL == qperf ]] && echo "bench: iperf3 missing (apt-get install iperf3); raw TCP bandwidth from qperf tcp_bw instead" >&2
[[ $LAT_TOOL == qperf ]] && echo "bench: sockperf missing (apt-get install sockperf); raw TCP latency and message rate from qperf instead" >&2
[[ -z $BW_TOOL ]] && echo "bench: no raw-TCP bandwidth tool; apt-get install iperf3 (or qperf)" >&2
[[ -z $LAT_TOOL ]] && echo "bench: no raw-TCP latency tool; apt-get install sockperf (or qperf)" >&2

for tool in $(printf '%s\n' "$BW_TOOL" "$LAT_TOOL" | sort -u); do
	start_server "$tool"
done

skipped=0
for ((r = 1; r <= RUNS; r++)); do
	for section in bw lat rate; do
		if ((SECONDS > BUDGET)); then
			skipped=1
			break 2
		fi
		echo "bench: round $r/$RUNS: $section (${SECONDS}s)" >&2
		measure_limits "$section"
		for c in "${CASES[@]}"; do
			IFS='|' read -r name sec col cmd key <<<"$c"
			[[ $sec == "$section" ]] || continue
			# shellcheck disable=SC2086 # cmd is a word list on purpose
			perftest "$col" $cmd
			add "$name" "$RESULT"
		done
	done
done
((skipped)) && echo "bench: time budget (${BUDGET}s, BENCH_BUDGET) spent after round $((r - 1)); later rounds not run" >&2
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table -------------------------------------------------------------------

# stats KEY: "median min max n" of the samples of KEY, or nothing.
stats() {
	local s=${samples[$1]:-}
	[[ -n $s ]] || return
	# shellcheck disable=SC2086 # split on purpose
	printf '%s\n' $s | sort -g | awk '{ a[NR] = $1 }
		END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		      print m, a[1], a[NR], NR }'
}

# fig VALUE: a figure with 3 significant digits or more
fig() { awk -v v="$1" 'BEGIN { if (v >= 100) printf "%.0f", v; else if (v >= 10) printf "%.1f", v;
	else if (v >= 1) printf "%.2f", v; else printf "%.3g", v }'; }

limit_label() {	# limit_label KEY
	case $1 in
	tcp_bw_*)
		case $BW_TOOL in
		iperf3) echo "iperf3 -c, -l $(($2 / 1024))K" ;;
		qperf) echo "qperf tcp_bw -m $(($2 / 1024))K" ;;
		esac ;;
	tcp_lat)
		case $LAT_TOOL in
		sockperf) echo "sockperf ping-pong -m 14 --nonblocked (busy poll), median" ;;
		qperf) echo "qperf tcp_lat -m 8, mean" ;;
		esac ;;
	tcp_rtt)
		case $LAT_TOOL in
		sockperf) echo "2 x sockperf ping-pong --nonblocked, median" ;;
		qperf) echo "2 x qperf tcp_lat, mean" ;;
		esac ;;
	tcp_rate_64)
		case $RATE_TOOL in
		sockperf) echo "sockperf throughput -m 64" ;;
		qperf) echo "qperf tcp_bw -m 64" ;;
		esac ;;
	esac
}

rows=()	# name, softrnic, limit, limit tool, ratio, better
incomplete=0
for c in "${CASES[@]}"; do
	IFS='|' read -r name sec col cmd key <<<"$c"
	case $sec in
	bw) unit="Gb/s" better="higher" ;;
	lat) unit="us" better="lower" ;;
	rate) unit="Mpps" better="higher" ;;
	esac
	read -r sm smin smax sn <<<"$(stats "$name")"
	read -r lm lmin lmax ln <<<"$(stats "$key")"
	if [[ -n ${sm:-} ]]; then
		sr="$(fig "$sm") $unit [$(fig "$smin")-$(fig "$smax")]"
		((sn < RUNS)) && sr+=" n=$sn"
	else
		sr="n/a"
	fi
	((${sn:-0} < RUNS || ${ln:-0} < RUNS)) && incomplete=1
	if [[ -n ${lm:-} ]]; then
		lim="$(fig "$lm") $unit [$(fig "$lmin")-$(fig "$lmax")]"
		((ln < RUNS)) && lim+=" n=$ln"
	else
		lim="n/a"
	fi
	tool=$(limit_label "$key" "${key##*_}")
	[[ -n $tool ]] || tool="missing: apt-get install $([[ $sec == bw ]] && echo iperf3 || echo sockperf)"
	if [[ -n ${sm:-} && -n ${lm:-} ]]; then
		ratio=$(awk -v a="$sm" -v b="$lm" 'BEGIN { r = a / b; printf (r < 0.1 ? "%.3f" : "%.2f"), r }')
	else
		ratio="n/a"
	fi
	rows+=("$name|$sr|$lim|$tool|$ratio|$better")
	unset sm smin smax sn lm lmin lmax ln
done

header="softrnic bench, $started, commit $commit: median of $RUNS runs [min-max]; $(nproc) CPUs shared by client, server and their progress threads; load average $load_before before, $load_after after"
legend="ratio = softrnic / raw TCP over loopback. Bandwidth and message rate: higher is better (1.00 = as fast as raw TCP). Latency: lower is better (1.00 = as fast as raw TCP; ib_read_lat is compared with the full TCP round trip, send/write with half of it, as perftest reports them)."

{
	echo "$header"
	echo
	printf '%-17s  %-28s  %-26s  %-37s  %6s  %s\n' benchmark softrnic "raw TCP" "raw TCP measured by" ratio better
	for row in "${rows[@]}"; do
		IFS='|' read -r name sr lim tool ratio better <<<"$row"
		printf '%-17s  %-28s  %-26s  %-37s  %6s  %s\n' "$name" "$sr" "$lim" "$tool" "$ratio" "$better"
	done
	echo
	echo "$legend" | fold -s -w 100
}

{
	echo "# softrnic bench results"
	echo
	echo "$header."
	echo
	echo "| benchmark | softrnic | raw TCP | raw TCP measured by | ratio | better |"
	echo "|---|---|---|---|---:|---|"
	for row in "${rows[@]}"; do
		IFS='|' read -r name sr lim tool ratio better <<<"$row"
		echo "| $name | $sr | $lim | $tool | $ratio | $better |"
	done
	echo
	echo "$legend"
	echo
	echo "Produced by \`bench/run.sh\` (BENCH_RUNS=$RUNS, BENCH_SECS=$SECS, BENCH_ITERS=$ITERS); see bench/README.md."
} >"$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "bench: markdown written to ${OUT#"$ROOT"/} (${SECONDS}s)" >&2

((failures || incomplete)) && exit 1
exit 0
