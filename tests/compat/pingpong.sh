#!/usr/bin/env bash
# compat/pingpong: rdma-core's unmodified ibv_rc_pingpong, ibv_uc_pingpong and
# ibv_srq_pingpong (Debian's ibverbs-utils), each run as a server process and
# a client process through `softrnic run`, their QPs connected by hand over
# softrnic's TCP channel (RoCE identity, GID index 0). Both ends must exit 0
# and print their "N iters in S seconds = U usec/iter" line; with -c the
# server must not report "invalid data in page". Then ibv_xsrq_pingpong
# (XRC), which must print "success" on both ends. ibv_ud_pingpong has its
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

# ibv_xsrq_pingpong: XRC (an XRC_SEND and an XRC_RECV QP per side, SRQ
# numbers exchanged); it prints "success" when every test passed.
xsrq() {
	local name=$1 t0 ok=1 side
	shift
	[[ -x /usr/bin/ibv_xsrq_pingpong ]] || { echo "note: no ibv_xsrq_pingpong, $name skipped"; return; }
	t0=$(date +%s%N)
	run_pair "$name" ibv_xsrq_pingpong -g 0 "$@" || ok=0
	for side in srv cli; do
		grep -qx 'success' "$tmp/$name.$side" ||
			{ fail "$name: $side did not print 'success'"; ok=0; }
	done
	if ((ok)); then
		printf 'ok: %-12s %-44s %6d ms\n' "$name" "ibv_xsrq_pingpong $*" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		show server "$tmp/$name.srv"
		show client "$tmp/$name.cli"
	fi
}
xsrq xsrq          -n 50
xsrq xsrq-events   -n 50 -e -s 65536

if ((failed)); then
	echo "FAIL: pingpong (${SECONDS}s)"
	exit 1
fi
echo "PASS: rc, uc, srq and xsrq pingpong between two processes (${SECONDS}s)"
exit 0
