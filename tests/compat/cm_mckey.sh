#!/usr/bin/env bash
# compat/cm_mckey: rdma-core's unmodified mckey (rdmacm-utils) through
# `softrnic run`: receivers join an IPv4 multicast group with
# rdma_join_multicast (the CM maps it to MGID ::ffff:a.b.c.d and attaches
# their UD QPs), a sender joins it too and sends to the AH of its
# MULTICAST_JOIN event; every receiver QP must get every message. Cases:
# one receiver process with 2 QPs and a full-member sender; two receiver
# processes and a send-only sender (-o, rdma_join_multicast_ex); more and
# larger messages. Each process must exit 0, print "return status 0",
# report the join with the mapped MGID, and pass through every stage.
#
# The groups stay on lo (SOFTRNIC_UD_MCAST_IF=lo), on a group and UDP port
# of this run's own; receivers have joined once the group port shows one
# socket per receiver process.
#
# usage: cm_mckey.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_mckey.sh BUILD_DIR}
CASE_TIMEOUT=40
BUDGET=150

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need mckey

export SOFTRNIC_UD_MCAST_IF=lo
MPORT=$(free_port)
export SOFTRNIC_UD_MCAST_PORT=$MPORT

group_sockets() { ss -Huan "sport = :$MPORT" 2>/dev/null | wc -l; }

# run_case NAME RECEIVERS RECV_ARGS -- SEND_ARGS: RECEIVERS processes run
# `mckey -m G -b 127.0.0.1 RECV_ARGS`, then one `mckey -m G -b 127.0.0.1
# -s SEND_ARGS`.
run_case() {
	local name=$1 nrecv=$2 group ok=1 t0 i rargs=() sargs=() r stage st nq
	shift 2
	while (($#)) && [[ $1 != -- ]]; do rargs+=("$1"); shift; done
	shift
	sargs=("$@")
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	group=239.255.$((RANDOM % 256)).$((1 + RANDOM % 250))
	t0=$(date +%s%N)
	local rpids=()
	for ((i = 0; i < nrecv; i++)); do
		timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- mckey -m "$group" -b 127.0.0.1 \
			"${rargs[@]}" >"$tmp/$name.r$i" 2>"$tmp/$name.r$i.err" &
		rpids+=($!)
		pids+=($!)
	done
	for _ in $(seq 200); do
		(($(group_sockets) >= nrecv)) && break
		sleep 0.05
	done
	if (($(group_sockets) < nrecv)); then
		fail "$name: the receivers never joined $group (port $MPORT)"
		ok=0
	fi
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- mckey -m "$group" -b 127.0.0.1 -s \
		"${sargs[@]}" >"$tmp/$name.s" 2>"$tmp/$name.s.err"
	st=$?
	status_ok "$name" "sender (mckey -s ${sargs[*]})" "$st" || ok=0
	for ((i = 0; i < nrecv; i++)); do
		wait "${rpids[$i]}"
		st=$?
		status_ok "$name" "receiver $i (mckey ${rargs[*]})" "$st" || ok=0
	done
	for r in "$tmp/$name".r[0-9] "$tmp/$name.s"; do
		for stage in 'mckey: joining' 'data transfers complete' 'test complete' \
			     'return status 0'; do
			if ! grep -qx "$stage" "$r"; then
				fail "$name: $(basename "$r") never printed '$stage'"
				ok=0
			fi
		done
		if grep -q 'failure\|failed\|event:' "$r" "$r.err"; then
			fail "$name: $(basename "$r"): mckey reported a failure"
			ok=0
		fi
	done
	# every QP joined the mapped MGID (-c N in the args: N joins)
	nq=1
	for ((i = 0; i < ${#rargs[@]}; i++)); do
		[[ ${rargs[$i]} == -c ]] && nq=${rargs[$((i + 1))]}
	done
	for ((i = 0; i < nrecv; i++)); do
		if (($(count "$tmp/$name.r$i" "^mckey: joined dgid: ::ffff:$group mlid 0x0 sl 0$") != nq)); then
			fail "$name: receiver $i did not report $nq joins of ::ffff:$group"
			ok=0
		fi
		grep -qx 'receiving data transfers' "$tmp/$name.r$i" ||
			{ fail "$name: receiver $i never received"; ok=0; }
	done
	grep -qx 'initiating data transfers' "$tmp/$name.s" ||
		{ fail "$name: the sender never sent"; ok=0; }
	if ((ok)); then
		printf 'ok: %-9s mckey %d x (%s) <- (-s %s) %6d ms\n' "$name" "$nrecv" "${rargs[*]}" \
			"${sargs[*]}" $((($(date +%s%N) - t0) / 1000000))
	else
		for r in "$tmp/$name".r[0-9] "$tmp/$name.s"; do
			show "$(basename "$r")" "$r"
			show "$(basename "$r") stderr" "$r.err"
		done
	fi
}

run_case pair     1 -c 2 -- -c 1
run_case sendonly 2 -c 1 -- -c 1 -o
run_case many     1 -c 1 -C 50 -S 1000 -- -c 1 -C 50 -S 1000

if ((failed)); then
	echo "FAIL: cm_mckey (${SECONDS}s)"
	exit 1
fi
echo "PASS: mckey through librdmacm (${SECONDS}s)"
exit 0
