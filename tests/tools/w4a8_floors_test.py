#!/usr/bin/env python3
"""tools/w4a8_floors.py: the floors of one shape worked out here by hand from issue 8's numbers, and a measured time
read from result lines in bench_gpu_moe_w4a8's format (the fastest uniform one per key; Zipf lines ignored)."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "w4a8_floors.py")


def run(*args):
    r = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def row(out, shape, tokens):
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if len(cells) > 2 and cells[0] == shape and cells[1] == str(tokens):
            return cells
    raise AssertionError('no row %s %d in:\n%s' % (shape, tokens, out))


def main():
    # V4-Flash W2 (E 256, N 4096, K 2048) at 4096 tokens, top-6: 24576 routed rows.
    weights = 256 * (4096 * 2048 // 2 + 4096 * 2048 // 32 + 4096)
    acts = 24576 * 2048 + 24576 * 16 * 4 + 24576 * 4096 * 2
    flops = 2 * 24576 * 4096 * 2048
    hbm_us, fp8_us = (weights + acts) / 4.28e12 * 1e6, flops / 1418e12 * 1e6
    rc, out, err = run('--tokens', '4096')
    assert rc == 0, err
    cells = row(out, 'flash_w2', 4096)
    assert cells[2] == '%.2f GB' % ((weights + acts) / 1e9), cells
    assert cells[3] == '%.0f us' % hbm_us and cells[4] == '%.0f us' % fp8_us, cells
    assert cells[5] == '%.0f us' % (fp8_us / 0.6), cells
    assert cells[6] == '%.0f %%' % (100 * hbm_us / (fp8_us / 0.6)), cells

    with tempfile.TemporaryDirectory() as d:
        logs = []
        for i, us in enumerate((900.0, 850.0)):
            path = os.path.join(d, 'r%d.log' % i)
            with open(path, 'w') as f:
                f.write('flash_w2  prefill uniform T=4096  experts= 256.0  w4a8  %9.1f us [cfg%d] 1.0 TFLOP/s\n' % (us, i))
                f.write('flash_w2  prefill zipf    T=4096  experts= 256.0  w4a8      10.0 us [fast] 1.0 TFLOP/s\n')
            logs.append(path)
        rc, out, err = run('--tokens', '4096', *logs)
        assert rc == 0, err
        cells = row(out, 'flash_w2', 4096)
        assert cells[7] == '850 us (cfg1)', cells
        assert cells[8] == '%.1f %%' % (100 * fp8_us / 850.0), cells
        assert cells[9] == '%.0f %%' % (100 * hbm_us / 850.0), cells
        assert row(out, 'pro_w13', 4096)[7] == '-'

    rc, _, err = run('--tokens', '4096,x')
    assert rc == 2 and '--tokens' in err, (rc, err)
    print('w4a8_floors: ok')


if __name__ == '__main__':
    main()
