#!/usr/bin/env bash
# compat/cm_ucmatose: rdma-core's unmodified ucmatose (rdmacm-utils) through
# `softrnic run`, server and client as two processes: N connections on one
# listener, each sending and receiving messages, then disconnecting. Both
# sides must exit 0, print "return status 0" and pass through every stage
# ("initiating data transfers", "receiving data transfers", "data
# transfers complete", "disconnected", "test complete"). Cases: 1
# connection, 10 connections x 10 messages, -m (ids migrated to a new event
# channel before disconnecting), and IPv6.
#
# usage: cm_ucmatose.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_ucmatose.sh BUILD_DIR}
CASE_TIMEOUT=30
BUDGET=150

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need ucmatose

# pair NAME ADDR ARGS...: server bound to ADDR, client connecting to it.
pair() {
	local name=$1 addr=$2 ok=1 t0 f stage
	shift 2
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	serve "$name" ucmatose -b "$addr" -p @PORT@ "$@" || return
	client "$name" ucmatose -s "$addr" -p @PORT@ "$@"
	reap
	status_ok "$name" "client (ucmatose -s $addr $*)" "$crc" || ok=0
	status_ok "$name" "server (ucmatose -b $addr $*)" "$src" || ok=0
	# the server sends first and disconnects; the client answers
	for stage in 'initiating data transfers' 'receiving data transfers' \
		     'data transfers complete' 'disconnected' 'test complete' \
		     'return status 0'; do
		if ! grep -qx "$stage" "$tmp/$name.srv"; then
			fail "$name: the server never printed '$stage'"
			ok=0
		fi
	done
	for stage in 'cmatose: connecting' 'receiving data transfers' 'sending replies' \
		     'data transfers complete' 'test complete' 'return status 0'; do
		if ! grep -qx "$stage" "$tmp/$name.cli"; then
			fail "$name: the client never printed '$stage'"
			ok=0
		fi
	done
	if grep -q 'failure\|failing' "$tmp/$name".{cli,srv}{,.err}; then
		fail "$name: ucmatose reported a failure"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-10s ucmatose %-26s %6d ms\n' "$name" "$*" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
}

pair one     127.0.0.1 -c 1
pair ten     127.0.0.1 -c 10 -C 10
pair big     127.0.0.1 -c 2 -C 20 -S 65536
pair migrate 127.0.0.1 -c 4 -m
if python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1",0))' 2>/dev/null; then
	pair v6 ::1 -c 2 -f ipv6
fi

if ((failed)); then
	echo "FAIL: cm_ucmatose (${SECONDS}s)"
	exit 1
fi
echo "PASS: ucmatose through librdmacm (${SECONDS}s)"
exit 0
