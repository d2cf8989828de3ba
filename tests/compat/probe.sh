#!/usr/bin/env bash
# Programs that probe every device at start must find softrnic0 and not
# crash: libfabric's fi_info (its EFA and verbs providers look at the
# device and context layout, ABI.md §2) and perftest (which links libmlx5
# and libefa and opens the device before it waits for a peer).
# Usage: probe.sh BUILD_DIR. Exit 0 pass, 1 fail, 77 skip.
set -u
build=$(cd "${1:?build dir}" && pwd)
run="$build/bin/softrnic run --"
out=$(mktemp)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$out"; }
trap cleanup EXIT
fail=0

if command -v fi_info >/dev/null; then
	if timeout 30 $run fi_info -p verbs >"$out" 2>&1 && grep -q 'domain: softrnic0' "$out"; then
		echo "probe: fi_info -p verbs lists softrnic0"
	else
		echo "probe: FAIL: fi_info -p verbs (exit $?)"; cat "$out"; fail=1
	fi
	if ! timeout 60 $run fi_info >"$out" 2>&1; then
		echo "probe: FAIL: fi_info (all providers) exited non-zero"; tail -20 "$out"; fail=1
	else
		echo "probe: fi_info (all providers) ok"
	fi
else
	echo "probe: fi_info not installed (apt-get install -y libfabric-bin): skipped"
fi

if command -v ib_write_bw >/dev/null; then
	port=$((20000 + RANDOM % 20000))
	# The server opens softrnic0, then waits for a client: alive after 2 s
	# with its banner printed means the device probe went through.
	$run stdbuf -o0 ib_write_bw -d softrnic0 -p "$port" >"$out" 2>&1 &
	pid=$!
	for _ in $(seq 20); do grep -q 'Waiting for client' "$out" && break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null && grep -q 'Waiting for client' "$out"; then
		echo "probe: ib_write_bw opened softrnic0 and waits for a client"
	else
		echo "probe: FAIL: ib_write_bw"; cat "$out"; fail=1
	fi
	kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
else
	echo "probe: perftest not installed: skipped"
fi
exit $fail
