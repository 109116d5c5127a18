"""The GPU peers' denominators, the same as the C++ benchmarks' (src/bench/gpu_ceilings.h): the first entry of the
file named by MOESERVE_CEILINGS, then of bench/ceilings.json, whose match string is in the GPU's name; else the H200's,
marked unmatched."""
import json
import os

COMMITTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "ceilings.json")


def ceilings_for(gpu_name):
    """A dict with copy_tbs, bf16_tflops, fp8_tflops, fp32_simt_tflops, match, source and matched."""
    entries = []
    for path in (os.environ.get("MOESERVE_CEILINGS"), COMMITTED):
        if path:
            with open(path) as f:
                entries += json.load(f)["gpus"]
    for e in entries:
        if e["match"] in gpu_name:
            return dict(e, matched=True)
    return dict(next(e for e in entries if e["match"] == "H200"), matched=False)


def describe(c):
    tail = "" if c["matched"] else "; no entry for this GPU: compare microseconds, not percentages"
    return (f"ceilings {c['match']}: {c['copy_tbs']} TB/s copy, bf16 {c['bf16_tflops']}, fp8 {c['fp8_tflops']} TFLOP/s "
            f"({c['source']}){tail}")
