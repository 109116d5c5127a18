#!/usr/bin/env python3
"""tools/w4a8_table_from_sweeps.py: a table from sweep logs in bench_gpu_moe_w4a8's format (picks worked out here by
the tuner's rule), the GPU taken from the logs, and --merge keeping the other GPUs' blocks of a table file."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "w4a8_table_from_sweeps.py")
SHAPES = [("pro_w13", 384, 6144, 7168), ("pro_w2", 384, 7168, 3072), ("flash_w13", 256, 4096, 4096),
          ("flash_w2", 256, 4096, 2048)]


def run(*args):
    r = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def sweep_log(path, gpu, times):
    """A log with a `GPU:` line and one sweep line per (shape, routing, tokens); times(shape, routing, tokens) gives
    the candidates' microseconds."""
    with open(path, "w") as f:
        if gpu:
            f.write(f"GPU: {gpu}, 132 SMs, L2 50 MB\n")
        for shape, *_ in SHAPES:
            for tokens in (1, 4096):
                for routing in ("uniform", "zipf"):
                    phase = "decode" if tokens < 256 else "prefill"
                    cells = " ".join(f"{c}={us:.2f}" for c, us in times(shape, routing, tokens).items())
                    f.write(f"  sweep {shape} {phase} {routing} T={tokens}: {cells}\n")


def entries(out, gpu):
    return [line for line in out.splitlines() if line.startswith('{"%s"' % gpu)]


def main():
    with tempfile.TemporaryDirectory() as d:
        # Round 1 and round 2 of one GPU: each candidate's minimum counts. At one token "a" is fastest under uniform
        # routing and "b" under Zipf; by the summed slowdowns (a: 1 + 1.5, b: 1.2 + 1) b wins. At 4096 tokens the split
        # candidate wins in round 2 only, by its minimum.
        def r1(shape, routing, tokens):
            if tokens == 1:
                return {"a": 10.0, "b": 12.0} if routing == "uniform" else {"a": 15.0, "b": 10.0}
            return {"p": 100.0, "p+q>16": 120.0}

        def r2(shape, routing, tokens):
            if tokens == 1:
                return {"a": 11.0, "b": 13.0} if routing == "uniform" else {"a": 16.0, "b": 11.0}
            return {"p": 101.0, "p+q>16": 90.0}

        sweep_log(os.path.join(d, "plain_1.log"), "NVIDIA H100 80GB HBM3", r1)
        sweep_log(os.path.join(d, "plain_2.log"), "NVIDIA H100 80GB HBM3", r2)
        rc, out, err = run(os.path.join(d, "plain_*.log"), "--date", "2026-12-05")
        assert rc == 0, err
        got = entries(out, "NVIDIA H100 80GB HBM3")
        assert len(got) == 8, out
        assert got[0] == '{"NVIDIA H100 80GB HBM3", 384, 6144, 7168, 6, "b", nullptr, 0},', got
        assert got[1] == '{"NVIDIA H100 80GB HBM3", 384, 6144, 7168, INT_MAX, "p", "q", 16},', got
        assert got[7] == '{"NVIDIA H100 80GB HBM3", 256, 4096, 2048, INT_MAX, "p", "q", 16},', got
        assert '// GPU "NVIDIA H100 80GB HBM3": 2 plain sweeps, 0 --settled, 2026-12-05' in out.splitlines(), out

        # --merge: the committed table's H200 block stays as it is, the new GPU's block follows it; merging again
        # replaces that block instead of adding a second one.
        table = os.path.join(os.path.dirname(__file__), "..", "..", "src", "kernels", "cuda",
                             "moe_w4a8_dispatch_table.inc")
        with open(table) as f:
            committed = f.read().splitlines()
        rc, merged, err = run(os.path.join(d, "plain_*.log"), "--merge", table)
        assert rc == 0, err
        lines = merged.splitlines()
        h200 = [line for line in committed if line.startswith('{"NVIDIA H200"') or line.startswith('// GPU "NVIDIA H200"')]
        assert len(h200) > 40 and lines[lines.index(h200[0]):lines.index(h200[0]) + len(h200)] == h200, merged
        assert lines.index(h200[-1]) < lines.index(got[0]), merged
        merged_file = os.path.join(d, "merged.inc")
        with open(merged_file, "w") as f:
            f.write(merged)
        sweep_log(os.path.join(d, "again.log"), "NVIDIA H100 80GB HBM3", lambda *k: {"c": 1.0})
        rc, again, err = run(os.path.join(d, "again.log"), "--merge", merged_file)
        assert rc == 0, err
        assert all(e.endswith(', "c", nullptr, 0},') for e in entries(again, "NVIDIA H100 80GB HBM3")), again
        assert len(entries(again, "NVIDIA H100 80GB HBM3")) == 8, again
        assert again.count('// GPU "NVIDIA H100 80GB HBM3"') == 1, again
        assert entries(again, "NVIDIA H200") == entries(merged, "NVIDIA H200"), again
        assert "old pick b not in these sweeps" in err, err  # again.log timed only "c"

        # What the re-tune changes (stderr): the merged block picked b at one token and p+q>16 at 4096; new sweeps
        # where c is fastest move all 8 keys: 2 x 6 us against 2 x 9 (b) and 2 x 12 (p+q>16), geomean 0.577.
        sweep_log(os.path.join(d, "moved.log"), "NVIDIA H100 80GB HBM3", lambda *k: {"b": 9.0, "p+q>16": 12.0, "c": 6.0})
        rc, out, err = run(os.path.join(d, "moved.log"), "--merge", merged_file)
        assert rc == 0, err
        assert "pro_w13 6 slots: b 18.00 us -> c 12.00 us (0.667)" in err, err
        assert "pro_w2 24576 slots: p+q>16 24.00 us -> c 12.00 us (0.500)" in err, err
        assert "8 of 8 picks move; new / old over 8 keys" in err and ": 0.577" in err, err
        rc, out, err = run(os.path.join(d, "moved.log"))
        assert rc == 0 and "picks move" not in err, err  # no table, nothing to compare
        assert "held out" not in err, err

        # The held-out figure: against a block that picks "o" everywhere, sweep A has "n" faster (8 against 10 us) and
        # sweep B slower (12). Left out A, B's picks are "o": 1.0 in A. Left out B, A's picks are "n": 12 / 10 in B.
        # So 8 keys at 1.0 and 8 at 1.2, geomean sqrt(1.2) = 1.095, worst 1.200.
        sweep_log(os.path.join(d, "o.log"), "NVIDIA H20", lambda *k: {"o": 1.0})
        rc, o_table, err = run(os.path.join(d, "o.log"))
        assert rc == 0, err
        o_file = os.path.join(d, "o.inc")
        with open(o_file, "w") as f:
            f.write(o_table)
        sweep_log(os.path.join(d, "held_a.log"), "NVIDIA H20", lambda *k: {"o": 10.0, "n": 8.0})
        sweep_log(os.path.join(d, "held_b.log"), "NVIDIA H20", lambda *k: {"o": 10.0, "n": 12.0})
        rc, out, err = run(os.path.join(d, "held_*.log"), "--merge", o_file)
        assert rc == 0, err
        assert "held out: picks made without one sweep, timed in it, new / old over 16 (sweep, key) pairs: 1.095; " \
               "worst 1.200 at " in err and "(o -> n)" in err, err
        rc, out, err = run(os.path.join(d, "held_a.log"), "--merge", o_file)
        assert rc == 0 and "held out: needs two sweeps or more" in err, err

        # --stat median: one lucky run of "x" (5 us against 10) makes it the minima's pick; the medians pick "y" (8).
        for i, x_us in enumerate((5.0, 10.0, 10.0)):
            sweep_log(os.path.join(d, f"lucky_{i}.log"), "NVIDIA H100 80GB HBM3", lambda *k, x=x_us: {"x": x, "y": 8.0})
        rc, out, err = run(os.path.join(d, "lucky_*.log"))
        assert rc == 0 and all(e.endswith(', "x", nullptr, 0},') for e in entries(out, "NVIDIA H100 80GB HBM3")), out
        rc, out, err = run(os.path.join(d, "lucky_*.log"), "--stat", "median")
        assert rc == 0 and all(e.endswith(', "y", nullptr, 0},') for e in entries(out, "NVIDIA H100 80GB HBM3")), out
        assert "each candidate's median over them" in out, out

        # The GPU: from the logs; logs of two GPUs, or none named and no --gpu, are refused.
        sweep_log(os.path.join(d, "other.log"), "NVIDIA H200", r1)
        rc, out, err = run(os.path.join(d, "plain_1.log"), os.path.join(d, "other.log"))
        assert rc != 0 and "several GPUs" in err and "NVIDIA H200" in err, (rc, err)
        sweep_log(os.path.join(d, "anon.log"), "", r1)
        rc, out, err = run(os.path.join(d, "anon.log"))
        assert rc != 0 and "pass --gpu" in err, (rc, err)
        rc, out, err = run(os.path.join(d, "anon.log"), "--gpu", "NVIDIA H20")
        assert rc == 0 and len(entries(out, "NVIDIA H20")) == 8, (rc, err, out)
        rc, out, err = run(os.path.join(d, "plain_1.log"), "--gpu", "NVIDIA H20")
        assert rc != 0 and "several GPUs" in err, (rc, err)
    print("w4a8_table_from_sweeps_test: ok")


if __name__ == "__main__":
    main()
