#!/usr/bin/env bash
# make demo, part 2: unmodified rdma-core and perftest programs as two
# processes talking over softrnic (iWARP over TCP loopback), with their
# own output. Usage: net-demo.sh BUILD_DIR
set -u
build=$(cd "${1:?build dir}" && pwd)
run="$build/bin/softrnic run --"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done' EXIT

pair() {	# pair TITLE CMD ARGS... : server, then the client with 127.0.0.1
	local title=$1; shift
	local port=$((20000 + RANDOM % 20000)) srv=$(mktemp)
	echo
	echo "== $title"
	echo "\$ softrnic run -- $* -p $port                # server"
	echo "\$ softrnic run -- $* -p $port 127.0.0.1      # client"
	timeout 60 $run "$@" -p "$port" >"$srv" 2>&1 &
	pids+=($!)
	sleep 0.5
	timeout 60 $run "$@" -p "$port" 127.0.0.1 2>&1 | sed 's/^/client| /'
	wait "${pids[-1]}"
	sed 's/^/server| /' "$srv"
	rm -f "$srv"
}

if command -v ibv_rc_pingpong >/dev/null; then
	pair "ibv_rc_pingpong: SEND/RECV ping-pong between two processes" ibv_rc_pingpong -g 0 -n 1000
fi
if command -v ib_write_bw >/dev/null; then
	pair "ib_write_bw: RDMA WRITE bandwidth between two processes" ib_write_bw -d softrnic0 -s 1048576 -n 1000
fi
