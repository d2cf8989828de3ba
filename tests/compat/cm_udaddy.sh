#!/usr/bin/env bash
# compat/cm_udaddy: rdma-core's unmodified udaddy (rdmacm-utils) through
# `softrnic run`, server and client as two processes: datagram ids
# (RDMA_PS_UDP) resolved through the CM's SIDR-like exchange on the
# listener's UDP port, then UD messages both ways (the client sends with
# the AH, QPN and Q_Key of its ESTABLISHED event, the server answers with
# ibv_create_ah_from_wc). Both sides must exit 0, print "return status 0"
# and pass through every stage. Cases: 1 connection, 4 connections x 20
# messages, large messages, IPv6, and a client with no server (UNREACHABLE
# status 1, as the kernel's SIDR reports it; udaddy exits 1).
#
# udaddy has no port option: it always uses 7174 (UDP), so the cases run
# one after the other and wait for the port to be free.
#
# usage: cm_udaddy.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_udaddy.sh BUILD_DIR}
CASE_TIMEOUT=30
BUDGET=150
PORT=7174
port=$PORT	# lib_cm.sh's @PORT@ (udaddy takes no port argument)

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need udaddy

udp_bound() { [[ -n $(ss -Huan "sport = :$PORT" 2>/dev/null) ]]; }

# wait_free: until nobody holds UDP port 7174 (another run may); 1 if never.
wait_free() {
	for _ in $(seq 100); do
		udp_bound || return 0
		sleep 0.1
	done
	return 1
}

# pair NAME ADDR ARGS...: server bound to ADDR, client connecting to it.
pair() {
	local name=$1 addr=$2 ok=1 t0 stage
	shift 2
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	if ! wait_free; then
		fail "$name: UDP port $PORT stays taken"
		return
	fi
	t0=$(date +%s%N)
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- udaddy -b "$addr" "$@" \
		>"$tmp/$name.srv" 2>"$tmp/$name.srv.err" &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 200); do
		udp_bound && break
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.05
	done
	if ! udp_bound; then
		fail "$name: the server never bound UDP port $PORT"
		reap
		showall "$name"
		return
	fi
	client "$name" udaddy -s "$addr" "$@"
	reap
	status_ok "$name" "client (udaddy -s $addr $*)" "$crc" || ok=0
	status_ok "$name" "server (udaddy -b $addr $*)" "$src" || ok=0
	for stage in 'udaddy: starting server' 'receiving data transfers' 'sending replies' \
		     'data transfers complete' 'test complete' 'return status 0'; do
		if ! grep -qx "$stage" "$tmp/$name.srv"; then
			fail "$name: the server never printed '$stage'"
			ok=0
		fi
	done
	for stage in 'udaddy: starting client' 'udaddy: connecting' 'initiating data transfers' \
		     'receiving data transfers' 'data transfers complete' 'test complete' \
		     'return status 0'; do
		if ! grep -qx "$stage" "$tmp/$name.cli"; then
			fail "$name: the client never printed '$stage'"
			ok=0
		fi
	done
	if grep -q 'failure\|failing\|failed\|event:' "$tmp/$name".{cli,srv}{,.err}; then
		fail "$name: udaddy reported a failure"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-8s udaddy %-22s %6d ms\n' "$name" "$*" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
}

pair one  127.0.0.1 -c 1
pair four 127.0.0.1 -c 4 -C 20
pair big  127.0.0.1 -c 2 -C 5 -S 2000
if python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1",0))' 2>/dev/null; then
	pair v6 ::1 -c 2
fi

# Nobody serves the port: the exchange is refused (ICMP port unreachable),
# which the kernel reports as UNREACHABLE with SIDR status 1.
if wait_free; then
	t0=$(date +%s%N)
	client none udaddy -s 127.0.0.1 -c 1
	if ((crc != 1)) || ! grep -qx 'udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1' \
		"$tmp/none.cli"; then
		fail "none: want UNREACHABLE status 1 and exit 1 (exit $crc)"
		show client "$tmp/none.cli"
		show "client stderr" "$tmp/none.cli.err"
	else
		printf 'ok: %-8s udaddy %-22s %6d ms\n' none "(no server)" \
			$((($(date +%s%N) - t0) / 1000000))
	fi
fi

if ((failed)); then
	echo "FAIL: cm_udaddy (${SECONDS}s)"
	exit 1
fi
echo "PASS: udaddy through librdmacm (${SECONDS}s)"
exit 0
