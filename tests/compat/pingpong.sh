#!/usr/bin/env bash
# compat/pingpong: rdma-core's unmodified ibv_rc_pingpong, ibv_uc_pingpong and
# ibv_srq_pingpong (Debian's ibverbs-utils), each run as a server process and
# a client process through `softrnic run`, their QPs connected by hand over
# softrnic's TCP channel (RoCE identity, GID index 0). Both ends must exit 0
# and print their "N iters in S seconds = U usec/iter" line; with -c the
# server must not report "invalid data in page". ibv_ud_pingpong has its
# own script, ud_pingpong.sh.
#
# usage: pingpong.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: pingpong.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
CASE_TIMEOUT=20		# seconds per run; a pair normally takes well under 3
BUDGET=150		# seconds for the whole script (ctest allows 180)

for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong; do
	if [[ ! -x /usr/bin/$prog ]]; then
		echo "SKIP: /usr/bin/$prog not installed (apt-get install ibverbs-utils)"
		exit 77
	fi
done
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

# pair NAME ITERS PROG ARGS...: run PROG ARGS as server, then as client of
# 127.0.0.1, and check both. ITERS is the count the "iters in" lines report.
pair() {
	local name=$1 iters=$2 prog=$3 port spid src crc t0 ok=1 side attempt
	shift 3
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	# The server listens on its port once its QP exists. Another process
	# may take the port first: then try another one.
	for attempt in 1 2 3; do
		port=$(free_port)
		timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -g 0 -p "$port" "$@" \
			>"$tmp/$name.srv" 2>&1 &
		spid=$!
		pids=("$spid")
		for _ in $(seq 100); do
			listening "$port" && break
			kill -0 "$spid" 2>/dev/null || break
			sleep 0.05
		done
		grep -q "Couldn't listen to port" "$tmp/$name.srv" || break
		wait "$spid"
	done
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -g 0 -p "$port" "$@" 127.0.0.1 \
		>"$tmp/$name.cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	pids=()
	if ((src != 0)); then
		fail "$name: server ($prog -g 0 -p PORT $*) exited $src$( ((src == 124)) && echo ' (timed out)')"
		ok=0
	fi
	if ((crc != 0)); then
		fail "$name: client ($prog -g 0 -p PORT $* 127.0.0.1) exited $crc$( ((crc == 124)) && echo ' (timed out)')"
		ok=0
	fi
	for side in srv cli; do
		if ! grep -Eq "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter$" "$tmp/$name.$side"; then
			fail "$name: $side printed no '$iters iters in ... usec/iter' line"
			ok=0
		fi
	done
	if grep -q 'invalid data in page' "$tmp/$name.srv"; then
		fail "$name: the server found wrong data in the received buffer"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-12s %-44s %6d ms   %s\n' "$name" "$prog $*" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(grep -Eo '[0-9.]+ usec/iter' "$tmp/$name.cli")"
	else
		show server "$tmp/$name.srv"
		show client "$tmp/$name.cli"
	fi
}

pair rc            1000 ibv_rc_pingpong
pair rc-s1         1000 ibv_rc_pingpong -s 1
pair rc-s64k       1000 ibv_rc_pingpong -s 65536
pair rc-s1m         200 ibv_rc_pingpong -s 1048576 -n 200
pair rc-s1m-ev      200 ibv_rc_pingpong -s 1048576 -n 200 -e -c
pair rc-n2000      2000 ibv_rc_pingpong -n 2000
pair rc-events     1000 ibv_rc_pingpong -e
pair rc-check      1000 ibv_rc_pingpong -c
pair rc-check-64k  1000 ibv_rc_pingpong -c -s 65536 -e
pair rc-newsend    1000 ibv_rc_pingpong -N
pair rc-odp        1000 ibv_rc_pingpong -o
pair rc-iodp       1000 ibv_rc_pingpong -O
pair uc            1000 ibv_uc_pingpong
pair uc-check      1000 ibv_uc_pingpong -c -e
pair srq-q4        1000 ibv_srq_pingpong -q 4
pair srq-q4-check  1000 ibv_srq_pingpong -q 4 -c
pair srq-q16-s64k   200 ibv_srq_pingpong -s 65536 -n 200

if ((failed)); then
	echo "FAIL: pingpong (${SECONDS}s)"
	exit 1
fi
echo "PASS: rc, uc and srq pingpong between two processes (${SECONDS}s)"
exit 0
