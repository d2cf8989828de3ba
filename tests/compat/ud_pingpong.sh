#!/usr/bin/env bash
# compat/ud_pingpong: rdma-core's unmodified ibv_ud_pingpong (Debian's
# ibverbs-utils), run as a server process and a client process through
# `softrnic run`, their UD QPs talking over softrnic's UDP channel (RoCE
# identity, GID index 0; each end makes its AH from the other's GID and
# QPN, exchanged over the program's own TCP port). Sizes up to the port
# MTU (4096; the program refuses more), with -e (CQ events) and -c (the
# server validates every received buffer). Both ends must exit 0 and print
# their "N iters in S seconds = U usec/iter" line.
#
# usage: ud_pingpong.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: pingpong.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
CASE_TIMEOUT=20		# seconds per run; a pair normally takes well under 3
BUDGET=150		# seconds for the whole script (ctest allows 180)

for prog in ibv_ud_pingpong; do
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

pair ud            1000 ibv_ud_pingpong
pair ud-s1         1000 ibv_ud_pingpong -s 1
pair ud-s64        1000 ibv_ud_pingpong -s 64
pair ud-s1024      1000 ibv_ud_pingpong -s 1024
pair ud-s2048-chk  1000 ibv_ud_pingpong -s 2048 -c
pair ud-s4096      1000 ibv_ud_pingpong -s 4096
pair ud-events     1000 ibv_ud_pingpong -e
pair ud-events-chk  500 ibv_ud_pingpong -e -c -s 512 -n 500
pair ud-rx16       2000 ibv_ud_pingpong -r 16 -n 2000

if ((failed)); then
	echo "FAIL: ud_pingpong (${SECONDS}s)"
	exit 1
fi
echo "PASS: ud pingpong between two processes (${SECONDS}s)"
exit 0
