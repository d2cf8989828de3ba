#!/usr/bin/env bash
# compat/shm: which channel carried the traffic of unmodified programs
# (rping, ibv_rc_pingpong, ib_write_bw, ucmatose) run through `softrnic
# run` as two processes on this host. A counter, not a timing:
# SOFTRNIC_STATS=1 makes each process print one line at exit,
#   softrnic stats: pid P tcp_fpdus T shm_fpdus S shm_pulled B shm_mapped M
#                   shm_links L ...
# With shm on (the default) both sides must have moved their stream to
# shared memory (shm_links >= 1) and written FPDUs there (shm_fpdus > 0),
# and ib_write_bw's 1 MiB WRITEs must have gone with one copy: pulled with
# process_vm_readv or copied from the writer's mapped memfd (shm_pulled +
# shm_mapped > 0 at the target). With SOFTRNIC_SHM=0 on either side nothing moves:
# shm_fpdus 0 on both, and the programs still pass. ib_write_bw over the
# CM with two QPs: the server, polling only its handshake QP's CQ, must
# have taken in the WRITE streams itself (poll_foreign > 0). As root, two pairs
# run once more as uid 65534 (each side in a user namespace of its own),
# and must be on shm too.
#
# usage: shm.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: shm.sh BUILD_DIR}
CASE_TIMEOUT=40
BUDGET=150

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need rping ucmatose ibv_rc_pingpong ib_write_bw awk

export SOFTRNIC_STATS=1

# stat FILE FIELD: the sum of FIELD over the stats lines in FILE
stat() {
	awk -v f="$2" '/^softrnic stats:/ { for (i = 1; i < NF; i++) if ($i == f) s += $(i + 1) }
		END { print s + 0 }' "$1"
}

# run NAME MODE SERVER-ARGS -- CLIENT-ARGS: one pair; MODE shm or tcp
run() {
	local name=$1 mode=$2 sargs=() cargs=() side f links fpdus ok=1
	shift 2
	while (($#)) && [[ $1 != -- ]]; do
		sargs+=("$1")
		shift
	done
	shift
	cargs=("$@")
	if ((SECONDS > BUDGET)); then
		fail "$name: not run, the script's time budget (${BUDGET}s) is spent"
		return
	fi
	if [[ $mode == tcp ]]; then
		export SOFTRNIC_SHM=0
	else
		unset SOFTRNIC_SHM
	fi
	serve "$name" "${sargs[@]}" || return
	client "$name" "${cargs[@]}"
	reap
	status_ok "$name" "client (${cargs[*]})" "$crc" || ok=0
	status_ok "$name" "server (${sargs[*]})" "$src" || ok=0
	for side in srv cli; do
		f=$tmp/$name.$side.err
		links=$(stat "$f" shm_links)
		fpdus=$(stat "$f" shm_fpdus)
		if ! grep -q '^softrnic stats:' "$f"; then
			fail "$name: the $side printed no stats line"
			ok=0
		elif [[ $mode == shm ]] && ((links < 1 || fpdus < 1)); then
			fail "$name: the $side did not use shm (shm_links $links, shm_fpdus $fpdus)"
			ok=0
		elif [[ $mode == tcp ]] && ((links != 0 || fpdus != 0)); then
			fail "$name: the $side used shm with SOFTRNIC_SHM=0 (shm_fpdus $fpdus)"
			ok=0
		fi
	done
	if ((ok)) && [[ $name == write_bw-shm ]] &&
		(($(stat "$tmp/$name.srv.err" shm_pulled) + $(stat "$tmp/$name.srv.err" shm_mapped) == 0 &&
		  $(stat "$tmp/$name.cli.err" shm_pulled) + $(stat "$tmp/$name.cli.err" shm_mapped) == 0)); then
		fail "$name: 1 MiB WRITEs were neither pulled nor mapped (one copy) by either side"
		ok=0
	fi
	if ((ok)) && [[ $name == write_bw-shm ]] &&
		(($(stat "$tmp/$name.srv.err" tcp_fpdus) + $(stat "$tmp/$name.cli.err" tcp_fpdus) >=
		  $(stat "$tmp/$name.srv.err" shm_fpdus) + $(stat "$tmp/$name.cli.err" shm_fpdus))); then
		fail "$name: the bulk of the FPDUs went on TCP, not shm"
		ok=0
	fi
	# The server polls only the CQ of perftest's own QP (the one its
	# rdma_cm handshake uses) while the WRITEs land on two other QPs,
	# whose CQ nobody polls: its poller must have served them itself
	# (DESIGN.md decision 5, "a poller serves streams nobody polls").
	if ((ok)) && [[ $name == write_bw_cm-shm ]] && (($(stat "$tmp/$name.srv.err" poll_foreign) == 0)); then
		fail "$name: the server's poller took in none of the WRITE streams (poll_foreign 0)"
		ok=0
	fi
	if ((ok)); then
		printf 'ok: %-16s %s\n' "$name" "$(grep -h '^softrnic stats:' "$tmp/$name".{srv,cli}.err |
			awk '{ printf "[tcp %s shm %s pulled %s mapped %s] ", $6, $8, $10, $12 }')"
	else
		showall "$name"
	fi
	unset SOFTRNIC_SHM
}

for mode in shm tcp; do
	run rping-$mode $mode rping -s -a 127.0.0.1 -p @PORT@ -v -C 20 -- \
		rping -c -a 127.0.0.1 -p @PORT@ -v -C 20
	run pingpong-$mode $mode ibv_rc_pingpong -d softrnic0 -g 0 -n 200 -p @PORT@ -- \
		ibv_rc_pingpong -d softrnic0 -g 0 -n 200 -p @PORT@ 127.0.0.1
	# A count: the 200 WRITEs, posted right after connecting, wait for
	# the switch to the rings (the offerer holds its requests until the
	# answer, DESIGN.md decision 23), so they go with one copy.
	run write_bw-$mode $mode ib_write_bw -d softrnic0 -s 1048576 -n 200 -p @PORT@ -- \
		ib_write_bw -d softrnic0 -s 1048576 -n 200 -p @PORT@ 127.0.0.1
	run ucmatose-$mode $mode ucmatose -b 127.0.0.1 -p @PORT@ -c 2 -C 20 -- \
		ucmatose -s 127.0.0.1 -p @PORT@ -c 2 -C 20
done

run write_bw_cm-shm shm ib_write_bw -d softrnic0 -R -q 2 -s 65536 -n 2000 -p @PORT@ -- \
	ib_write_bw -d softrnic0 -R -q 2 -s 65536 -n 2000 -p @PORT@ 127.0.0.1

# Unprivileged, as most people run it: each `softrnic run` then makes a
# user namespace of its own (the sysfs view), from which pidfd_getfd on
# the other is not permitted, so the offerer's descriptor server hands the
# rings over (DESIGN.md decision 23). Root only (setpriv to uid 65534).
if ((EUID == 0)) && command -v setpriv >/dev/null; then
	nobody=(setpriv --reuid 65534 --regid 65534 --clear-groups)
	if "${nobody[@]}" test -x "$SOFTRNIC" && "${nobody[@]}" test -r "$BUILD/lib/libibverbs.so.1"; then
		WRAP=("${nobody[@]}")
		run pingpong-user shm ibv_rc_pingpong -d softrnic0 -g 0 -n 200 -p @PORT@ -- \
			ibv_rc_pingpong -d softrnic0 -g 0 -n 200 -p @PORT@ 127.0.0.1
		run rping-user shm rping -s -a 127.0.0.1 -p @PORT@ -v -C 20 -- \
			rping -c -a 127.0.0.1 -p @PORT@ -v -C 20
		WRAP=()
	else
		echo "note: uid 65534 cannot reach $SOFTRNIC: the unprivileged cases are skipped"
	fi
fi

if ((failed)); then
	echo "FAIL: shm (${SECONDS}s)"
	exit 1
fi
echo "PASS: shm carried the programs' traffic, and SOFTRNIC_SHM=0 kept it on TCP (${SECONDS}s)"
exit 0
