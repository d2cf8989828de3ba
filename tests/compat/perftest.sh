#!/usr/bin/env bash
# compat/perftest: Debian's unmodified perftest (ib_{send,write,read,atomic}
# _{bw,lat}), each run as a server process and a client process through
# `softrnic run` on softrnic0, QPs connected by hand (perftest's own TCP
# exchange, GID index 0). Both ends must exit 0 and the client (and the server,
# where perftest prints one there) must print a result row with a positive
# bandwidth or latency. Not covered yet: -R (needs librdmacm); -c UD is in
# ud_perftest.sh.
#
# usage: perftest.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: perftest.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
CASE_TIMEOUT=30		# seconds per run; most take about 1, `-a` about 7
BUDGET=140		# seconds for the whole script (ctest allows 180)

for prog in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw \
	    ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
	if [[ ! -x /usr/bin/$prog ]]; then
		echo "SKIP: /usr/bin/$prog not installed (apt-get install perftest)"
		exit 77
	fi
done
# shellcheck source=tests/compat/lib_perftest.sh
. "$(dirname "$0")/lib_perftest.sh"

# Bandwidth. -n is small: these check function, not speed.
pair send_bw-8       1 ib_send_bw -s 8 -n 1000
pair send_bw-64k     1 ib_send_bw -s 65536 -n 200
pair send_bw-bidir   1 ib_send_bw -b -n 200
pair send_bw-events  1 ib_send_bw -e -n 200
pair send_bw-srq     1 ib_send_bw --use-srq -n 200
pair send_bw-uc      1 ib_send_bw -c UC -n 200
pair send_bw-4qp     1 ib_send_bw -q 4 -n 200
pair send_bw-cqmod   1 ib_send_bw -Q 16 -n 320
pair write_bw-8      1 ib_write_bw -s 8 -n 200
pair write_bw-64k    1 ib_write_bw -s 65536 -n 200
pair write_bw-bidir  1 ib_write_bw -b -n 200
pair write_bw-oldpost 1 ib_write_bw --use_old_post_send -n 200
pair write_bw-uc     1 ib_write_bw -c UC -n 200
pair write_bw-4qp-l8 1 ib_write_bw -q 4 -l 8 -n 200
pair write_bw-all   23 ib_write_bw -a -n 100
pair read_bw-8       1 ib_read_bw -s 8 -n 200
pair read_bw-64k     1 ib_read_bw -s 65536 -n 200
pair read_bw-bidir   1 ib_read_bw -b -o 4 -n 200
pair atomic_bw-fadd  1 ib_atomic_bw -n 200
pair atomic_bw-cas   1 ib_atomic_bw -A CMP_AND_SWAP -n 200
# Latency.
pair send_lat-8      1 ib_send_lat -s 8 -n 500
pair send_lat-64k    1 ib_send_lat -s 65536 -n 200
pair send_lat-events 1 ib_send_lat -e -n 200
pair send_lat-inline 1 ib_send_lat -I 64 -s 32 -n 200
pair write_lat-8     1 ib_write_lat -s 8 -n 500
pair write_lat-64k   1 ib_write_lat -s 65536 -n 200
pair read_lat-8      1 ib_read_lat -s 8 -n 500
pair read_lat-64k    1 ib_read_lat -s 65536 -n 200
pair atomic_lat-fadd 1 ib_atomic_lat -n 500
pair atomic_lat-cas  1 ib_atomic_lat -A CMP_AND_SWAP -n 200

if ((failed)); then
	echo "FAIL: perftest (${SECONDS}s)"
	exit 1
fi
echo "PASS: perftest send/write/read/atomic bw and lat between two processes (${SECONDS}s)"
exit 0
