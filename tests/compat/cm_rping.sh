#!/usr/bin/env bash
# compat/cm_rping: rdma-core's unmodified rping (rdmacm-utils) through
# `softrnic run`, server and client as two processes, connected by
# librdmacm. Each ping is a SEND of the client's buffer address, an RDMA
# READ of it by the server, an RDMA WRITE back, and the client prints the
# buffer it got back with -v. So the client must print exactly COUNT lines
# "ping data: rdma-ping-N: <rping's pattern>", byte for byte what rping
# wrote, the server as many "server ping data:" lines, and both exit 0.
# -V makes both sides compare the data too. Cases: IPv4, IPv6, -q (QPs
# the program creates and moves itself with rdma_init_qp_attr and
# rdma_establish), a larger -S.
#
# usage: cm_rping.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_rping.sh BUILD_DIR}
CASE_TIMEOUT=30		# seconds per run; 100 pings take well under 1
BUDGET=150		# seconds for the whole script (ctest allows 180)

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need rping awk

# expected COUNT SIZE: the lines `rping -c -v` prints when all is well.
# rping fills its buffer with "rdma-ping-N: " and then the letters from
# 'A'+N (cycling 'A'..'z'), SIZE-1 characters in all.
expected() {
	awk -v count="$1" -v size="$2" 'BEGIN {
		start = 65
		for (p = 0; p < count; p++) {
			s = sprintf("rdma-ping-%d: ", p)
			c = start
			while (length(s) < size - 1) {
				s = s sprintf("%c", c)
				if (++c > 122) c = 65
			}
			print "ping data: " s
			if (++start > 122) start = 65
		}
	}'
}

# ping NAME ADDR COUNT SIZE EXTRA...: one server/client pair.
ping() {
	local name=$1 addr=$2 n=$3 size=$4 ok=1 t0 got
	shift 4
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	serve "$name" rping -s -a "$addr" -p @PORT@ -v -V -C "$n" -S "$size" "$@" || return
	client "$name" rping -c -a "$addr" -p @PORT@ -v -V -C "$n" -S "$size" "$@"
	reap
	status_ok "$name" "client (rping -c -a $addr -C $n -S $size $*)" "$crc" || ok=0
	status_ok "$name" "server (rping -s -a $addr -C $n -S $size $*)" "$src" || ok=0
	expected "$n" "$size" >"$tmp/$name.want"
	grep '^ping data: ' "$tmp/$name.cli" >"$tmp/$name.got"
	got=$(wc -l <"$tmp/$name.got")
	if ((got != n)); then
		fail "$name: client printed $got 'ping data:' lines, want $n"
		ok=0
	elif ! cmp -s "$tmp/$name.want" "$tmp/$name.got"; then
		fail "$name: the data the client got back differs from what it sent:"
		diff "$tmp/$name.want" "$tmp/$name.got" | head -5 | sed 's/^/  /'
		ok=0
	fi
	got=$(count "$tmp/$name.srv" '^server ping data: rdma-ping-[0-9]+: ')
	if ((got != n)); then
		fail "$name: server printed $got 'server ping data:' lines, want $n"
		ok=0
	fi
	if grep -qiE 'mismatch|error|fail' "$tmp/$name".{cli,srv}{,.err}; then
		fail "$name: rping reported an error"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-10s rping -a %-9s -C %-4s -S %-5s %-3s %6d ms\n' "$name" "$addr" \
			"$n" "$size" "$*" $((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
}

have_v6=0
python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1",0))' \
	2>/dev/null && have_v6=1

ping v4        127.0.0.1 100 64
ping v4-own-qp 127.0.0.1 100 64 -q
ping v4-s4k    127.0.0.1  50 4096
if ((have_v6)); then
	ping v6    ::1       100 64
else
	echo "note: no ::1 on this host, IPv6 case skipped"
fi

if ((failed)); then
	echo "FAIL: cm_rping (${SECONDS}s)"
	exit 1
fi
echo "PASS: rping through librdmacm, data compared (${SECONDS}s)"
exit 0
