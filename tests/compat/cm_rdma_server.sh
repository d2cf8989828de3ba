#!/usr/bin/env bash
# compat/cm_rdma_server: rdma-core's unmodified rdma_server and rdma_client
# (rdmacm-utils) through `softrnic run`: the synchronous rdma_getaddrinfo /
# rdma_create_ep / rdma_get_request / rdma_accept / rdma_connect API, one
# message each way (inline if the device allows), rdma_destroy_ep. Both
# must exit 0 and print "end 0".
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

if ((failed)); then
	echo "FAIL: cm_rdma_server (${SECONDS}s)"
	exit 1
fi
echo "PASS: rdma_server / rdma_client through librdmacm (${SECONDS}s)"
exit 0
