# Shared by the compat scripts that run server/client pairs (sourced, not a
# test: ctest runs only the other *.sh here). After sourcing:
#   $tmp         a private directory, removed on exit
#   pids=()      PIDs the script started; killed and reaped on exit
#   fail MSG     report a failure (sets failed=1)
#   listening P / port_used P / free_port / show TITLE FILE
tmp=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

failed=0
fail() {
	echo "FAIL: $*"
	failed=1
}

listening() { [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; }
port_used() { [[ -n $(ss -Htan "sport = :$1" 2>/dev/null) ]]; }

# A TCP port no socket uses (the programs' own out-of-band exchange port),
# below the ephemeral range so that no outgoing connection can take it
# meanwhile.
read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph_lo=32768
((eph_lo > 12000)) || eph_lo=32768
free_port() {
	local p
	for _ in $(seq 50); do
		p=$((10000 + RANDOM % (eph_lo - 10000)))
		port_used "$p" || break
	done
	echo "$p"
}

# show WHAT FILE: a program's output, its first and last 12 lines when it is
# long (a CI log keeps only so much; what a crash printed comes last). A
# sanitizer's report in it is shown whole (up to 200 lines), from its
# first line: a cut stack is no use to the next engineer.
show() {
	local n at
	[[ -e $2 ]] || return 0
	n=$(wc -l <"$2")
	echo "  --- $1 output ($n lines):"
	at=$(grep -n -m1 -E '^==[0-9]+==(ERROR|WARNING): |runtime error: ' "$2" | cut -d: -f1)
	if [[ -n $at ]] && ((n > 30)); then
		head -n 6 "$2" | sed 's/^/  | /'
		echo "  | [... sanitizer report from line $at ...]"
		tail -n "+$at" "$2" | head -n 200 | sed 's/^/  | /'
	elif ((n > 30)); then
		head -n 12 "$2" | sed 's/^/  | /'
		echo "  | [... $((n - 24)) lines ...]"
		tail -n 12 "$2" | sed 's/^/  | /'
	else
		sed 's/^/  | /' "$2"
	fi
}

# in_core_dir TAG PROG CMD...: exec CMD (which runs PROG) in $tmp/TAG.d with
# core dumps on, so that a crash leaves its core there (when
# kernel.core_pattern writes plain files); core_bt TAG prints its threads'
# backtraces. A failure that happens once in a hundred runs is then
# explained by the run that caught it. It execs: call it in the background
# or in ( ).
in_core_dir() {
	local tag=$1 prog=$2
	shift 2
	mkdir -p "$tmp/$tag.d"
	command -v "$prog" >"$tmp/$tag.d/prog" 2>/dev/null
	cd "$tmp/$tag.d" || exit 1
	ulimit -c unlimited 2>/dev/null
	exec "$@"
}

core_bt() {
	local d=$tmp/$1.d core
	core=$(find "$d" -maxdepth 1 -name 'core*' -type f 2>/dev/null | head -n 1)
	[[ -n $core ]] || return 0
	echo "  --- $1 dumped core: $core"
	if command -v gdb >/dev/null && [[ -s $d/prog ]]; then
		gdb -batch -nx -q -ex 'thread apply all bt' "$(cat "$d/prog")" "$core" 2>&1 |
			grep -vE '^\[(New LWP|Thread debugging|Using host)' | head -n 120 | sed 's/^/  | /'
	fi
}

# run_pair NAME PROG ARGS...: run `PROG ARGS -p PORT` through softrnic run as a
# server (output in $tmp/NAME.srv), then `PROG ARGS -p PORT 127.0.0.1` as its
# client ($tmp/NAME.cli), each bounded by CASE_TIMEOUT; a port another
# process takes first is retried with another, and a pair in which perftest
# could not calibrate its clock is run once more. Reports a side that exits
# non-zero with fail(); returns 0 if both exited 0.
run_pair() {
	local name=$1 prog=$2 try src crc
	shift 2
	for try in 1 2; do
		run_pair_once "$name" "$prog" "$@"
		# perftest's own clock calibration (get_cpu_mhz) gives up on
		# a busy machine ("Can't produce a report") and that side
		# exits 1: not ours, once more
		((src != 0 || crc != 0)) && ((try == 1)) &&
			grep -q "Can't produce a report" "$tmp/$name.srv" "$tmp/$name.cli" || break
		echo "note: $name: perftest could not calibrate its clock (a busy machine): once more"
	done
	if ((src != 0)); then
		fail "$name: server ($prog $* -p PORT) exited $src$( ((src == 124)) && echo ' (timed out)')"
	fi
	if ((crc != 0)); then
		fail "$name: client ($prog $* -p PORT 127.0.0.1) exited $crc$( ((crc == 124)) && echo ' (timed out)')"
	fi
	((src == 0 && crc == 0))
}

# One run of run_pair's: sets src and crc (the sides' exit statuses).
run_pair_once() {
	local name=$1 prog=$2 port spid attempt
	shift 2
	for attempt in 1 2 3; do
		port=$(free_port)
		timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" "$@" -p "$port" \
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
	timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "$prog" "$@" -p "$port" 127.0.0.1 \
		>"$tmp/$name.cli" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	pids=()
}
