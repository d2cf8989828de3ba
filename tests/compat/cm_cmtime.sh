#!/usr/bin/env bash
# compat/cm_cmtime: rdma-core's unmodified cmtime (rdmacm-utils) through
# `softrnic run`: N connections set up and torn down step by step, the
# time per step printed as a table. The client must exit 0 and print a row
# with numbers for each step it times (create id, resolve addr, resolve
# route, create qp, connect, disconnect, destroy); the server, which serves
# until killed, must still be running (no crash) and is then stopped.
#
# usage: cm_cmtime.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_cmtime.sh BUILD_DIR}
CASE_TIMEOUT=60

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need cmtime

for n in 1 20; do
	name=c$n
	t0=$(date +%s%N)
	serve "$name" cmtime -b 127.0.0.1 -p @PORT@ || continue
	client "$name" cmtime -s 127.0.0.1 -p @PORT@ -c "$n"
	ok=1
	status_ok "$name" "client (cmtime -s 127.0.0.1 -c $n)" "$crc" || ok=0
	# the server loops until killed; if it already exited, it must be 0
	if kill -0 "$spid" 2>/dev/null; then
		kill "$spid" 2>/dev/null
		reap
	else
		reap
		status_ok "$name" "server" "$src" || ok=0
	fi
	for step in 'create id' 'resolve addr' 'resolve route' 'create qp' 'connect' 'disconnect' 'destroy'; do
		if ! grep -Eq "^$step *: +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+" "$tmp/$name.cli"; then
			fail "$name: no timing row for step '$step'"
			ok=0
		fi
	done
	if grep -qi 'error\|fail' "$tmp/$name".{cli,srv}{,.err}; then
		fail "$name: cmtime reported an error"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: cmtime -c %-3s %6d ms  connect: %s\n' "$n" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(grep -E '^connect *:' "$tmp/$name.cli" | tr -s ' ')"
	else
		showall "$name"
	fi
done

if ((failed)); then
	echo "FAIL: cm_cmtime (${SECONDS}s)"
	exit 1
fi
echo "PASS: cmtime through librdmacm (${SECONDS}s)"
exit 0
