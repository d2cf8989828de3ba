#!/usr/bin/python3
# Runs modules of rdma-core's pyverbs test suite exactly as its own
# run_tests.py does (same argument parser, same unittest.main over the
# suite's `tests` package, same printed summary), and also writes one line
# per test outcome to $SR_RESULTS; `--check RESULTS STATUS EXPECTED` then
# compares the outcomes with the expectations file (rdma_core_expected.txt).
# Run the suite through `softrnic run`:
#   SR_SUITE=build/conformance/tests SR_RESULTS=out.tsv \
#     softrnic run -- /usr/bin/python3 rdma_core_suite.py --dev softrnic0 -v test_pd
import fnmatch
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


def check(results_path, status_path, expected_path):
    """Compare the outcomes with the expectations file; 0 if nothing new.

    Expectations: 'FAIL <test id glob> <reason>' (the test fails or errors
    today because softrnic lacks the feature) and 'SKIP <glob> <reason>'
    (the suite skips it here). A failure not listed fails the check; so
    does a listed failure that passes (update the list and docs/COMPAT.md).
    An unlisted skip, or a listed one that now passes, is only reported.
    """
    expect = []
    for line in open(expected_path):
        line = line.strip()
        if line and not line.startswith('#'):
            kind, pat, reason = (line.split(None, 2) + [''])[:3]
            expect.append((kind, pat, reason))

    def listed(kind, test):
        return next((e for e in expect if e[0] == kind and
                     fnmatch.fnmatchcase(test, e[1])), None)

    per_mod, bad, notes = {}, [], []
    for line in open(results_path):
        status, test, reason = (line.rstrip('\n').split('\t') + [''])[:3]
        mod = test.split('.')[1] if test.startswith('tests.') else test
        m = per_mod.setdefault(mod, dict(ran=0, passed=0, xfail=0, skipped=0, failed=0))
        m['ran'] += 1
        if status == 'PASS':
            m['passed'] += 1
            if listed('FAIL', test):
                bad.append('%s: listed as failing but PASSES now: '
                           'take it off the list' % test)
            elif listed('SKIP', test):
                notes.append('%s: listed as skipped but passes now' % test)
        elif status == 'SKIP':
            m['skipped'] += 1
            if not listed('SKIP', test) and not listed('FAIL', test):
                notes.append('%s: skipped, not listed: %s' % (test, reason))
        elif listed('FAIL', test):
            m['xfail'] += 1
        else:
            m['failed'] += 1
            bad.append('%s: NEW %s: %s' % (test, status, reason))
    for line in open(status_path):
        mod, rc = line.split()
        m = per_mod.setdefault(mod, dict(ran=0, passed=0, xfail=0, skipped=0, failed=0))
        if rc not in ('0', '1') or m['ran'] == 0 or \
                (rc == '1' and m['failed'] + m['xfail'] == 0):
            m['failed'] += 1
            bad.append('%s: the run ended with status %s' % (mod, rc))
    print('%-22s %5s %6s %6s %6s %6s' % ('module', 'ran', 'passed', 'xfail',
                                         'skip', 'FAILED'))
    tot = dict(ran=0, passed=0, xfail=0, skipped=0, failed=0)
    for mod, m in per_mod.items():
        print('%-22s %5d %6d %6d %6d %6d' % (mod, m['ran'], m['passed'], m['xfail'],
                                             m['skipped'], m['failed']))
        for k in tot:
            tot[k] += m[k]
    print('%-22s %5d %6d %6d %6d %6d' % ('total', tot['ran'], tot['passed'],
                                         tot['xfail'], tot['skipped'], tot['failed']))
    for n in notes:
        print('note: ' + n)
    for b in bad:
        print('REGRESSION: ' + b)
    return 1 if bad else 0


if len(sys.argv) == 5 and sys.argv[1] == '--check':
    sys.exit(check(*sys.argv[2:]))

suite = os.path.abspath(os.environ['SR_SUITE'])
results = open(os.environ['SR_RESULTS'], 'a', buffering=1)
sys.path.insert(0, suite)
from args_parser import parser  # noqa: E402  (the suite's own)


def record(status, test, reason=''):
    reason = ' '.join(str(reason).split())[:200]
    results.write('%s\t%s\t%s\n' % (status, test.id(), reason))


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        record('PASS', test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        record('FAIL', test, err[1])

    def addError(self, test, err):
        super().addError(test, err)
        record('ERROR', test, err[1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        record('SKIP', test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        record('PASS', test, 'expected failure (suite)')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        record('FAIL', test, 'unexpected success (suite)')

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            record('FAIL', test, '%s: %s' % (subtest, err[1]))


tests = SourceFileLoader('tests', os.path.join(suite, '__init__.py')).load_module()
parser.parse_args()
unittest.main(module=tests,
              testRunner=unittest.TextTestRunner(resultclass=Result,
                                                 verbosity=2))
