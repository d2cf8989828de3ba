# shellcheck shell=bash
# Shared by the compat/cm_*.sh scripts (sourced, not a test): unmodified
# Debian programs that connect through librdmacm, run as a server process
# and a client process through `softrnic run`.
#
# Before sourcing, set BUILD (the build directory) and CASE_TIMEOUT
# (seconds per program run). Sourcing checks that softrnic and our
# librdmacm.so.1 are built and brings in lib.sh ($tmp, pids, fail, show,
# listening, free_port). Then:
#
#   need PROG...           exit 77 (skip) unless every PROG is installed
#   serve NAME ARGS...     start `softrnic run -- ARGS` as a server, with
#                          @PORT@ in ARGS replaced by a free TCP port; wait
#                          until it listens there. Sets $port and $spid,
#                          output in $tmp/NAME.srv. Returns 1 if it never
#                          listened (output shown). stderr goes to
#                          $tmp/NAME.srv.err: kept apart, because programs
#                          print to stderr from other threads while their
#                          stdout sits in a buffer.
#   client NAME ARGS...    run `softrnic run -- ARGS` (@PORT@ replaced) to
#                          completion; output in $tmp/NAME.cli (stderr in
#                          NAME.cli.err), status in $crc
#   showall NAME           show all four outputs of a pair, and the
#                          backtrace of either side that dumped core
#   WRAP=(...)             a command prefix for both (e.g. ip netns exec)
#   reap                   wait for the server; its status in $src
#   count FILE REGEX       number of lines of FILE matching REGEX
# shellcheck disable=SC2034  # crc, src, port, spid: read by the scripts
BUILD=$(realpath -m "$BUILD")	# (programs run from their own directory)
SOFTRNIC=$BUILD/bin/softrnic
WRAP=()
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else

need() {
	local p
	for p in "$@"; do
		if ! command -v "$p" >/dev/null; then
			echo "SKIP: $p not installed"
			exit 77
		fi
	done
}

need ss timeout
if [[ ! -x $SOFTRNIC ]]; then
	echo "FAIL: $SOFTRNIC not built"
	exit 1
fi
if [[ ! -e $BUILD/lib/librdmacm.so.1 ]]; then
	echo "FAIL: $BUILD/lib/librdmacm.so.1 not built"
	exit 1
fi

# shellcheck source=tests/compat/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

subst_port() {
	local a out=()
	for a in "$@"; do
		out+=("${a//@PORT@/$port}")
	done
	printf '%s\0' "${out[@]}"
}

serve() {
	local name=$1 args=()
	shift
	spid=
	for _ in 1 2 3; do
		port=$(free_port)
		mapfile -d '' args < <(subst_port "$@")
		in_core_dir "$name.srv" "${args[0]}" \
			"${WRAP[@]}" timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "${args[@]}" \
			>"$tmp/$name.srv" 2>"$tmp/$name.srv.err" &
		spid=$!
		pids+=("$spid")
		for _ in $(seq 200); do
			listening "$port" && return 0
			kill -0 "$spid" 2>/dev/null || break
			sleep 0.05
		done
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
	done
	fail "$name: the server (${args[*]}) never listened on its port"
	show server "$tmp/$name.srv"
	show "server stderr" "$tmp/$name.srv.err"
	spid=
	return 1
}

client() {
	local name=$1 args=()
	shift
	mapfile -d '' args < <(subst_port "$@")
	(in_core_dir "$name.cli" "${args[0]}" \
		"${WRAP[@]}" timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- "${args[@]}") \
		>"$tmp/$name.cli" 2>"$tmp/$name.cli.err"
	crc=$?
}

reap() {
	local i
	src=
	if [[ -n $spid ]]; then
		wait "$spid"
		src=$?
		for i in "${!pids[@]}"; do
			[[ ${pids[$i]} == "$spid" ]] && unset 'pids[i]'
		done
	fi
	spid=
}

count() {
	grep -Ec "$2" "$1"
}

# status_ok NAME SIDE STATUS: fail unless STATUS is 0.
status_ok() {
	if (($3 != 0)); then
		fail "$1: $2 exited $3$( (($3 == 124)) && echo ' (timed out)')"
		return 1
	fi
	return 0
}

showall() {
	show "client stderr" "$tmp/$1.cli.err"
	show "server stderr" "$tmp/$1.srv.err"
	show client "$tmp/$1.cli"
	show server "$tmp/$1.srv"
	core_bt "$1.cli"
	core_bt "$1.srv"
}
