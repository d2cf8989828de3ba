#!/usr/bin/env bash
# compat/ud_port: a context's QPN prefix is its TCP listener's port, and
# its UD QPs use the UDP port of the same number (DESIGN.md decision 4),
# so a context must own both. Another process that holds the UDP twin of
# the port the kernel gave the listener made ibv_create_qp(UD) fail with
# EADDRINUSE ("mckey: unable to create QP: Address already in use" under
# load). Here, in a network namespace whose ephemeral range is 16 ports,
# a holder binds the UDP twins of 14 of them; rdma-core's unmodified
# ibv_ud_pingpong, server and client, must still make their UD QPs and
# pass traffic, because each context keeps trying until it gets a port
# free in both protocols.
#
# usage: ud_port.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: ud_port.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR
PY=/usr/bin/python3
LO=40000 HI=40015 TAKEN=14 OOB=39000

[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (ip netns, sysctl in it)"; exit 77; }
[[ -x /usr/bin/ibv_ud_pingpong ]] || { echo "SKIP: ibv_ud_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
[[ -x $PY ]] || { echo "SKIP: $PY missing"; exit 77; }
ns=srudport$$
ip netns add "$ns" 2>/dev/null || { echo "SKIP: ip netns unavailable"; exit 77; }
work=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$ns" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up
in_ns sysctl -qw net.ipv4.ip_local_port_range="$LO $HI" || { echo "SKIP: cannot narrow the port range"; exit 77; }

# The holder: dual-stack UDP sockets on the first TAKEN ports of the range.
in_ns timeout 60 "$PY" -c '
import socket, sys, time
lo, n = int(sys.argv[1]), int(sys.argv[2])
held = []
for p in range(lo, lo + n):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", p))
    held.append(s)
print("held", n, flush=True)
time.sleep(60)
' "$LO" "$TAKEN" >"$work/holder" 2>&1 &
pids+=($!)
for ((t = 0; t < 50; t++)); do grep -q held "$work/holder" && break; sleep 0.1; done
grep -q held "$work/holder" || { echo "FAIL: the UDP holder did not start"; cat "$work/holder"; exit 1; }

fail=0
for round in 1 2 3; do
	in_ns timeout 20 "$SOFTRNIC" run -- ibv_ud_pingpong -g 0 -p "$OOB" -n 200 -c >"$work/srv" 2>&1 &
	spid=$!
	pids+=("$spid")
	for ((t = 0; t < 100; t++)); do
		[[ -n $(in_ns ss -Htln "sport = :$OOB" 2>/dev/null) ]] && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	in_ns timeout 20 "$SOFTRNIC" run -- ibv_ud_pingpong -g 0 -p "$OOB" -n 200 -c 127.0.0.1 >"$work/cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	if ((crc || src)) || ! grep -q "iters in" "$work/srv" || ! grep -q "iters in" "$work/cli"; then
		echo "FAIL: round $round: server exit $src, client exit $crc"
		sed 's/^/  srv| /' "$work/srv"
		sed 's/^/  cli| /' "$work/cli"
		fail=1
		break
	fi
	echo "ok: round $round: UD QPs made and 200 iterations passed with $TAKEN of 16 UDP ports held"
done
((fail)) && { echo "FAIL: ud_port"; exit 1; }
echo "PASS: ud_port"
