#!/usr/bin/env python3
"""Checks the machine code (SASS) of the wgmma kernels in a built libattnkit for what their speed
rests on, and fails naming the kernel and what it found. Every kernel of the set (--kernels: the
`hopper` extend kernels, or the `mla` kernels):

- the products are tensor-core `HGMMA` (`QGMMA` for e4m3) instructions;
- no local memory (`LDL` / `STL`: spills or a register array indexed at run time);
- the products are not serialised: ptxas, where it cannot prove an accumulator settled, waits
  after every wgmma (each `HGMMA` then ends its own group, `gsb0`); a chain of k-steps ends one.

Every host-side function of those kernels (the symbol a launch names) has device code beside it:
a kernel template instantiated on the host with other arguments than on the device (nvcc's host
pass once typed an element type as a reference) launches a kernel that does not exist, refused at
run time as "invalid resource handle".

The `hopper` extend kernels besides: the online softmax runs under the PV product: in the consumer
loop, the row-max shuffles and the exponentials sit between the wait for S
(`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and the wait for PV (`... gsb0, 0x0`), and none follows that
second wait before the loop issues again. ptxas is free to move the wait up (it did, once), so
this is checked on the code, not assumed from the source.

Usage: check-sass.py LIBRARY [--kernels hopper|mla] [--cuobjdump PATH] [--search-dir DIR] [--python PY ...]
       check-sass.py --self-test
Exit status 77 (with "skipped: REASON") where no cuobjdump or nvdisasm is found; they come with
the CUDA toolkit, or as the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels (found through
the site-packages of each --python interpreter).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

KERNEL_SETS = {
    'hopper': re.compile(r'attnkit6hopper13extend_kernel'),
    'mla': re.compile(r'attnkit3mla13(attend|narrow)_kernel'),
}
# The KV tile of an instantiation: 64 tokens at head dim 256, else 128 (hopper/kernels/config.cuh).
# (KernelConfig<T, head dim, KvLoad>: Li<dim>E, then the load mode LNS0_6KvLoadE<n>E.)
HEAD_DIM = re.compile(r'KernelConfigI\w+?Li(\d+)E')
WAIT_S = 'WARPGROUP.DEPBAR.LE gsb0, 0x1'
WAIT_PV = 'WARPGROUP.DEPBAR.LE gsb0, 0x0'
# Head dims whose kernels are known to miss a check, and why; reported, not failed. An entry whose
# kernels pass every check fails the run, so that this list never outlives the limit it names.
KNOWN_LIMITS = {
    256: 'the 64 x 256 f32 O accumulator leaves few registers: 12 bytes spill outside the consumer loop '
         '(4 local-memory instructions), none inside it; with an e4m3 cache the dequantising producer '
         '(56 registers) spills 10 more'
}
# The same by instantiation (a pattern of the mangled name, and why).
KNOWN_LIMITS_BY_NAME = [
    (re.compile(r'Li64ELNS0_6KvLoadE0E'),
     'd64 with TMA boxes: three consumer warpgroups of 160 registers (S 64 + O 32 + P 32 live across the '
     'products): 12 bytes spill, reloaded once a tile for the Q tile\'s descriptor'),
    (re.compile(r'Li128ELNS0_6KvLoadE0E'),
     'd128 with 192-token tiles: 240 registers a consumer hold S 96 + O 64 + P 48: five 8-byte values '
     'spill outside the turn and reload once a tile; the 24-register TMA producer spills its page-table '
     'state (8 bytes a tile)'),
]
GMMA = re.compile(r'\b[HQ]GMMA\b')


def split_functions(sass):
    """{mangled name: [instruction lines]} of cuobjdump -sass output."""
    functions, name = {}, None
    for line in sass.splitlines():
        m = re.match(r'\s*Function : (\S+)', line)
        if m:
            name = m.group(1)
            functions[name] = []
        elif name and re.search(r'/\*[0-9a-f]{4,}\*/', line):
            functions[name].append(line.split(';')[0].strip())
    return functions


def host_kernels(nm_output, pattern):
    """Mangled names of the kernels `nm --defined-only` lists as host functions (their launch stubs),
    without the compiler's clone suffixes (.cold, .isra)."""
    names = set()
    for line in nm_output.splitlines():
        parts = line.split()
        # (nvcc's __device_stub__ helpers of non-template kernels name the kernel inside theirs)
        if len(parts) == 3 and parts[1] in 'tTwW' and pattern.search(parts[2]) and '__device_stub__' not in parts[2]:
            names.add(parts[2].split('.')[0])
    return names


def head_dim_of(name):
    m = HEAD_DIM.search(name)
    return int(m.group(1)) if m else 0


def check_wgmma_kernel(code):
    """What every wgmma kernel must show, as sentences (empty: nothing wrong)."""
    problems = []
    products = [line for line in code if GMMA.search(line)]
    if not products:
        problems.append('no HGMMA: the products are not on the tensor cores')
    local = [line for line in code if re.search(r'\b(LDL|STL)\b', line)]
    if local:
        problems.append('%d local-memory instructions (first: %s)' % (len(local), local[0]))
    ends = sum('gsb0' in line for line in products)
    if products and 2 * ends > len(products):
        problems.append('the products are serialised: %d of %d HGMMA end a group (ptxas waits after each)' %
                        (ends, len(products)))
    return problems


def check_kernel(name, code):
    """The problems of one extend kernel's code, as sentences (empty: none)."""
    problems = check_wgmma_kernel(code)
    tile_n = 64 if head_dim_of(name) == 256 else 128
    # The consumer loop: each wait for S, the next wait for PV, and what comes after it up to the
    # next product or turn barrier.
    loops = 0
    for i, line in enumerate(code):
        if WAIT_S not in line:
            continue
        j = next((k for k in range(i + 1, len(code)) if WAIT_PV in code[k]), None)
        if j is None:
            problems.append('a wait for S with no wait for PV after it')
            continue
        loops += 1
        between = code[i + 1:j]
        shuffles = sum('SHFL.BFLY' in x for x in between)
        exps = sum('MUFU.EX2' in x for x in between)
        end = next((k for k in range(j + 1, len(code)) if GMMA.search(code[k]) or 'BAR.SYNC' in code[k]), len(code))
        late = sum('MUFU.EX2' in x for x in code[j + 1:end])
        if shuffles < 4 or exps < tile_n // 2 or late:
            problems.append('the softmax does not run under the PV product: between the waits %d row-max '
                            'shuffles (want >= 4) and %d exponentials (want >= %d), after the PV wait %d '
                            '(want 0)' % (shuffles, exps, tile_n // 2, late))
    if loops == 0:
        problems.append('no consumer loop (no wait for S alone): the products no longer overlap the softmax')
    return problems


def find_tool(name, explicit, search_dirs, pythons):
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for d in search_dirs:
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    for py in pythons:
        try:
            out = subprocess.run([py, '-c', 'import nvidia, sys; print("\\n".join(nvidia.__path__))'],
                                 capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for root in out.split():
            for sub in ('cu13', 'cu12', 'cuda_cuobjdump', 'cuda_nvdisasm'):
                path = os.path.join(root, sub, 'bin', name)
                if os.access(path, os.X_OK):
                    return path
    return None


def self_test():
    good = ['/*0010*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;',
            '/*0020*/ WARPGROUP.DEPBAR.LE gsb0, 0x1 ;'] + \
           ['/*0030*/ SHFL.BFLY PT, R1, R2, 0x1, 0x1f ;'] * 4 + ['/*0040*/ MUFU.EX2 R3, R4 ;'] * 64 + \
           ['/*0050*/ WARPGROUP.DEPBAR.LE gsb0, 0x0 ;', '/*0060*/ FMUL R5, R5, R6 ;', '/*0070*/ BAR.SYNC R2, 0x100 ;',
            '/*0080*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;']
    name = '_ZN7attnkit6hopper13extend_kernelINS0_12KernelConfigI13__nv_bfloat16Li128EEEEEvNS0_10ExtendMapsE'
    assert check_kernel(name, [x.split(';')[0].strip() for x in good]) == []
    hoisted = good[:2] + ['/*0050*/ WARPGROUP.DEPBAR.LE gsb0, 0x0'] + good[2:70] + good[71:]
    assert any('does not run under' in p for p in check_kernel(name, hoisted)), check_kernel(name, hoisted)
    spilled = good + ['/*0090*/ STL [R1], R2']
    assert any('local-memory' in p for p in check_kernel(name, spilled))
    assert any('no HGMMA' in p for p in check_kernel(name, [x for x in good if 'HGMMA' not in x]))
    serial = ['/*0010*/ HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0',
              '/*0020*/ WARPGROUP.DEPBAR.LE gsb0, 0x0'] * 4
    assert any('serialised' in p for p in check_wgmma_kernel(serial)), check_wgmma_kernel(serial)
    chained = ['/*0010*/ HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24'] * 3 + \
              ['/*0040*/ HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24, gsb0', '/*0050*/ WARPGROUP.DEPBAR.LE gsb0, 0x0']
    assert check_wgmma_kernel(chained) == [], check_wgmma_kernel(chained)
    gathered = '_ZN7attnkit6hopper13extend_kernelINS0_12KernelConfigI6__halfLi256ELb1EEEEEvNS0_10ExtendMapsE'
    assert head_dim_of(gathered) == 256 and head_dim_of(name) == 128
    parsed = split_functions('\tFunction : %s\n        /*0000*/ MOV R1, c[0x0][0x28] ;  /* 0x000 */\n' % name)
    assert parsed == {name: ['/*0000*/ MOV R1, c[0x0][0x28]']}, parsed
    by_ref = name.replace('I13__nv_bfloat16', 'IR13__nv_bfloat16')
    nm = '0000000000200a20 t %s\n00000000000547ea t %s.cold\n0000000000200c30 t %s\n' % (name, name, by_ref)
    assert host_kernels(nm, KERNEL_SETS['hopper']) == {name, by_ref}
    print('check-sass self-test: ok')
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--self-test':
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('library')
    ap.add_argument('--kernels', choices=sorted(KERNEL_SETS), default='hopper')
    ap.add_argument('--cuobjdump')
    ap.add_argument('--search-dir', action='append', default=[])
    ap.add_argument('--python', nargs='*', default=[])
    args = ap.parse_args()
    cuobjdump = find_tool('cuobjdump', args.cuobjdump, args.search_dir, args.python)
    nvdisasm = find_tool('nvdisasm', None, args.search_dir, args.python)
    if not cuobjdump or not nvdisasm:
        print('skipped: no %s here (the CUDA toolkit has it, or the wheel nvidia-cuda-%s)' %
              ('cuobjdump' if not cuobjdump else 'nvdisasm', 'cuobjdump' if not cuobjdump else 'nvdisasm'))
        return 77
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get('PATH', ''))
    run = subprocess.run([cuobjdump, '-sass', args.library], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        print('check-sass: %s -sass %s failed: %s' % (cuobjdump, args.library, run.stderr.strip()[-500:]))
        return 1
    kernels = {n: code for n, code in split_functions(run.stdout).items() if KERNEL_SETS[args.kernels].search(n)}
    if not kernels:
        print('check-sass: no %s kernel in %s (built without sm_90a?)' % (args.kernels, args.library))
        return 1
    failed = 0
    nm = subprocess.run(['nm', '--defined-only', args.library], capture_output=True, text=True)
    if nm.returncode != 0:
        print('check-sass: nm %s failed: %s' % (args.library, nm.stderr.strip()[-500:]))
        return 1
    for name in sorted(host_kernels(nm.stdout, KERNEL_SETS[args.kernels]) - set(kernels)):
        print('check-sass: %s is launched from the host but has no device code: the host and device '
              'passes instantiated different kernels' % name)
        failed += 1
    hopper = args.kernels == 'hopper'
    for name, code in sorted(kernels.items()):
        problems = check_kernel(name, code) if hopper else check_wgmma_kernel(code)
        known = KNOWN_LIMITS.get(head_dim_of(name)) if hopper else None
        known = next((why for pattern, why in KNOWN_LIMITS_BY_NAME if hopper and pattern.search(name)), known)
        if known and not problems:
            print('check-sass: %s passes every check: drop head dim %d from KNOWN_LIMITS' % (name, head_dim_of(name)))
            failed += 1
        for p in problems:
            print('check-sass: %s: %s%s' % (name, p, ' (known: %s)' % known if known else ''))
        failed += bool(problems) and not known
    print('check-sass: %d %s kernels, %d failing' % (len(kernels), args.kernels, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
