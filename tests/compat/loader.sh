#!/usr/bin/env bash
# compat/loader: every unmodified Debian RDMA program of ABI.md §1 that is
# installed starts on softrnic's libraries. They are all linked BIND_NOW, so
# ld.so resolves every imported `symbol@VERSION` (theirs and that of the
# libraries they pull in: librdmacm, libmlx5, libefa, libfabric) before main();
# one missing name or version node and the program does not start. Each is
# run with a help flag, so nothing is sent anywhere.
#
# Also checks, with ldd, that libibverbs.so.1 (and librdmacm.so.1 once
# softrnic ships it) resolve to the build tree, so a pass is not vacuous.
#
# usage: loader.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip (none installed)
set -uo pipefail

BUILD=${1:?usage: loader.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
BUDGET=150	# seconds; CTest's TIMEOUT for compat tests is 180

# program:flag (no flag: the program takes none). The flags print usage and
# exit at once with the system libraries (checked on Debian 12).
PROGRAMS=(
	rping:-h udaddy:-h ucmatose:-h mckey:-h
	rdma_server:-h rdma_client:-h riostream:-h rstream:-h
	ibv_devinfo:-h ibv_devices:
	ibv_rc_pingpong:-h ibv_ud_pingpong:-h ibv_srq_pingpong:-h
	ib_send_bw:--help ib_write_bw:--help ib_read_bw:--help
	ib_send_lat:--help ib_write_lat:--help ib_read_lat:--help
	ib_atomic_bw:--help ib_atomic_lat:--help
	qperf:--help fi_info:--help
)
LOADER_ERRORS='symbol lookup error|version `|undefined symbol|error while loading shared libraries'

if [[ ! -x $SOFTRNIC ]]; then
	echo "FAIL: $SOFTRNIC not built"
	exit 1
fi
libdir=$(realpath "$BUILD/lib") || exit 1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

passed=() failed=() skipped=()

# resolves_here BIN: each softrnic library BIN depends on is taken from
# $libdir. Prints the offending ldd line and fails otherwise.
resolves_here() {
	local lib line
	"$SOFTRNIC" run -- ldd "$1" >"$tmp/ldd" 2>&1
	for lib in libibverbs.so.1 librdmacm.so.1; do
		[[ -e $libdir/$lib ]] || continue
		line=$(grep -E "^[[:space:]]*$lib => " "$tmp/ldd") || continue
		if [[ $line != *"=> $libdir/$lib "* ]]; then
			echo "  ldd: $line"
			return 1
		fi
	done
}

for entry in "${PROGRAMS[@]}"; do
	prog=${entry%%:*}
	flag=${entry#*:}
	bin=/usr/bin/$prog
	if [[ ! -x $bin ]]; then
		skipped+=("$prog")
		continue
	fi
	if ((SECONDS > BUDGET)); then
		echo "FAIL $prog: not run, time budget of ${BUDGET}s used up"
		failed+=("$prog")
		continue
	fi

	timeout -k 5 10 "$SOFTRNIC" run -- "$bin" ${flag:+"$flag"} \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	why=
	if grep -Eq "$LOADER_ERRORS" "$tmp/err"; then
		why="loader error"
	elif ((rc == 124)); then
		why="timed out after 10s"
	elif ((rc > 128 && rc <= 128 + 64)); then
		# 128+N: killed by signal N (a crash in a library constructor)
		why="killed by SIG$(kill -l $((rc - 128)))"
	elif ! resolves_here "$bin"; then
		why="does not load softrnic's libraries"
	fi

	if [[ -n $why ]]; then
		echo "FAIL $prog $flag: $why (exit status $rc)"
		sed 's/^/  stderr: /' "$tmp/err" | head -20
		failed+=("$prog")
	else
		echo "ok   $prog $flag (exit status $rc)"
		passed+=("$prog")
	fi
done

((${#skipped[@]})) && echo "skipped (not installed): ${skipped[*]}"
echo "${#passed[@]} ok, ${#failed[@]} failed, ${#skipped[@]} skipped"
if ((${#failed[@]})); then
	echo "FAIL: ${failed[*]}"
	exit 1
fi
((${#passed[@]})) || exit 77
exit 0
