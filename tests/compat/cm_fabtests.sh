#!/usr/bin/env bash
# compat/cm_fabtests: Debian's libfabric (libfabric1 + libfabric-bin) with
# its verbs provider on softrnic, through `softrnic run`. The provider finds
# devices with rdma_get_devices / rdma_getaddrinfo / rdma_bind_addr on each
# UP non-loopback interface and connects FI_EP_MSG endpoints with
# librdmacm. It ignores loopback, so both processes run in a network
# namespace of their own holding a veth pair, one end 198.18.7.1/24 (RFC
# 2544 space; needs root, else skipped), and talk to that address.
#
# fi_info -p verbs -t FI_EP_MSG must list a softrnic0 domain; fi_pingpong
# -p verbs -e msg (server and client processes, data integrity checks on)
# must exit 0 on both sides and print result rows with the iteration count
# asked for.
#
# usage: cm_fabtests.sh BUILD_DIR      exit 0 pass, 1 fail, 77 skip
set -uo pipefail

BUILD=${1:?usage: cm_fabtests.sh BUILD_DIR}
CASE_TIMEOUT=20
NS=srcm_fab_$$
ADDR=198.18.7.1

# shellcheck source=tests/compat/lib_cm.sh
. "$(dirname "$0")/lib_cm.sh"
need fi_info fi_pingpong ip

if (($(id -u) != 0)); then
	echo "SKIP: needs root for a network namespace"
	exit 77
fi
if ! ip netns add "$NS" 2>"$tmp/ns.err"; then
	echo "SKIP: ip netns unavailable: $(cat "$tmp/ns.err")"
	exit 77
fi
trap 'cleanup; ip netns del "$NS" 2>/dev/null' EXIT
if ! { ip -n "$NS" link set lo up &&
       ip -n "$NS" link add v0 type veth peer name v1 &&
       ip -n "$NS" addr add "$ADDR/24" dev v0 &&
       ip -n "$NS" link set v1 up &&
       ip -n "$NS" link set v0 up; } 2>"$tmp/ns.err"; then
	echo "SKIP: cannot set up the namespace: $(cat "$tmp/ns.err")"
	exit 77
fi
WRAP=(ip netns exec "$NS")
listening() { [[ -n $(ip netns exec "$NS" ss -Htln "sport = :$1" 2>/dev/null) ]]; }

"${WRAP[@]}" timeout -k 5 "$CASE_TIMEOUT" "$SOFTRNIC" run -- fi_info -p verbs -t FI_EP_MSG \
	>"$tmp/fi_info" 2>&1
rc=$?
if ((rc != 0)) || ! grep -q 'domain: *softrnic0' "$tmp/fi_info"; then
	fail "fi_info -p verbs -t FI_EP_MSG (exit $rc) lists no softrnic0 domain"
	show fi_info "$tmp/fi_info"
	echo "FAIL: cm_fabtests (${SECONDS}s)"
	exit 1
fi
echo "ok: fi_info -p verbs -t FI_EP_MSG: $(grep -c '^provider:' "$tmp/fi_info") entries," \
     "$(grep -m1 'domain:' "$tmp/fi_info" | tr -s ' ')"

iters=100
# fi_pingpong prints sizes the short way: 64, 4k
for size in 64:64 4096:4k; do
	shown=${size#*:}
	size=${size%:*}
	name=pp$size
	t0=$(date +%s%N)
	serve "$name" fi_pingpong -p verbs -e msg -d softrnic0 -B @PORT@ -I "$iters" -S "$size" -c || continue
	client "$name" fi_pingpong -p verbs -e msg -d softrnic0 -P @PORT@ -I "$iters" -S "$size" -c "$ADDR"
	reap
	ok=1
	status_ok "$name" "client (fi_pingpong -S $size)" "$crc" || ok=0
	status_ok "$name" "server (fi_pingpong -S $size)" "$src" || ok=0
	for side in cli srv; do
		if ! awk -v it="$iters" -v sz="$shown" '$1 == sz && $2 == it && $3 == "=" it { ok = 1 }
			END { exit !ok }' "$tmp/$name.$side"; then
			fail "$name: $side printed no '$size bytes, $iters iterations' row"
			ok=0
		fi
	done
	if ((ok)); then
		printf 'ok: fi_pingpong -S %-5s %6d ms  %s\n' "$size" \
			$((($(date +%s%N) - t0) / 1000000)) \
			"$(awk -v it="$iters" '$2 == it { print; exit }' "$tmp/$name.cli" | tr -s ' ')"
	else
		showall "$name"
	fi
done

if ((failed)); then
	echo "FAIL: cm_fabtests (${SECONDS}s)"
	exit 1
fi
echo "PASS: libfabric verbs provider (FI_EP_MSG over librdmacm) (${SECONDS}s)"
exit 0
