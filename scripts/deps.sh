#!/usr/bin/env bash
# Install the Debian packages that softrnic's build, tests and demo need.
#
# Only missing packages are installed, and nothing is printed when all are
# present. As root this runs `apt-get update` (only when something is
# missing) and `apt-get install`; otherwise it prints the command to run and
# exits 1. On a system without dpkg it warns and exits 0: the build will then
# say what it lacks.
set -euo pipefail

PACKAGES=(
	# build
	cmake gcc clang make pkg-config
	libibverbs-dev librdmacm-dev libcmocka-dev libisal-dev
	# compat tests and demo: unmodified rdma-core, perftest, pyverbs, UCX programs
	ibverbs-utils rdmacm-utils perftest python3-pyverbs libfabric-bin qperf
	ucx-utils
	# tests
	valgrind iproute2 tshark gdb
	# benchmarks (make bench): the raw-TCP limits softrnic is measured against
	iperf3 sockperf
)

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps.sh: no dpkg-query (not Debian?); make sure these are installed:" >&2
	echo "  ${PACKAGES[*]}" >&2
	exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
	[[ $status == installed ]] || missing+=("$pkg")
done

((${#missing[@]} == 0)) && exit 0

install=(apt-get install -y --no-install-recommends "${missing[@]}")
if [[ $(id -u) -ne 0 ]]; then
	echo "deps.sh: missing packages: ${missing[*]}" >&2
	echo "deps.sh: install them as root with:" >&2
	echo "  sudo apt-get update && sudo ${install[*]}" >&2
	exit 1
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update
"${install[@]}"
