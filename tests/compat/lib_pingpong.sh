# compat/lib_pingpong.sh: sourced by pingpong.sh and ud_pingpong.sh (the
# caller sets SOFTRNIC, CASE_TIMEOUT and BUDGET and checks its programs):
# the common checks and pair(), which runs one ibv_*_pingpong case as a
# server process and a client process and checks both.
if ! command -v ss >/dev/null; then
	echo "SKIP: ss not installed (apt-get install iproute2)"
	exit 77
fi
if [[ ! -x $SOFTRNIC ]]; then
	echo "FAIL: $SOFTRNIC not built"
	exit 1
fi

# shellcheck source=tests/compat/lib.sh
. "$(dirname "$0")/lib.sh"

# pair NAME ITERS PROG ARGS...: run PROG ARGS as server, then as client of
# 127.0.0.1, and check both. ITERS is the count the "iters in" lines report.
pair() {
	local name=$1 iters=$2 prog=$3 t0 ok=1 side
	shift 3
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	run_pair "$name" "$prog" -g 0 "$@" || ok=0
	for side in srv cli; do
		if ! grep -Eq "^$iters iters in [0-9.]+ seconds = [0-9.]+ usec/iter$" "$tmp/$name.$side"; then
			fail "$name: $side printed no '$iters iters in ... usec/iter' line"
			ok=0
		fi
	done
	if grep -q 'invalid data in page' "$tmp/$name.srv"; then
		fail "$name: the server found wrong data in the received buffer"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-12s %-44s %6d ms   %s\n' "$name" "$prog $*" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(grep -Eo '[0-9.]+ usec/iter' "$tmp/$name.cli")"
	else
		show server "$tmp/$name.srv"
		show client "$tmp/$name.cli"
	fi
}
