#!/usr/bin/env bash
# compat/ucx: UCX (Debian's ucx-utils) over softrnic0's verbs transports,
# unmodified, through `softrnic run`.
#
# `ucx_info -d` must list the memory domain softrnic0 with rc_verbs and
# ud_verbs on softrnic0:1 (UCX skips a device without a character device
# /dev/infiniband/uverbsN: the view `softrnic run` makes, tools/dev_view.c).
# Then ucx_perftest server/client pairs with UCX_NET_DEVICES=softrnic0:1 and
#   UCX_TLS=rc_verbs,ud_verbs,self  (RC data, UD for the wireup), and
#   UCX_TLS=ud_verbs,self           (UD alone),
# each must exit 0 with the client's "Final:" row counting every iteration,
# and UCX must say (UCX_LOG_LEVEL=info) that the endpoints' lanes are
# rc_verbs/softrnic0:1, or ud_verbs/softrnic0:1. That softrnic carried the traffic (not UCX's own tcp, posix, sysv or cma)
# is proved by SOFTRNIC_STATS=1's line at exit on both sides: in RC runs
# both sides wrote FPDUs (on shm rings or TCP; on TCP alone with
# SOFTRNIC_SHM=0), at least one per iteration in all, and sent UD datagrams for the wireup; in UD runs
# both sides sent and received datagrams, at least one per iteration in
# all, and wrote no FPDU.
#
# usage: ucx.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=$(cd "${1:?usage: ucx.sh BUILD_DIR}" && pwd)
CASE_TIMEOUT=30		# seconds per program run; each takes 1-3 s
BUDGET=120		# seconds for the whole script (ctest allows 180)

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need ucx_perftest ucx_info awk

# UCX_LOG_LEVEL=info: UCX prints the lanes an endpoint uses
# ("ep_cfg[0]: tag(rc_verbs/softrnic0:1)"), which the checks read too.
export UCX_NET_DEVICES=softrnic0:1 UCX_LOG_LEVEL=info SOFTRNIC_STATS=1
unset UCX_TLS SOFTRNIC_SHM SOFTRNIC_SYSFS

# ucx_info -d: softrnic0, and both verbs transports on its port.
timeout 30 "$SOFTRNIC" run -- ucx_info -d >"$tmp/info" 2>&1
if ! grep -q 'Memory domain: softrnic0$' "$tmp/info"; then
	msg=$(SOFTRNIC_DEBUG=1 timeout 30 "$SOFTRNIC" run -- true 2>&1 | head -1)
	if ! timeout 30 "$SOFTRNIC" run -- test -c /dev/infiniband/uverbs0; then
		echo "SKIP: no /dev/infiniband/uverbs0 view here: ${msg:-no reason printed}"
		exit 77
	fi
	fail "ucx_info -d lists no memory domain softrnic0"
	show "ucx_info -d" "$tmp/info"
	exit 1
fi
awk '/Memory domain: softrnic0$/ { md = 1; next } /Memory domain:/ { md = 0 }
	md && /Transport:/ { tl = $3 } md && /Device: softrnic0:1$/ { print tl }' \
	"$tmp/info" | sort -u >"$tmp/tls"
for tl in rc_verbs ud_verbs; do
	grep -qx "$tl" "$tmp/tls" || fail "ucx_info -d: softrnic0 has no $tl on softrnic0:1"
done
((failed)) || echo "ok: ucx_info -d lists softrnic0 with $(tr '\n' ' ' <"$tmp/tls")"

# stat FILE FIELD: the sum of FIELD over the stats lines in FILE.
stat() {
	awk -v f="$2" '/^softrnic stats:/ { for (i = 1; i < NF; i++) if ($i == f) s += $(i + 1) }
		END { print s + 0 }' "$1"
}

# fpdus FILE CHANNEL: the FPDUs FILE's stats line counts on CHANNEL: tcp,
# or rc = shm and tcp (shm where the two processes may share memory: not
# across the user namespaces of two unprivileged `softrnic run`s).
fpdus() {
	if [[ $2 == tcp ]]; then
		stat "$1" tcp_fpdus
	else
		echo $(($(stat "$1" shm_fpdus) + $(stat "$1" tcp_fpdus)))
	fi
}

# perf NAME TLS CHANNEL ITERS ARGS...: one ucx_perftest pair, -n ITERS;
# CHANNEL is what must have carried it: rc (softrnic's RC streams, shm or
# TCP), tcp (SOFTRNIC_SHM=0: TCP and never shm) or ud.
perf() {
	local name=$1 tls=$2 chan=$3 n=$4 ok=1 side f fp t0 iters tl
	shift 4
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	export UCX_TLS=$tls
	[[ $chan == tcp ]] && export SOFTRNIC_SHM=0
	serve "$name" ucx_perftest -p @PORT@ -n "$n" "$@" || { unset SOFTRNIC_SHM; return; }
	client "$name" ucx_perftest -p @PORT@ -n "$n" "$@" 127.0.0.1
	reap
	unset SOFTRNIC_SHM
	status_ok "$name" "client (ucx_perftest -n $n $*)" "$crc" || ok=0
	status_ok "$name" "server (ucx_perftest -n $n $*)" "$src" || ok=0
	iters=$(awk '/^Final:/ { print $2 }' "$tmp/$name.cli")
	if [[ $iters != "$n" ]]; then
		fail "$name: the client's Final row counts '${iters}' iterations, want $n"
		ok=0
	fi
	if grep -qE 'UCX +(ERROR|WARN)|Fatal' "$tmp/$name".{cli,srv}{,.err}; then
		fail "$name: UCX reported an error"
		ok=0
	fi
	tl=$([[ $chan == ud ]] && echo ud_verbs || echo rc_verbs)
	for side in srv cli; do
		if ! grep -qE "ep_cfg\[[0-9]+\]: .*$tl/softrnic0:1" "$tmp/$name.$side"; then
			fail "$name: the $side's UCX endpoint has no $tl/softrnic0:1 lane"
			ok=0
		fi
	done
	for side in srv cli; do
		f=$tmp/$name.$side.err
		fp=$(fpdus "$f" rc)
		if ! grep -q '^softrnic stats:' "$f"; then
			fail "$name: the $side printed no softrnic stats line: softrnic carried nothing"
			ok=0
		elif [[ $chan == ud ]] && (($(stat "$f" ud_sent) < 1 || $(stat "$f" ud_received) < 1 ||
			fp != 0)); then
			fail "$name: the $side's UD datagrams: sent $(stat "$f" ud_sent)," \
				"received $(stat "$f" ud_received), want >= 1 each; FPDUs $fp, want 0"
			ok=0
		elif [[ $chan != ud ]] && (($(fpdus "$f" "$chan") < 1 || $(stat "$f" ud_sent) < 1)); then
			fail "$name: the $side wrote $(fpdus "$f" "$chan") FPDUs ($chan)" \
				"and sent $(stat "$f" ud_sent) UD datagrams (wireup), want >= 1 each"
			ok=0
		elif [[ $chan == tcp ]] && (($(stat "$f" shm_fpdus) != 0)); then
			fail "$name: the $side used shm with SOFTRNIC_SHM=0"
			ok=0
		fi
	done
	# One FPDU or datagram or more per iteration in all: the sum, not each
	# side, since a receiver or a one-sided target answers with ACKs only
	# (cumulative, in UCX's UD as in softrnic's RC).
	if [[ $chan == ud ]]; then
		fp=$(($(stat "$tmp/$name.srv.err" ud_received) + $(stat "$tmp/$name.cli.err" ud_received)))
	else
		fp=$(($(fpdus "$tmp/$name.srv.err" "$chan") + $(fpdus "$tmp/$name.cli.err" "$chan")))
	fi
	if ((fp < n)); then
		fail "$name: $fp $([[ $chan == ud ]] && echo "UD datagrams received" ||
			echo "FPDUs ($chan)") in all, want >= $n"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-13s %-22s %s  [%s] %5d ms\n' "$name" "$tls" \
			"$(awk '/^Final:/ { printf "%s iterations, %s us, %s MB/s", $2, $3, $7 }' \
				"$tmp/$name.cli")" \
			"$(grep -h '^softrnic stats:' "$tmp/$name.cli.err" |
				awk '{ printf "tcp %s shm %s ud %s/%s", $6, $8, $18, $20 }')" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
}

RC=rc_verbs,ud_verbs,self
UD=ud_verbs,self
perf rc-tag_lat $RC rc 1000 -t tag_lat
perf rc-tag_bw $RC rc 2000 -t tag_bw -s 65536
perf rc-put_bw $RC rc 200 -t ucp_put_bw -s 1048576
perf rc-tcp-tag_bw $RC tcp 2000 -t tag_bw -s 65536
perf ud-tag_lat $UD ud 1000 -t tag_lat
perf ud-tag_bw $UD ud 1000 -t tag_bw -s 16384
perf ud-am_bw $UD ud 2000 -t ucp_am_bw -s 4096

if ((failed)); then
	echo "FAIL: ucx (${SECONDS}s)"
	exit 1
fi
echo "PASS: UCX ran over softrnic0's rc_verbs and ud_verbs (${SECONDS}s)"
exit 0
