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

show() {
	echo "  --- $1 output:"
	sed 's/^/  | /' "$2"
}
