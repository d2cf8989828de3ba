#!/usr/bin/env bash
# bench/ab.sh: two (or more) builds of softrnic, interleaved, on the same-
# host small-message figures, round by round, each round beside the
# cache-line floor measured just before it. Not part of `make test`.
#
# This machine's two vCPUs are at times close (a cache line each way about
# 0.06 µs) and at times far apart (about 0.27 µs), within minutes; a
# change is judged by comparing builds within a round, and rounds of the
# same floor with each other, never across.
#
#   usage: bench/ab.sh ROUNDS BUILD_DIR...
#   AB_FLOOR=far (or close): each round waits, up to 10 minutes, for a
#   floor above 0.2 µs (below 0.07 µs) first, so that all rounds are of
#   one kind; a round that flipped midway shows in the next floor.
#   e.g.:  git worktree add --detach /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build
#          && cmake --build /tmp/base/build -j2 && bench/ab.sh 5 /tmp/base/build build
#
# Per build and round: ib_send_lat and ib_write_lat -s 8 -n 200000
# (t_typical, µs) and ib_send_bw -s 64 -n 2000000 (Mpps), on 127.0.0.1.
# exit: 0 measured, 2 cannot run
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
(($# >= 2)) || { echo "usage: bench/ab.sh ROUNDS BUILD_DIR..." >&2; exit 2; }
ROUNDS=$1
shift
for b in "$@"; do
	[[ -x $b/bin/softrnic ]] || { echo "bench/ab: $b/bin/softrnic missing" >&2; exit 2; }
done
for p in ib_send_lat ib_write_lat ib_send_bw cc; do
	command -v "$p" >/dev/null 2>&1 || { echo "bench/ab: $p not found (perftest, gcc)" >&2; exit 2; }
done

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_tmp ab
cc -O2 -I "$ROOT/src" -o "$tmp/ring_lat" "$ROOT/bench/ring_lat.c" "$ROOT/src/chan/shm_ring.c" || exit 2

# run BUILD COL PROG ARGS...: column COL of the client's result row (a
# port another process holds, perftest's "Couldn't listen", is tried again
# with another)
run() {
	local b=$1 col=$2 p
	shift 2
	for _ in 1 2 3; do
		p=$((20000 + RANDOM % 30000))
		timeout -k 5 60 "$b/bin/softrnic" run -- "$@" -d softrnic0 -p "$p" >"$tmp/srv" 2>&1 &
		spid=$!
		sleep 0.4
		grep -q "Couldn't listen" "$tmp/srv" || break
		wait "$spid" 2>/dev/null
		spid=
	done
	timeout -k 5 60 "$b/bin/softrnic" run -- "$@" -d softrnic0 -p "$p" 127.0.0.1 >"$tmp/cli" 2>&1
	wait "$spid" 2>/dev/null
	spid=
	awk -v col="$col" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+[0-9]+\.[0-9]+)+[[:space:]]*$/ { v = $col }
		END { print (v + 0 > 0 ? v + 0 : "-") }' "$tmp/cli"
}

# wanted FLOOR: is this floor of the kind AB_FLOOR asks for?
wanted() {
	case ${AB_FLOOR:-} in
	far) awk -v f="$1" 'BEGIN { exit !(f > 0.2) }' ;;
	close) awk -v f="$1" 'BEGIN { exit !(f < 0.07) }' ;;
	*) return 0 ;;
	esac
}
case ${AB_FLOOR:-} in
'' | far | close) ;;
*) echo "bench/ab: AB_FLOOR is far or close" >&2; exit 2 ;;
esac

printf '%-5s %-10s %-28s %12s %12s %14s\n' round floor_us build send_lat_us write_lat_us send_bw64_Mpps
for ((r = 1; r <= ROUNDS; r++)); do
	t0=$SECONDS
	while :; do
		floor=$("$tmp/ring_lat" 200000 1 | awk '/^floor/ { print $(NF - 2) }')
		wanted "$floor" && break
		((SECONDS - t0 < 600)) || { echo "bench/ab: no $AB_FLOOR floor in 10 minutes" >&2; exit 2; }
		sleep 3
	done
	for b in "$@"; do
		printf '%-5s %-10s %-28s %12s %12s %14s\n' "$r" "$floor" "$b" \
			"$(run "$b" 5 ib_send_lat -s 8 -n 200000)" \
			"$(run "$b" 5 ib_write_lat -s 8 -n 200000)" \
			"$(run "$b" 5 ib_send_bw -s 64 -n 2000000)"
	done
done
exit 0
