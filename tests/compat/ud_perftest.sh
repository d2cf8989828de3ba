#!/usr/bin/env bash
# compat/ud_perftest: Debian's unmodified perftest with UD QPs (-c UD):
# ib_send_bw and ib_send_lat, server and client processes through
# `softrnic run` on softrnic0, GID index 0 (-x 0), with the WR API that
# perftest uses by default and with --use_old_post_send. Both ends must
# exit 0 and the client (and the bw server) must print a result row with
# a positive bandwidth or latency. UD messages are at most the MTU (4096),
# which perftest itself enforces.
#
# usage: ud_perftest.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: perftest.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
CASE_TIMEOUT=30		# seconds per run; most take about 1, `-a` about 7
BUDGET=150		# seconds for the whole script (ctest allows 180)

for prog in ib_send_bw ib_send_lat; do
	if [[ ! -x /usr/bin/$prog ]]; then
		echo "SKIP: /usr/bin/$prog not installed (apt-get install perftest)"
		exit 77
	fi
done
# shellcheck source=tests/compat/lib_perftest.sh
. "$(dirname "$0")/lib_perftest.sh"

# Bandwidth. -n is small: these check function, not speed.
pair ud-bw          1 ib_send_bw -c UD -x 0 -n 1000
pair ud-bw-8        1 ib_send_bw -c UD -x 0 -s 8 -n 1000
pair ud-bw-old      1 ib_send_bw -c UD -x 0 --use_old_post_send -n 1000
pair ud-bw-events   1 ib_send_bw -c UD -x 0 -e -n 500
pair ud-bw-2qp      1 ib_send_bw -c UD -x 0 -q 2 -n 500
pair ud-bw-all     12 ib_send_bw -c UD -x 0 -a -n 200
# Latency.
pair ud-lat         1 ib_send_lat -c UD -x 0 -n 1000
pair ud-lat-4k      1 ib_send_lat -c UD -x 0 -s 4096 -n 500
pair ud-lat-old     1 ib_send_lat -c UD -x 0 --use_old_post_send -n 1000
pair ud-lat-inline  1 ib_send_lat -c UD -x 0 -I 64 -s 32 -n 500
pair ud-lat-events  1 ib_send_lat -c UD -x 0 -e -n 500

if ((failed)); then
	echo "FAIL: ud_perftest (${SECONDS}s)"
	exit 1
fi
echo "PASS: perftest UD send bw and lat between two processes (${SECONDS}s)"
exit 0
