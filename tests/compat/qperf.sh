#!/usr/bin/env bash
# compat/qperf: Debian's unmodified qperf, one server process (it forks a child
# per test) and one client process per test, both through `softrnic run`.
# qperf connects its QPs by hand with a LID and no GRH (dlid 0 here);
# softrnic then reaches the peer through loopback. qperf's own control
# connection uses the TCP port given by -lp.
#
# The tests run in qperf's polling mode (-cp1) and in its default event
# mode, where a side sleeps in ibv_get_cq_event until qperf's end-of-test
# SIGALRM interrupts it (EINTR, as rdma-core's read() of the channel fd).
# Not covered: -cm1 (needs librdmacm), ud_* and xrc_* tests.
#
# usage: qperf.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: qperf.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
QPERF=/usr/bin/qperf
CASE_TIMEOUT=30		# seconds per client run; one takes about 1.5
BUDGET=140		# seconds for the whole script (ctest allows 180)

if [[ ! -x $QPERF ]]; then
	echo "SKIP: qperf not installed (apt-get install qperf)"
	exit 77
fi
if ! command -v ss >/dev/null; then
	echo "SKIP: ss not installed (apt-get install iproute2)"
	exit 77
fi
if [[ ! -x $SOFTRNIC ]]; then
	echo "FAIL: $SOFTRNIC not built"
	exit 1
fi

# shellcheck source=tests/compat/lib.sh
. "$(dirname "$0")/lib.sh"
spid=

# The server: qperf with no test argument serves until killed.
for attempt in 1 2 3; do
	port=$(free_port)
	timeout -k 5 $((BUDGET + 20)) "$SOFTRNIC" run -- "$QPERF" -lp "$port" >"$tmp/server" 2>&1 &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 100); do
		listening "$port" && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	listening "$port" && break
	kill "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	spid=
done
if [[ -z $spid ]]; then
	echo "FAIL: the qperf server did not start listening"
	sed 's/^/  | /' "$tmp/server"
	exit 1
fi

# run TEST [OPTIONS...]: one client run; it must exit 0 and print a positive
# bw / latency / msg_rate figure.
run() {
	local test=$1 out rc t0
	shift
	if ((SECONDS > BUDGET)); then
		fail "$test $*: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	out=$tmp/client
	t0=$(date +%s%N)
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$QPERF" 127.0.0.1 -lp "$port" -t 1 "$@" "$test" \
		>"$out" 2>&1
	rc=$?
	if ((rc != 0)); then
		fail "qperf 127.0.0.1 -lp PORT -t 1 $* $test exited $rc$( ((rc == 124)) && echo ' (timed out)')"
	elif ! awk '$1 ~ /^(bw|latency|send_bw|recv_bw|msg_rate)$/ && $2 == "=" && $3 + 0 > 0 { ok = 1 }
		    END { exit !ok }' "$out"; then
		fail "qperf $* $test printed no positive result"
	else
		printf 'ok: %-24s %-5s %6d ms  %s\n' "$test" "$*" $((($(date +%s%N) - t0) / 1000000)) \
			"$(awk '$2 == "=" { printf "%s %s %s  ", $1, $3, $4 }' "$out")"
		return
	fi
	echo "  --- client output:"
	sed 's/^/  | /' "$out"
}

# Polling mode (-cp1: both sides poll their CQ).
for test in rc_bw rc_bi_bw rc_lat uc_bw uc_bi_bw uc_lat \
	    rc_rdma_read_bw rc_rdma_read_lat rc_rdma_write_bw rc_rdma_write_lat \
	    uc_rdma_write_bw uc_rdma_write_lat \
	    rc_compare_swap_mr rc_fetch_add_mr ver_rc_compare_swap ver_rc_fetch_add; do
	run "$test" -cp1
done
# These poll memory by design (no -cp1).
run rc_rdma_write_poll_lat
run uc_rdma_write_poll_lat
# Event mode (qperf's default): completions through completion channels.
for test in rc_bw rc_lat uc_lat rc_rdma_read_bw rc_rdma_read_lat rc_rdma_write_bw \
	    rc_rdma_write_lat uc_rdma_write_lat rc_compare_swap_mr ver_rc_fetch_add; do
	run "$test"
done

if ! kill -0 "$spid" 2>/dev/null; then
	fail "the qperf server died"
	sed 's/^/  | /' "$tmp/server"
fi
if ((failed)); then
	[[ -s $tmp/server ]] && { echo "  --- server output:"; sed 's/^/  | /' "$tmp/server"; }
	echo "FAIL: qperf (${SECONDS}s)"
	exit 1
fi
echo "PASS: qperf RC/UC send, RDMA and atomic tests between two processes (${SECONDS}s)"
exit 0
