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

for round in 1 2; do
	name=round$round
	t0=$(date +%s%N)
	serve "$name" rdma_server -s 127.0.0.1 -p @PORT@ || continue
	client "$name" rdma_client -s 127.0.0.1 -p @PORT@
	reap
	ok=1
	status_ok "$name" "rdma_client" "$crc" || ok=0
	status_ok "$name" "rdma_server" "$src" || ok=0
	grep -qx 'rdma_server: end 0' "$tmp/$name.srv" ||
		{ fail "$name: rdma_server did not print 'rdma_server: end 0'"; ok=0; }
	grep -qx 'rdma_client: end 0' "$tmp/$name.cli" ||
		{ fail "$name: rdma_client did not print 'rdma_client: end 0'"; ok=0; }
	if ((ok)); then
		printf 'ok: %-8s rdma_server / rdma_client %6d ms\n' "$name" \
			$((($(date +%s%N) - t0) / 1000000))
	else
		showall "$name"
	fi
done

if command -v rdma_xserver >/dev/null && command -v rdma_xclient >/dev/null; then
	for c in r x; do
		name=xrc_$c
		t0=$(date +%s%N)
		serve "$name" rdma_xserver -p @PORT@ -c "$c" || continue
		client "$name" rdma_xclient -s 127.0.0.1 -p @PORT@ -c "$c"
		reap
		ok=1
		status_ok "$name" "rdma_xclient" "$crc" || ok=0
		status_ok "$name" "rdma_xserver" "$src" || ok=0
		grep -qx 'rdma_xserver: end 0' "$tmp/$name.srv" ||
			{ fail "$name: rdma_xserver did not print 'rdma_xserver: end 0'"; ok=0; }
		grep -qx 'rdma_xclient: end 0' "$tmp/$name.cli" ||
			{ fail "$name: rdma_xclient did not print 'rdma_xclient: end 0'"; ok=0; }
		if ((ok)); then
			printf 'ok: %-8s rdma_xserver / rdma_xclient -c %s %6d ms\n' "$name" "$c" \
				$((($(date +%s%N) - t0) / 1000000))
		else
			showall "$name"
		fi
	done
fi

if ((failed)); then
	echo "FAIL: cm_rdma_server (${SECONDS}s)"
	exit 1
fi
echo "PASS: rdma_server / rdma_client through librdmacm (${SECONDS}s)"
exit 0
