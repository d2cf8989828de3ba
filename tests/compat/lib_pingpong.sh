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
	local name=$1 iters=$2 prog=$3 port spid src crc t0 ok=1 side attempt
	shift 3
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	t0=$(date +%s%N)
	# The server listens on its port once its QP exists. Another process
	# may take the port first: then try another one.
	for attempt in 1 2 3; do
		port=$(free_port)
		timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -g 0 -p "$port" "$@" \
			>"$tmp/$name.srv" 2>&1 &
		spid=$!
		pids=("$spid")
		for _ in $(seq 100); do
			listening "$port" && break
			kill -0 "$spid" 2>/dev/null || break
			sleep 0.05
		done
		grep -q "Couldn't listen to port" "$tmp/$name.srv" || break
		wait "$spid"
	done
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" -g 0 -p "$port" "$@" 127.0.0.1 \
		>"$tmp/$name.cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	pids=()
	if ((src != 0)); then
		fail "$name: server ($prog -g 0 -p PORT $*) exited $src$( ((src == 124)) && echo ' (timed out)')"
		ok=0
	fi
	if ((crc != 0)); then
		fail "$name: client ($prog -g 0 -p PORT $* 127.0.0.1) exited $crc$( ((crc == 124)) && echo ' (timed out)')"
		ok=0
	fi
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
