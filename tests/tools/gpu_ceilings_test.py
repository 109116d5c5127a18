#!/usr/bin/env python3
"""tools/gpu_ceilings.py: the committed file passes the same checks as the C++ loader's, entries match by GPU name with
the H200's standing in, --use-measured (scripts/device-check.sh) takes a valid measurement only for a GPU that no
committed entry names, and --commit puts a measurement into the file."""
import json
import os
import subprocess
import sys
import tempfile

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "tools")
sys.path.insert(0, TOOLS)
import gpu_ceilings  # noqa: E402


CARD = "Test GPU 1"  # a card that no committed entry names


def measured(tmp, **fields):
    entry = {"match": CARD, "source": "test", "copy_tbs": 3.0, "bf16_tflops": 700,
             "fp8_tflops": 1300, "fp32_simt_tflops": 55}
    entry.update(fields)
    path = os.path.join(tmp, "m.json")
    with open(path, "w") as f:
        json.dump({"gpus": [entry]}, f)
    return path


def use_measured(path, gpu):
    r = subprocess.run([sys.executable, os.path.join(TOOLS, "gpu_ceilings.py"), "--use-measured", path, gpu],
                       capture_output=True, text=True)
    return r.returncode, r.stderr


def main():
    os.environ.pop("MOESERVE_CEILINGS", None)
    committed = gpu_ceilings.entries_of(gpu_ceilings.COMMITTED)
    assert any(e["match"] == "H200" for e in committed), committed
    h200 = gpu_ceilings.ceilings_for("NVIDIA H200")
    assert h200["matched"] and h200["match"] == "H200", h200
    other = gpu_ceilings.ceilings_for("Some Future GPU")
    assert not other["matched"] and other["match"] == "H200", other
    assert "not percentages" in gpu_ceilings.describe(other)

    with tempfile.TemporaryDirectory() as tmp:
        good = measured(tmp)
        os.environ["MOESERVE_CEILINGS"] = good
        card = gpu_ceilings.ceilings_for(CARD)
        del os.environ["MOESERVE_CEILINGS"]
        assert card["matched"] and card["copy_tbs"] == 3.0, card
        assert use_measured(good, CARD)[0] == 0
        assert use_measured(good, "NVIDIA H200")[0] == 1  # the committed entry stands
        assert use_measured(good, "NVIDIA A100-SXM4-80GB")[0] == 1  # the measurement is another card's
        # A card with a committed entry of its own (the H100's, measured in the sixty-first session) keeps it.
        assert any(e["match"] == "NVIDIA H100 80GB HBM3" for e in committed), committed
        assert gpu_ceilings.ceilings_for("NVIDIA H100 80GB HBM3")["match"] == "NVIDIA H100 80GB HBM3"
        h100 = measured(tmp, match="NVIDIA H100 80GB HBM3")
        assert use_measured(h100, "NVIDIA H100 80GB HBM3")[0] == 1
        rc, err = use_measured(measured(tmp, fp8_tflops=0), CARD)
        assert rc == 1 and "gpus[0]: field 'fp8_tflops' must be a positive number" in err, err
        rc, err = use_measured(measured(tmp, source=""), CARD)
        assert rc == 1 and "field 'source' must be a non-empty string" in err, err
        rc, err = use_measured(os.path.join(tmp, "missing.json"), CARD)
        assert rc == 1 and "not using the measurement" in err, err

        # --commit: into a copy of the committed file, a new card's entry appended, the same card's replaced.
        copy = os.path.join(tmp, "ceilings.json")
        with open(gpu_ceilings.COMMITTED) as f, open(copy, "w") as g:
            g.write(f.read())
        gpu_ceilings.commit(measured(tmp, copy_tbs=3.1), copy)
        gpu_ceilings.commit(measured(tmp, copy_tbs=3.2), copy)
        after = gpu_ceilings.entries_of(copy)
        assert [e["match"] for e in after] == [e["match"] for e in committed] + [CARD], after
        assert after[-1]["copy_tbs"] == 3.2, after
        with open(copy) as f:
            assert json.load(f)["about"], "the file's description is kept"
    print("gpu_ceilings_test: ok")


if __name__ == "__main__":
    main()
