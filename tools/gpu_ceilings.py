"""The GPU peers' denominators, the same as the C++ benchmarks' (src/bench/gpu_ceilings.h): the first entry of the
file named by MOESERVE_CEILINGS, then of bench/ceilings.json, whose match string is in the GPU's name; else the H200's,
marked unmatched.

As a program:
  python3 tools/gpu_ceilings.py --use-measured FILE GPU_NAME   (scripts/device-check.sh) exits 0 when the benchmarks
      should use FILE (a tools/measure_ceilings.py measurement) for GPU_NAME: no committed entry names the GPU and
      FILE holds a valid entry for it.
  python3 tools/gpu_ceilings.py --commit FILE   puts FILE's entries into bench/ceilings.json (replacing entries with
      the same match string), e.g. a device-check's ceilings_measured.json."""
import json
import os
import sys

COMMITTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "ceilings.json")
FIGURES = ("copy_tbs", "bf16_tflops", "fp8_tflops", "fp32_simt_tflops")


def document_of(path):
    """The file's document, its entries checked as the C++ loader checks them (ValueError naming the file, entry and
    field)."""
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise ValueError(f"{path}: expected an object with a 'gpus' array")
    for i, e in enumerate(doc["gpus"]):
        for field in ("match", "source"):
            if not isinstance(e.get(field), str) or not e[field]:
                raise ValueError(f"{path}: gpus[{i}]: field '{field}' must be a non-empty string")
        for field in FIGURES:
            v = e.get(field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"{path}: gpus[{i}]: field '{field}' must be a positive number")
    return doc


def entries_of(path):
    return document_of(path)["gpus"]


def ceilings_for(gpu_name):
    """A dict with copy_tbs, bf16_tflops, fp8_tflops, fp32_simt_tflops, match, source and matched."""
    entries = []
    for path in (os.environ.get("MOESERVE_CEILINGS"), COMMITTED):
        if path:
            entries += entries_of(path)
    for e in entries:
        if e["match"] in gpu_name:
            return dict(e, matched=True)
    return dict(next(e for e in entries if e["match"] == "H200"), matched=False)


def describe(c):
    tail = "" if c["matched"] else "; no entry for this GPU: compare microseconds, not percentages"
    return (f"ceilings {c['match']}: {c['copy_tbs']} TB/s copy, bf16 {c['bf16_tflops']}, fp8 {c['fp8_tflops']} TFLOP/s "
            f"({c['source']}){tail}")


def commit(path, committed=COMMITTED):
    """FILE's entries into the committed file, in place of those with the same match string."""
    new = entries_of(path)
    doc = document_of(committed)
    doc["gpus"] = [e for e in doc["gpus"] if e["match"] not in {n["match"] for n in new}] + new
    with open(committed, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for n in new:
        print(f"gpu_ceilings: {committed}: {describe(dict(n, matched=True))}")


def main(argv):
    if len(argv) == 3 and argv[1] == "--commit":
        commit(argv[2])
        return 0
    if len(argv) != 4 or argv[1] != "--use-measured":
        print("usage: gpu_ceilings.py --use-measured FILE GPU_NAME | --commit FILE", file=sys.stderr)
        return 2
    path, gpu = argv[2], argv[3]
    if any(e["match"] in gpu for e in entries_of(COMMITTED)):
        return 1  # the committed entry stands
    try:
        ok = any(e["match"] in gpu for e in entries_of(path))
    except (OSError, ValueError) as err:
        print(f"gpu_ceilings: not using the measurement: {err}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
