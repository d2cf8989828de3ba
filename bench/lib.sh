# bench/lib.sh: what bench/ab.sh and bench/insn.sh share (sourced, not run).
#
# bench_tmp NAME: a scratch directory in $tmp, removed on exit, and a
# server process in $spid (if set) ended by its PID then; INT, TERM and
# HUP exit 130 through the same cleanup.
bench_tmp() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/softrnic-$1.XXXXXX")
	spid=
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM HUP
}

bench_cleanup() {
	[[ -n $spid ]] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
	rm -rf "$tmp"
}
