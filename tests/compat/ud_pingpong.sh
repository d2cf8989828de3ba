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
# shellcheck source=tests/compat/lib_pingpong.sh
. "$(dirname "$0")/lib_pingpong.sh"

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
