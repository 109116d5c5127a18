#!/usr/bin/env python3
"""Bytes of PyTorch's float8_e4m3fn / float8_e8m0fnu / float4_e2m1fn_x2 conversions, for bit-exact codec tests.

Run on the GPU machine: python3 tools/make_dtype_goldens.py OUT_DIR
Writes OUT_DIR/dtype_goldens.safetensors with:
  e4m3_in  F32 [N]   values swept (all codes, midpoints, ties, overflow, subnormals, random)
  e4m3_out U8  [N]   x.to(torch.float8_e4m3fn).view(uint8)
  e4m3_dec F32 [256] every code decoded
  e8m0_dec F32 [256] every e8m0 byte decoded (NaN for 0xff)
  fp4_in   F32 [M]   values swept for e2m1 (when PyTorch can cast to fp4)
  fp4_out  U8  [M/2] packed bytes
  fp4_dec  F32 [512] every packed byte decoded to two values (low nibble first if that is PyTorch's order)
and notes in the metadata about which conversions PyTorch supports.
"""
import os
import sys

import torch
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else "dtype-out"
os.makedirs(OUT, exist_ok=True)
g = torch.Generator().manual_seed(7)
notes = {"torch": torch.__version__}

codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
e4m3_dec = codes.view(torch.float8_e4m3fn).to(torch.float32)
finite = e4m3_dec[torch.isfinite(e4m3_dec)].unique()
mids = (finite[1:] + finite[:-1]) / 2
vals = [finite, mids, mids + 1e-6 * mids.abs().clamp(min=1e-9), mids - 1e-6 * mids.abs().clamp(min=1e-9),
        torch.tensor([448.0, 449.0, 463.9, 464.0, 464.1, 479.9, 480.0, 500.0, 1e6, float("inf"), -float("inf"),
                      float("nan"), 0.0, -0.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 3 * 2.0 ** -11, 1e-30]),
        torch.randn(2000, generator=g) * 10, torch.randn(2000, generator=g) * 0.01,
        (torch.rand(1000, generator=g) * 2 - 1) * 460]
e4m3_in = torch.cat(vals).to(torch.float32)
e4m3_in = torch.cat([e4m3_in, -e4m3_in])
e4m3_out = e4m3_in.to(torch.float8_e4m3fn).view(torch.uint8)
tensors = {"e4m3_in": e4m3_in, "e4m3_out": e4m3_out, "e4m3_dec": e4m3_dec}

try:
    tensors["e8m0_dec"] = codes.view(torch.float8_e8m0fnu).to(torch.float32)
except Exception as e:  # noqa: BLE001
    notes["e8m0"] = f"decode failed: {e}"

# FP4 e2m1: try PyTorch's own conversions; record what works.
fp4_vals = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 100.0],
                        dtype=torch.float32)
fp4_in = torch.cat([fp4_vals, -fp4_vals, torch.randn(494, generator=g) * 3]).to(torch.float32)
try:
    packed = fp4_in.to(torch.float4_e2m1fn_x2)
    tensors["fp4_in"] = fp4_in
    tensors["fp4_out"] = packed.view(torch.uint8)
    notes["fp4_cast"] = "x.to(float4_e2m1fn_x2) worked"
except Exception as e:  # noqa: BLE001
    notes["fp4_cast"] = f"x.to(float4_e2m1fn_x2) failed: {type(e).__name__}: {e}"
try:
    dec = codes.view(torch.float4_e2m1fn_x2).to(torch.float32)
    tensors["fp4_dec"] = dec.reshape(-1).contiguous()
    notes["fp4_dec"] = f"view(float4_e2m1fn_x2).to(float32) worked, shape {tuple(dec.shape)}"
except Exception as e:  # noqa: BLE001
    notes["fp4_dec"] = f"decode failed: {type(e).__name__}: {e}"
# transformers' MXFP4 unpacking (gpt-oss) as a second witness of the nibble order.
try:
    import inspect
    from transformers.integrations import mxfp4
    src = inspect.getsource(mxfp4)
    i = src.find("FP4_VALUES")
    notes["transformers_mxfp4_lut"] = src[i:i + 300]
    j = src.find("idx_lo")
    notes["transformers_mxfp4_unpack"] = src[j - 200:j + 500]
except Exception as e:  # noqa: BLE001
    notes["transformers_mxfp4"] = f"unavailable: {e}"

save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(OUT, "dtype_goldens.safetensors"),
          metadata={k: str(v) for k, v in notes.items()})
for k, v in notes.items():
    print(k, ":", v)
print("wrote", {k: tuple(v.shape) for k, v in tensors.items()})
