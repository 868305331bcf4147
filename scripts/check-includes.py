#!/usr/bin/env python3
"""Checks who may include what (docs/architecture.md) on every #include "..." of include/, src/ and
tools/, and fails naming file:line, the include and the rule it breaks.

Usage: check-includes.py [ROOT]     (ROOT: the source tree, default: this script's parent folder)
       check-includes.py --self-test
"""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = ('.h', '.hpp', '.cc', '.cpp', '.cu', '.cuh', '.inl')
# Third-party headers some layers include with quotes (Highway's own style).
HWY = 'hwy/'
# The one file outside its layer the harness may include: the CPU ceiling probes run on the `cpu`
# backend's thread pool, as the backend's own kernels do.
HARNESS_EXCEPTIONS = ('backends/cpu/thread_pool.h',)
# Backends built on another backend's plan and kernels, and that one: `hopper` runs `planned`'s
# plan and decode kernel with an extend kernel of its own.
BACKEND_BASES = {'hopper': 'planned'}


def rule_for(rel):
    """(layer, allowed include prefixes, exact files also allowed, why) of a file, or None."""
    parts = rel.split('/')
    if parts[0] == 'include':
        return ('the public API (include/attnkit)', ['attnkit/'], (),
                'public headers stand alone: an installed attnkit has no src/')
    if parts[0] == 'tools':
        # build_info.h is generated into the build tree (cmake/build_info.cmake): the commit only.
        return ('the tool (tools/)', ['attnkit/', 'harness/', 'serving/'], ('build_info.h',),
                'the tool reaches backends by name only, through the public API, the harness and serving')
    if parts[0] != 'src' or len(parts) < 3:
        return None
    layer = parts[1]
    if layer == 'core':
        return ('core (src/core)', ['attnkit/', 'core/'], (),
                'core includes no CUDA header and no backend: device memory is core/device_memory.h')
    if layer == 'cuda':
        return ('the CUDA helpers (src/cuda)', ['attnkit/', 'core/', 'cuda/'], (),
                'the CUDA helpers implement core\'s device interface and serve the CUDA backends')
    if layer == 'backends' and len(parts) >= 4:
        own = 'backends/%s/' % parts[2]
        base = BACKEND_BASES.get(parts[2])
        allowed = ['attnkit/', 'core/', 'cuda/', own, HWY] + (['backends/%s/' % base] if base else [])
        return ('backend %s (src/%s)' % (parts[2], own), allowed, (),
                'a backend includes no other backend but the one it is built on (BACKEND_BASES)')
    if layer == 'parallel':
        return ('context parallelism (src/parallel)', ['attnkit/', 'core/', 'cuda/', 'parallel/'], (),
                'context parallelism runs backends through the public interface and reaches no backend')
    if layer == 'harness':
        return ('the harness (src/harness)', ['attnkit/', 'cuda/', 'harness/', HWY], HARNESS_EXCEPTIONS,
                'the harness reaches backends by name, except the cpu pool its ceiling probes run on')
    if layer == 'serving':
        return ('serving (src/serving)', ['attnkit/', 'serving/'], (),
                'serving uses the public API only: not the test harness, not src/cuda')
    return ('an unknown folder (src/%s)' % layer, [], (), 'every folder of src/ is a layer of docs/architecture.md')


def check_tree(root):
    problems = []
    for top in ('include', 'src', 'tools'):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, '/')
                rule = rule_for(rel)
                if rule is None:
                    continue
                layer, prefixes, exact, why = rule
                with open(path, encoding='utf-8', errors='replace') as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if '/' not in inc and os.path.exists(os.path.join(folder, inc)):
                            continue  # a header beside the file: the same layer
                        if inc in exact or any(inc.startswith(p) for p in prefixes):
                            continue
                        allowed = ', '.join(list(prefixes) + list(exact)) or 'nothing'
                        problems.append('%s:%d: #include "%s": %s may include only %s (%s)'
                                        % (rel, lineno, inc, layer, allowed, why))
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        files = {
            'src/serving/a.cc': '#include "serving/a.h"\n#include "harness/check.h"\n',
            'src/serving/a.h': '#include "attnkit/tensor.h"\n',
            'src/core/b.cc': '#ifdef X\n#  include "cuda/memory.h"\n#endif\n',
            'src/harness/c.cc': '#include "backends/cpu/thread_pool.h"\n#include "backends/cpu/plan.h"\n',
            'tools/attnkit/d.cc': '#include "d.h"\n#include "backends/cpu/ceilings.h"\n',
            'tools/attnkit/d.h': '#include <vector>\n',
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), 'w') as f:
                f.write(text)
        got = sorted(p.split(': ')[0] for p in check_tree(root))
        want = ['src/core/b.cc:2', 'src/harness/c.cc:2', 'src/serving/a.cc:2', 'tools/attnkit/d.cc:2']
        if got != want:
            print('check-includes self-test: reported %s, expected %s' % (got, want))
            return 1
    print('check-includes self-test: ok')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check_tree(root)
    for p in problems:
        print(p)
    if problems:
        print('check-includes: %d include(s) break the layering rules of docs/architecture.md' % len(problems))
        return 1
    print('check-includes: every include of include/, src/ and tools/ follows docs/architecture.md')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
