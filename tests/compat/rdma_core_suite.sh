#!/usr/bin/env bash
# compat/rdma_core_suite: rdma-core's own test suite (Debian's
# python3-pyverbs, /usr/share/doc/rdma-core/tests), unpacked into
# BUILD_DIR/conformance/ and run unmodified, one module at a time, through
# `softrnic run` with --dev softrnic0 (also `make conformance`). Each
# module's own summary is printed, then a per-module table. Outcomes are
# compared with rdma_core_expected.txt: a new failure, or a listed failure
# that passes, fails this test (exit 1). 77 = skipped (no pyverbs).
#
# usage: rdma_core_suite.sh BUILD_DIR [MODULE...]
set -u
build=$(cd "${1:?usage: rdma_core_suite.sh BUILD_DIR [MODULE...]}" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=/usr/share/doc/rdma-core/tests
py=/usr/bin/python3	# Debian's: the one that imports pyverbs
modules=("$@")
if ((${#modules[@]} == 0)); then
	modules=(test_device test_pd test_mr test_cq test_cqex test_cq_events
		 test_qp test_qpex test_atomic test_odp test_shared_pd test_fork
		 test_addr test_relaxed_ordering test_parent_domain test_rdmacm
		 test_tag_matching test_flow test_rss_traffic)
fi

if [[ ! -f $suite/run_tests.py ]] || ! "$py" -c 'import pyverbs' 2>/dev/null; then
	echo "rdma_core_suite: SKIP: python3-pyverbs missing (apt-get install -y python3-pyverbs)"
	exit 77
fi
if [[ ! -x $build/bin/softrnic ]]; then
	echo "rdma_core_suite: FAIL: $build/bin/softrnic not built"
	exit 1
fi

# A fresh copy each run: the package may have been upgraded.
conf=$build/conformance
rm -rf "$conf/tests" && mkdir -p "$conf" && cp -r "$suite" "$conf/tests" &&
	gunzip -f "$conf"/tests/*.gz || { echo "rdma_core_suite: cannot unpack $suite"; exit 1; }
results=$conf/results.tsv status=$conf/status.txt
: >"$results"
: >"$status"

# The suite's huge-page tests (test_odp, test_parent_domain) skip unless
# 2 MiB pages are reserved. As root, reserve a few for the run and give
# them back after; otherwise say how.
hp=/proc/sys/vm/nr_hugepages hp_old= HUGE_PAGES=64
if [[ -r $hp ]] && (($(<"$hp") < HUGE_PAGES)); then
	old=$(<"$hp")
	if [[ -w $hp ]] && echo "$HUGE_PAGES" >"$hp" 2>/dev/null; then
		hp_old=$old
		echo "rdma_core_suite: reserved $(<"$hp") huge pages of 2 MiB for the run"
	else
		echo "rdma_core_suite: no huge pages reserved: the huge-page tests skip" \
		     "(as root: echo $HUGE_PAGES > $hp)"
	fi
fi
restore_hp() { [[ -n $hp_old ]] && echo "$hp_old" >"$hp" 2>/dev/null; true; }

pid=
trap '[[ -n $pid ]] && kill -- -"$pid" 2>/dev/null; restore_hp; exit 1' INT TERM HUP
cd "$conf" || exit 1
for m in "${modules[@]}"; do
	# Own process group (setsid), so a timeout takes the module's helper
	# processes (the suite forks for its two-node tests) with it.
	SR_SUITE=$conf/tests SR_RESULTS=$results setsid timeout -k 10 300 \
		"$build/bin/softrnic" run -- "$py" "$here/rdma_core_suite.py" \
		--dev softrnic0 -v "$m" >"$conf/$m.log" 2>&1 &
	pid=$!
	wait "$pid"
	rc=$?
	pid=
	echo "$m $rc" >>"$status"
	printf '%-22s %s\n' "$m:" "$(grep -E '^(Ran |OK|FAILED)' "$conf/$m.log" | tr '\n' ' ')"
	((rc == 124)) && echo "  (timed out after 300 s)"
done
restore_hp
echo
"$py" "$here/rdma_core_suite.py" --check "$results" "$status" "$here/rdma_core_expected.txt"
rc=$?
echo "logs: $conf/<module>.log; outcomes: $results"
if ((rc)); then
	echo "rdma_core_suite: FAILED (see REGRESSION lines)"
	exit 1
fi
echo "rdma_core_suite: passed (every failure is listed in rdma_core_expected.txt)"
exit 0
