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

# rows FILE COL: print how many result rows ("#bytes #iterations numbers...")
# FILE has; fail (status 1) unless there is one at least and the figure of
# merit in column COL of each (BW average for *_bw: 4, t_typical for *_lat: 5)
# is > 0.
rows() {
	awk -v col="$2" '
		/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ {
			n++
			if ($col + 0 <= 0) bad++
		}
		END { print n + 0; exit (n > 0 && !bad) ? 0 : 1 }' "$1"
}

# pair NAME NROWS PROG ARGS...: run PROG -d softrnic0 ARGS as server, then as
# client of 127.0.0.1, and check both. NROWS: the result rows the client
# prints (one per message size).
pair() {
	local name=$1 nrows=$2 prog=$3 port spid src crc t0 ok=1 col n srv_rows attempt
	shift 3
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	case $prog in
	*_bw) col=4 ;;
	*) col=5 ;;
	esac
	# perftest prints the table on the server too, except for the
	# latency tests where the server only answers (read, atomic).
	case $prog in
	ib_read_lat | ib_atomic_lat) srv_rows=0 ;;
	*) srv_rows=1 ;;
	esac
	t0=$(date +%s%N)
	# The server listens on its port once it has opened the device.
	# Another process may take the port first: then try another one.
	for attempt in 1 2 3; do
		port=$(free_port)
		timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -d softrnic0 -p "$port" "$@" \
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
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -d softrnic0 -p "$port" "$@" 127.0.0.1 \
		>"$tmp/$name.cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	pids=()
	if ((src != 0)); then
		fail "$name: server ($prog -d softrnic0 -p PORT $*) exited $src$( ((src == 124)) && echo ' (timed out)')"
		ok=0
	fi
	if ((crc != 0)); then
		fail "$name: client ($prog -d softrnic0 -p PORT $* 127.0.0.1) exited $crc$( ((crc == 124)) && echo ' (timed out)')"
		ok=0
	fi
	if ! n=$(rows "$tmp/$name.cli" "$col") || ((n != nrows)); then
		fail "$name: client printed $n valid result rows, expected $nrows"
		ok=0
	fi
	# (with -a the server prints only the last size)
	if ((srv_rows)) && ! n=$(rows "$tmp/$name.srv" "$col"); then
		fail "$name: server printed no valid result row"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-16s %-42s %6d ms  %s\n' "$name" "$prog $*" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(awk -v col="$col" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { r = $1 " B: " $col } END { print r }' "$tmp/$name.cli")$( [[ $col == 4 ]] && echo ' MB/s' || echo ' usec')"
	else
		show server "$tmp/$name.srv"
		show client "$tmp/$name.cli"
	fi
}

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
