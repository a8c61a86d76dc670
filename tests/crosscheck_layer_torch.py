#!/usr/bin/env python3
"""Cross-checks miras-layer against an independent PyTorch implementation.

DeltaNet and gated DeltaNet, float64, chunk sizes 1, 2 and 3, written from
their update rules (presets.c) rather than from the C code:

  gated DeltaNet, b = 1:  M_t = a_t M_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T
  form=exact (the default, auto), any b: the same per-token rule
  form=minibatch, chunk b: every token of a chunk takes its gradient at the state W left by
  the previous chunk (decayed by the cumulative a inside the chunk for gated
  DeltaNet), and the steps accumulate with the decay as a scan:
      A_t = a_t A_{t-1} - eta_t ((abar_t W) k_t - v_t) k_t^T,  y_t = A_t q_t

Writes the inputs to a safetensors file, runs the tool, reads its output
and compares y and every gradient of sum(y * r) with torch.autograd.

Optional (not run by tools/test.sh): needs PyTorch, e.g. Debian's
python3-torch with /usr/bin/python3.

  /usr/bin/python3 tests/crosscheck_layer_torch.py [build/tools/miras-layer]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

N, T, DK, DV = 2, 7, 4, 3
DTYPES = {"F64": np.float64, "F32": np.float32}


def save(path, tensors):
    """safetensors: 8-byte little-endian header size, JSON header, data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=DTYPES[h["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(h["shape"]).copy())
    return out


def layer(q, k, v, eta, alpha, w0, chunk):
    """y [N,T,dv] of the (gated) delta rule in chunks; alpha None: DeltaNet."""
    ys = []
    w = w0.expand(N, DV, DK)
    for t0 in range(0, T, chunk):
        a, abar = w, torch.ones(N, 1, 1, dtype=w.dtype)
        for t in range(t0, min(t0 + chunk, T)):
            kt, vt, qt = k[:, t, :, None], v[:, t, :, None], q[:, t, :, None]
            at = alpha[:, t, None, None] if alpha is not None else 1.0
            abar = abar * at
            err = (abar * w) @ kt - vt                       # e = dl/dy at the chunk's state
            a = at * a - eta[:, t, None, None] * err @ kt.transpose(1, 2)
            ys.append((a @ qt)[..., 0])
        w = a
    return torch.stack(ys, 1)


def check(tool, model, chunk, form, gen):
    """form minibatch: the chunk rule above; exact: the per-token rule (chunk 1)."""
    inputs = {
        "q": torch.randn(N, T, DK, generator=gen, dtype=torch.float64) * 0.6,
        "k": torch.nn.functional.normalize(torch.randn(N, T, DK, generator=gen,
                                                       dtype=torch.float64), dim=-1),
        "v": torch.randn(N, T, DV, generator=gen, dtype=torch.float64),
        "eta": torch.rand(N, T, generator=gen, dtype=torch.float64) * 0.7 + 0.2,
        "w0.0": torch.randn(DV, DK, generator=gen, dtype=torch.float64) * 0.3,
        "r": torch.randn(N, T, DV, generator=gen, dtype=torch.float64),
    }
    gated = model == "gated-deltanet"
    if gated:
        inputs["alpha"] = torch.rand(N, T, generator=gen, dtype=torch.float64) * 0.29 + 0.7
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        save(src, inputs)
        subprocess.run([tool, "--in", src, "--out", dst, "--model", model,
                        "--chunk", str(chunk), "--set", "form=" + form], check=True,
                       stdout=subprocess.DEVNULL)
        out = load(dst)
    x = {n: t.clone().requires_grad_(n != "r") for n, t in inputs.items()}
    y = layer(x["q"], x["k"], x["v"], x["eta"], x.get("alpha"), x["w0.0"],
              chunk if form == "minibatch" else 1)
    (y * x["r"]).sum().backward()
    worst = (y.detach() - out["y"]).abs().max().item()
    names = ["y"]
    for n, t in x.items():
        if n == "r":
            continue
        worst = max(worst, (t.grad - out["grad." + n]).abs().max().item())
        names.append("grad." + n)
    ok = worst <= 1e-12
    print(f"{'ok  ' if ok else 'FAIL'}  {model:15s} chunk {chunk} {form:9s}  max |torch - miras| "
          f"{worst:.1e} over {', '.join(names)}")
    return ok


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else "build/tools/miras-layer"
    gen = torch.Generator().manual_seed(0)
    runs = ((1, "auto"), (2, "minibatch"), (2, "exact"), (3, "exact"))
    results = [check(tool, m, b, f, gen) for m in ("deltanet", "gated-deltanet") for b, f in runs]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
