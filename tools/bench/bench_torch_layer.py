#!/usr/bin/env python3
"""The `miras-bench layer` matrix-memory cases at chunk 1 in idiomatic PyTorch
eager, for a side-by-side figure: B=4, H=4, head dim 32, T=512, forward +
backward of <y, r>, the per-token recurrence written as a loop over t:

    gated-deltanet    S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T
    linear-attention  S_t = S_{t-1} + v_t k_t^T
    y_t = S_t q_t (read after write), q and k l2-normalised

Prints the median ms over --reps after one warm-up and the peak RSS.

    /usr/bin/python3 tools/bench/bench_torch_layer.py --threads 2

OPENBLAS_NUM_THREADS=1 and OMP_WAIT_POLICY=passive are set before torch loads,
as tools/bench/bench_torch.py does (see there why).
"""
import argparse, os, resource, statistics, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import torch  # noqa: E402 (after the environment)
import torch.nn.functional as F  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=3)
p.add_argument("--seq-len", type=int, default=512)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
B, H, D, T = 4, 4, 32, a.seq_len
N = B * H


def layer(variant, q, k, v, eta, alpha):
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    S = torch.zeros(N, D, D)
    ys = []
    for t in range(T):
        kt, vt = k[:, t, :, None], v[:, t, :, None]
        if variant == "gated-deltanet":
            b = eta[:, t, None, None]
            S = alpha[:, t, None, None] * (S - b * (S @ kt) @ kt.transpose(1, 2)) \
                + b * vt @ kt.transpose(1, 2)
        else:
            S = S + vt @ kt.transpose(1, 2)
        ys.append((S @ q[:, t, :, None])[..., 0])
    return torch.stack(ys, 1)


for variant in ("gated-deltanet", "linear-attention"):
    q, k, v = (torch.randn(N, T, D, requires_grad=True) for _ in range(3))
    eta = torch.sigmoid(torch.randn(N, T)).requires_grad_()
    alpha = torch.sigmoid(torch.randn(N, T) + 3).requires_grad_()
    r = torch.randn(N, T, D)
    times = []
    for i in range(a.reps + 1):
        t0 = time.perf_counter()
        (layer(variant, q, k, v, eta, alpha) * r).sum().backward()
        if i:
            times.append((time.perf_counter() - t0) * 1e3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch layer.{variant}.b1  threads {a.threads}  T {T}  median "
          f"{statistics.median(times):.1f} ms  (min {min(times):.1f})  peak RSS {rss:.0f} MB")
