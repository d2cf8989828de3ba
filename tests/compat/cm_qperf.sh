#!/usr/bin/env bash
# compat/cm_qperf: Debian's unmodified qperf with -cm1 (its QPs connected by
# librdmacm instead of by hand) through `softrnic run`: one server process,
# one client run per test. Each run must exit 0 and print a positive
# bandwidth or latency.
#
# usage: cm_qperf.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_qperf.sh BUILD_DIR}
CASE_TIMEOUT=30
BUDGET=140

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need qperf

# the server serves until killed: give it the whole budget
CASE_TIMEOUT=$((BUDGET + 20)) serve server qperf -lp @PORT@ || exit 1
CASE_TIMEOUT=30

run() {
	local test=$1 res=$tmp/$1.out rc t0
	shift
	if ((SECONDS > BUDGET)); then
		fail "$test: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- qperf 127.0.0.1 -lp "$port" \
		-cm1 -t 1 "$@" "$test" >"$res" 2>&1
	rc=$?
	if ((rc != 0)); then
		fail "qperf -cm1 $* $test exited $rc$( ((rc == 124)) && echo ' (timed out)')"
	elif ! awk '$1 ~ /^(bw|latency|send_bw|recv_bw|msg_rate)$/ && $2 == "=" && $3 + 0 > 0 { ok = 1 }
		    END { exit !ok }' "$res"; then
		fail "qperf -cm1 $* $test printed no positive result"
	else
		printf 'ok: %-20s %-5s %6d ms  %s\n' "$test" "$*" $((($(date +%s%N) - t0) / 1000000)) \
			"$(awk '$2 == "=" { printf "%s %s %s  ", $1, $3, $4 }' "$res")"
		return
	fi
	show client "$res"
}

for test in rc_bw rc_lat rc_bi_bw rc_rdma_write_bw rc_rdma_read_bw rc_rdma_write_lat; do
	run "$test" -cp1
done
run rc_bw
run rc_lat

if ! kill -0 "$spid" 2>/dev/null; then
	fail "the qperf server died"
fi
if ((failed)); then
	show server "$tmp/server.srv"
	show "server stderr" "$tmp/server.srv.err"
	echo "FAIL: cm_qperf (${SECONDS}s)"
	exit 1
fi
echo "PASS: qperf -cm1 RC tests through librdmacm (${SECONDS}s)"
exit 0
