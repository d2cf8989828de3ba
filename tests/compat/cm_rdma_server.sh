#!/usr/bin/env bash
# compat/cm_rdma_server: rdma-core's unmodified rdma_server and rdma_client
# (rdmacm-utils) through `softrnic run`: the synchronous rdma_getaddrinfo /
# rdma_create_ep / rdma_get_request / rdma_accept / rdma_connect API, one
# message each way (inline if the device allows), rdma_destroy_ep. Both
# must exit 0 and print "end 0". Then rdma_xserver / rdma_xclient, RC
# (-c r) and XRC (-c x): the client posts a 16-byte inline SEND on a QP
# it made with max_inline_data 0, which providers allow (softrnic gives
# every QP at least 64 bytes of inline room, ibv_create_qp(3) reports
# it). With -c x the ids are RDMA_PS_IB with QP types XRC_SEND / XRC_RECV
# (rdma_create_ep), the server makes an XRC SRQ with rdma_create_srq and
# sends its number in the accept's private data, the client's SEND names
# it, and the server's rdma_get_recv_comp finds it on id->recv_cq.
#
# usage: cm_rdma_server.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_rdma_server.sh BUILD_DIR}
CASE_TIMEOUT=20

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need rdma_server rdma_client

# pair NAME SERVER CLIENT ARGS...: SERVER's and CLIENT's own arguments
# come from the caller's sargs/cargs; both must exit 0 and print
# "PROG: end 0".
pair() {
	local name=$1 srv=$2 cli=$3 t0 ok=1
	t0=$(date +%s%N)
	serve "$name" "$srv" "${sargs[@]}" || return
	client "$name" "$cli" "${cargs[@]}"
	reap
	status_ok "$name" "$cli" "$crc" || ok=0
	status_ok "$name" "$srv" "$src" || ok=0
	grep -qx "$srv: end 0" "$tmp/$name.srv" ||
		{ fail "$name: $srv did not print '$srv: end 0'"; ok=0; }
	grep -qx "$cli: end 0" "$tmp/$name.cli" ||
		{ fail "$name: $cli did not print '$cli: end 0'"; ok=0; }
	if ((ok)); then
		printf 'ok: %-8s %s / %s %s %6d ms\n' "$name" "$srv" "$cli" "${cargs[*]}" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
}

sargs=(-s 127.0.0.1 -p @PORT@)
cargs=(-s 127.0.0.1 -p @PORT@)
for round in 1 2; do
	pair round$round rdma_server rdma_client
done

if command -v rdma_xserver >/dev/null && command -v rdma_xclient >/dev/null; then
	for c in r x; do
		sargs=(-p @PORT@ -c "$c")
		cargs=(-s 127.0.0.1 -p @PORT@ -c "$c")
		pair xrc_$c rdma_xserver rdma_xclient
	done
fi

if ((failed)); then
	echo "FAIL: cm_rdma_server (${SECONDS}s)"
	exit 1
fi
echo "PASS: rdma_server / rdma_client through librdmacm (${SECONDS}s)"
exit 0
