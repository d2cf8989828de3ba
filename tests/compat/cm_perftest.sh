#!/usr/bin/env bash
# compat/cm_perftest: Debian's unmodified perftest in CM mode (-R: QPs
# created with rdma_create_qp_ex and connected by librdmacm, the WR API on
# top) through `softrnic run`, server and client as two processes. Both must
# exit 0 and the client must print one result row with the iteration count
# asked for and a positive bandwidth or latency.
#
# usage: cm_perftest.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_perftest.sh BUILD_DIR}
CASE_TIMEOUT=30
BUDGET=150

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat ib_read_lat

# rows FILE COL ITERS: result rows "#bytes #iterations numbers..." with
# ITERS iterations and column COL > 0; prints their number.
rows() {
	awk -v col="$2" -v it="$3" '
		/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ {
			if ($2 == it && $col + 0 > 0) n++; else bad++
		}
		END { print n + 0; exit (n > 0 && !bad) ? 0 : 1 }' "$1"
}

# pair NAME ITERS SHOWN PROG ARGS...: PROG -R -n ITERS ARGS as server and
# client; the client's row must report SHOWN iterations (ITERS per QP).
pair() {
	local name=$1 iters=$2 shown=$3 prog=$4 col ok=1 t0 n
	shift 4
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	case $prog in
	*_bw) col=4 ;;
	*) col=5 ;;
	esac
	t0=$(date +%s%N)
	serve "$name" "$prog" -R -d softrnic0 -x 0 -p @PORT@ -n "$iters" "$@" || return
	client "$name" "$prog" -R -d softrnic0 -x 0 -p @PORT@ -n "$iters" "$@" 127.0.0.1
	reap
	status_ok "$name" "client ($prog -R -n $iters $*)" "$crc" || ok=0
	status_ok "$name" "server ($prog -R -n $iters $*)" "$src" || ok=0
	if ! n=$(rows "$tmp/$name.cli" "$col" "$shown") || ((n != 1)); then
		fail "$name: client printed $n valid result rows with $shown iterations, want 1"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-14s %-34s %6d ms  %s\n' "$name" "$prog -R $*" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(awk -v col="$col" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { r = $1 " B: " $col } END { print r }' "$tmp/$name.cli")"
	else
		showall "$name"
	fi
}

pair send_bw     200 200 ib_send_bw
pair send_bw-64k 100 100 ib_send_bw -s 65536
pair send_bw-old 200 200 ib_send_bw --use_old_post_send
pair write_bw    200 200 ib_write_bw
pair read_bw     200 200 ib_read_bw
pair send_lat    200 200 ib_send_lat
pair write_lat   200 200 ib_write_lat
pair read_lat    200 200 ib_read_lat
pair send_bw-2qp 200 400 ib_send_bw -q 2
pair write_bw-bi 200 200 ib_write_bw -b

if ((failed)); then
	echo "FAIL: cm_perftest (${SECONDS}s)"
	exit 1
fi
echo "PASS: perftest -R (rdma_cm) send/write/read bw and lat (${SECONDS}s)"
exit 0
