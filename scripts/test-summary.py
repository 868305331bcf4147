#!/usr/bin/env python3
"""Reads the JUnit files of a CTest run (and of pytest) and prints the run in one line: how many tests passed, failed
and were skipped, and why they were skipped, grouped by reason (most first); the failed tests are
named above that line. scripts/test.sh ends on it.

Usage: test-summary.py RESULTS.xml [MORE.xml...]  (all counted in the one line)
       test-summary.py --self-test
"""
import collections
import re
import sys
import tempfile
import xml.etree.ElementTree as ET

# GoogleTest's skip: "file:line: Skipped" then the reason; a program's own: "skipped: REASON".
GTEST_SKIP = re.compile(r':\d+: Skipped\n(.+)')
OWN_SKIP = re.compile(r'^skipped(?: \([^)]*\))?: (.+)$', re.M)


def skip_reason(case):
    out = case.findtext('system-out') or ''
    m = GTEST_SKIP.search(out) or OWN_SKIP.search(out)
    if m:
        return m.group(1).strip()
    skipped = case.find('skipped')
    return (skipped.get('message') if skipped is not None else None) or 'no reason given'


def summarize(*paths):
    cases = [case for path in paths for case in ET.parse(path).getroot().iter('testcase')]
    passed, failed, reasons = 0, [], collections.Counter()
    for case in cases:
        status = case.get('status')
        # pytest writes <error> for a test whose setup failed.
        if case.find('failure') is not None or case.find('error') is not None or status == 'fail':
            failed.append(case.get('name'))
        elif status == 'notrun' or case.find('skipped') is not None:
            reasons[skip_reason(case)] += 1
        else:
            passed += 1
    lines = ['failed: ' + name for name in failed]
    skipped = sum(reasons.values())
    line = '%d tests: %d passed, %d failed, %d skipped' % (passed + len(failed) + skipped, passed, len(failed), skipped)
    if reasons:
        line += ' (' + '; '.join('%d: %s' % (n, why) for why, n in reasons.most_common()) + ')'
    return lines + [line]


def self_test():
    xml = '''<?xml version="1.0" encoding="UTF-8"?>
<testsuite tests="7" failures="1" skipped="4">
  <testcase name="A.Passes" status="run"><system-out>ok</system-out></testcase>
  <testcase name="A.Fails" status="fail"><failure message="Failed"/></testcase>
  <testcase name="G.One" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
    <system-out>[ RUN      ] G.One
t.cc:9: Skipped
no NVIDIA driver is installed
[  SKIPPED ] G.One (0 ms)</system-out></testcase>
  <testcase name="G.Two" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>
    <system-out>t.cc:12: Skipped
no NVIDIA driver is installed
</system-out></testcase>
  <testcase classname="test_gpu" name="test_graph"><skipped type="pytest.skip" message="needs a CUDA device"/></testcase>
  <testcase classname="test_x" name="test_setup"><error message="failed on setup"/></testcase>
  <testcase name="E.Gpu" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/>
    <system-out>skipped (needs a GPU): built without CUDA
</system-out></testcase>
</testsuite>
'''
    with tempfile.NamedTemporaryFile('w', suffix='.xml', delete=False) as f:
        f.write(xml)
    got = summarize(f.name)
    want = ['failed: A.Fails', 'failed: test_setup',
            '7 tests: 1 passed, 2 failed, 4 skipped (2: no NVIDIA driver is installed; 1: needs a CUDA device; '
            '1: built without CUDA)']
    if got != want:
        print('test-summary self-test: printed %s, expected %s' % (got, want))
        return 1
    print('test-summary self-test: ok')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for line in summarize(*argv[1:]):
        print(line)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
