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
# shellcheck source=tests/compat/lib_pingpong.sh
. "$(dirname "$0")/lib_pingpong.sh"

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
