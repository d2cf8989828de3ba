# compat/lib_perftest.sh: sourced by perftest.sh and ud_perftest.sh (the
# caller sets SOFTRNIC, CASE_TIMEOUT and BUDGET and checks its programs):
# the common checks and pair(), which runs one perftest case as a server
# process and a client process and checks both.
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

# rows FILE COL: print how many result rows ("#bytes #iterations numbers...")
# FILE has; fail (status 1) unless there is one at least and the figure of
# merit in column COL of each (MsgRate for *_bw, t_typical for *_lat: 5)
# is > 0 (for *_bw the message rate, column 5: the BW average is printed
# with two decimals, so 2-byte messages on a loaded machine read 0.00 MB/s).
# (perftest prints its standard deviation as -nan when one sample dwarfs
# the rest: that column is not checked.)
rows() {
	awk -v col="$2" '
		/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+([0-9]+\.[0-9]+|-?nan|-?inf))+[[:space:]]*$/ {
			n++
			if ($col + 0 <= 0) bad++
		}
		END { print n + 0; exit (n > 0 && !bad) ? 0 : 1 }' "$1"
}

# pair NAME NROWS PROG ARGS...: run PROG -d softrnic0 ARGS as server, then as
# client of 127.0.0.1, and check both. NROWS: the result rows the client
# prints (one per message size).
pair() {
	local name=$1 nrows=$2 prog=$3 t0 ok=1 col n srv_rows
	shift 3
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	col=5		# *_bw: MsgRate; *_lat: t_typical
	# perftest prints the table on the server too, except for the
	# latency tests where the server only answers (read, atomic).
	case $prog in
	ib_read_lat | ib_atomic_lat) srv_rows=0 ;;
	*) srv_rows=1 ;;
	esac
	t0=$(date +%s%N)
	run_pair "$name" "$prog" -d softrnic0 "$@" || ok=0
	if ! n=$(rows "$tmp/$name.cli" "$col") || ((n != nrows)); then
		fail "$name: client printed $n valid result rows, expected $nrows"
		ok=0
	fi
	# (with -a the server prints only the last size)
	if ((srv_rows)) && ! n=$(rows "$tmp/$name.srv" "$col"); then
		fail "$name: server printed no valid result row"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-16s %-42s %6d ms  %s\n' "$name" "$prog $*" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(awk -v col="$([[ $prog == *_bw ]] && echo 4 || echo 5)" '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+([[:space:]]+([0-9]+\.[0-9]+|-?nan|-?inf))+[[:space:]]*$/ { r = $1 " B: " $col } END { print r }' "$tmp/$name.cli")$( [[ $prog == *_bw ]] && echo ' MB/s' || echo ' usec')"
	else
		show server "$tmp/$name.srv"
		show client "$tmp/$name.cli"
	fi
}
