#!/usr/bin/env bash
# compat/cm_riostream: rdma-core's unmodified riostream (rsockets) through
# `softrnic run`. softrnic has no rsockets yet: rsocket() fails with ENOSYS
# (docs/COMPAT.md). The program must load (every r* symbol it imports is
# there), fail cleanly on its own error path and exit with a small non-zero
# status within a few seconds: no crash, no hang, no timeout.
#
# usage: cm_riostream.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_riostream.sh BUILD_DIR}
CASE_TIMEOUT=15

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need riostream

port=$(free_port)
for side in server client; do
	if [[ $side == server ]]; then
		args=(riostream -b 127.0.0.1 -p "$port" -C 10 -S 64)
	else
		args=(riostream -s 127.0.0.1 -p "$port" -C 10 -S 64)
	fi
	t0=$(date +%s%N)
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "${args[@]}" >"$tmp/$side" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	if ((rc == 0)); then
		fail "$side: ${args[*]} exited 0 although rsockets are not supported"
	elif ((rc == 124 || rc == 137)); then
		fail "$side: ${args[*]} hung (killed by timeout after ${CASE_TIMEOUT}s)"
	elif ((rc > 128 && rc < 255)); then	# 255: exit(-1), its error path
		fail "$side: ${args[*]} died with signal $((rc - 128))"
	elif grep -q 'symbol lookup error\|version .* not found' "$tmp/$side"; then
		fail "$side: ${args[*]} did not load"
	elif ! grep -qi 'rsocket\|not implemented\|function not' "$tmp/$side"; then
		fail "$side: ${args[*]} exited $rc without naming the failing call"
	else
		printf 'ok: %-6s exits %d in %d ms: %s\n' "$side" "$rc" "$ms" \
			"$(head -1 "$tmp/$side")"
		continue
	fi
	show "$side" "$tmp/$side"
done

if ((failed)); then
	echo "FAIL: cm_riostream (${SECONDS}s)"
	exit 1
fi
echo "PASS: riostream fails cleanly without rsockets (${SECONDS}s)"
exit 0
