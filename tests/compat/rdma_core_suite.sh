#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs), run unmodified
# through `softrnic run` against softrnic0: the modules that pass today.
# A regression in any of them fails this test. Usage: rdma_core_suite.sh BUILD_DIR
set -u
build=$(cd "${1:?build dir}" && pwd)
suite=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3
modules=(test_device test_pd test_mr test_cq test_cqex test_qp test_qpex
	 test_atomic test_cq_events test_odp test_relaxed_ordering test_parent_domain)

if [ ! -f "$suite/run_tests.py" ] || ! "$py" -c 'import pyverbs' 2>/dev/null; then
	echo "rdma_core_suite: SKIP: python3-pyverbs missing (apt-get install -y python3-pyverbs)"
	exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
gunzip -f "$work"/tests/*.gz
cd "$work" || exit 1
out="$work/out.txt"
timeout 600 "$build/bin/softrnic" run -- "$py" tests/run_tests.py --dev softrnic0 -v \
	"${modules[@]}" >"$out" 2>&1
rc=$?
grep -E '^(Ran|OK|FAILED)' "$out"
if [ $rc -ne 0 ] || ! grep -qE '^OK' "$out" || ! grep -qE '^Ran [1-9]' "$out"; then
	grep -E '\.\.\. (FAIL|ERROR)$|^(FAIL|ERROR):' "$out"
	tail -40 "$out"
	echo "rdma_core_suite: FAILED (exit $rc)"
	exit 1
fi
skips=$(grep -c '\.\.\. skipped' "$out")
echo "rdma_core_suite: modules ${modules[*]}: passed ($skips skipped)"
exit 0
