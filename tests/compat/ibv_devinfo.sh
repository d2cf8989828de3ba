#!/usr/bin/env bash
# compat/ibv_devinfo: unmodified rdma-core ibv_devinfo and ibv_devices, run
# through `softrnic run`, see softrnic0 as DESIGN.md §Decisions 2 describes it:
# one active Ethernet port, MTU 4096, a GID table, non-zero device limits.
#
# usage: ibv_devinfo.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: ibv_devinfo.sh BUILD_DIR}
SOFTRNIC=$BUILD/bin/softrnic
unset SOFTRNIC_LIBDIR	# test the libraries of BUILD_DIR, nothing else
DEVINFO=/usr/bin/ibv_devinfo
DEVICES=/usr/bin/ibv_devices

if [[ ! -x $DEVINFO || ! -x $DEVICES ]]; then
	echo "SKIP: ibv_devinfo/ibv_devices not installed (apt-get install ibverbs-utils)"
	exit 77
fi
if [[ ! -x $SOFTRNIC ]]; then
	echo "FAIL: $SOFTRNIC not built"
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

failed=0
fail() {
	echo "FAIL: $*"
	failed=1
}

# run NAME CMD...: run CMD through softrnic with a time limit; output in
# $tmp/NAME.out and $tmp/NAME.err. Returns 1 (and fails) on a non-zero status.
run() {
	local name=$1 rc
	shift
	timeout -k 5 30 "$SOFTRNIC" run -- "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
	rc=$?
	((rc == 0)) && return 0
	fail "$* exited with status $rc$( ((rc == 124)) && echo ' (timed out)')"
	sed 's/^/  stderr: /' "$tmp/$name.err"
	return 1
}

# expect NAME ERE WHAT: the output of NAME has a line matching ERE.
expect() {
	grep -Eq -- "$2" "$tmp/$1.out" || fail "$1: no $3 (expected /$2/)"
}

# nonzero NAME FIELD: the first "FIELD: value" line has a non-zero value.
nonzero() {
	local v
	v=$(grep -Em1 "^[[:space:]]*$2:" "$tmp/$1.out" | awk '{ print $2 }')
	if [[ -z $v ]]; then
		fail "$1: no $2 line"
	elif [[ $v =~ ^(0|0x0+)$ ]]; then
		fail "$1: $2 is $v"
	fi
}

if run devinfo "$DEVINFO" -v; then
	expect devinfo '^hca_id:[[:space:]]*softrnic0$' "hca_id softrnic0"
	expect devinfo 'phys_port_cnt:[[:space:]]*1$' "single port"
	expect devinfo 'state:[[:space:]]*PORT_ACTIVE' "active port"
	expect devinfo 'link_layer:[[:space:]]*Ethernet' "Ethernet link layer"
	expect devinfo 'active_mtu:[[:space:]]*4096' "active MTU 4096"
	expect devinfo 'GID\[  0\]:' "GID table entry 0"
	for field in max_mr_size max_qp max_qp_wr max_sge max_cq max_cqe max_mr max_pd; do
		nonzero devinfo "$field"
	done
fi

if run devices "$DEVICES"; then
	expect devices '^[[:space:]]*softrnic0[[:space:]]' "softrnic0 in the device list"
fi

if ((failed)); then
	for name in devinfo devices; do
		[[ -s $tmp/$name.out ]] || continue
		echo "--- $name output:"
		cat "$tmp/$name.out"
	done
	exit 1
fi
echo "PASS: ibv_devinfo and ibv_devices see softrnic0"
exit 0
