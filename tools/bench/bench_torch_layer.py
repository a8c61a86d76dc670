#!/usr/bin/env python3
"""The `miras-bench layer` matrix-memory cases in idiomatic PyTorch eager, for a
side-by-side figure: B=4, H=4, head dim 32, T=512, forward + backward of <y, r>:

    gated-deltanet    S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T
    linear-attention  S_t = S_{t-1} + v_t k_t^T
    y_t = S_t q_t (read after write), q and k l2-normalised

--chunk 1 (the default) writes the recurrence as a loop over t. --chunk C > 1
runs the exact chunkwise form a PyTorch user would write for C = 64: the WY /
UT-transform form of "Parallelizing Linear Transformers with the Delta Rule
over Sequence Length" (Yang et al.) with the gate's decay as in "Gated
Delta Networks: Improving Mamba2 with Delta Rule" (Yang, Kautz, Hatamizadeh):
the intra-chunk parts of every chunk in one batch, then a loop over the
chunks carrying the state (see `chunked`). T need not be a multiple of C.

Prints the median wall ms over --reps after one warm-up (and the median CPU
ms, user + system, of the process) and the peak RSS.

    /usr/bin/python3 tools/bench/bench_torch_layer.py --threads 2
    /usr/bin/python3 tools/bench/bench_torch_layer.py --chunk 64 --threads 2

--check compares the chunked form with the loop in float64 (y and the
gradients of q, k, v, eta, alpha; max abs difference <= 1e-10) at several
chunk sizes and lengths, T not a multiple of C among them; exit status 1 when
a case differs.

OPENBLAS_NUM_THREADS=1 and OMP_WAIT_POLICY=passive are set before torch loads,
as tools/bench/bench_torch.py does (see there why).
"""
import argparse, os, resource, statistics, sys, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import torch  # noqa: E402 (after the environment)
import torch.nn.functional as F  # noqa: E402

VARIANTS = ("gated-deltanet", "linear-attention")


def loop(variant, q, k, v, eta, alpha):
    """The per-token recurrence; q, k, v [N, T, D], eta and alpha [N, T]."""
    N, T, D = q.shape
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    S = q.new_zeros(N, D, D)
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


def chunked(variant, q, k, v, eta, alpha, C):
    """The same recurrence, C tokens at a time.

    Within a chunk starting from state S_0, with g_i = sum_{j<=i} log a_j
    (the decay's cumulative log product), gamma_i = exp(g_i) and the written
    values x_i = b_i (v_i - a_i S_{i-1} k_i), the state is
        S_i = gamma_i S_0 + sum_{j<=i} exp(g_i - g_j) x_j k_j^T,
    so the rows x_i of X solve the unit lower-triangular system
        (I + strict_tril(diag(b) K K^T * exp(g_i - g_j))) X = diag(b) V - diag(b gamma) K S_0^T,
    i.e. X = U - W S_0^T with U and W solved once per chunk from b V and
    b gamma K (the UT transform); then, with P = tril(Q K^T * exp(g_i - g_j))
    (the diagonal included: the read follows the write),
        Y = diag(gamma) Q S_0^T + P X,
        S_C = gamma_C S_0 + X^T diag(exp(g_C - g_j)) K.
    Linear attention is the case without the delta term and decay: X = V,
    P = tril(Q K^T), S_C = S_0 + V^T K.
    """
    N, T, D = q.shape
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    pad = -T % C
    n = (T + pad) // C
    # padded tokens write nothing (k = 0, b = 0) and keep the state (log a = 0)
    q, k, v = (F.pad(x, (0, 0, 0, pad)).view(N, n, C, D) for x in (q, k, v))
    ones = torch.ones(C, C, dtype=torch.bool, device=q.device)
    incl, strict = ones.tril(), ones.tril(-1)
    if variant == "gated-deltanet":
        b = F.pad(eta, (0, pad)).view(N, n, C, 1)
        g = F.pad(alpha.log(), (0, pad)).view(N, n, C).cumsum(-1)
        # exp(g_i - g_j) for j <= i; above the diagonal g_i - g_j > 0 could
        # overflow, so it is masked to -inf before exp (0, and no gradient)
        ratio = (g[..., :, None] - g[..., None, :]).masked_fill(~incl, float("-inf")).exp()
        A = (b * k @ k.transpose(-1, -2) * ratio).masked_fill(~strict, 0)
        eye = torch.eye(C, dtype=q.dtype, device=q.device)
        U = torch.linalg.solve_triangular(eye + A, b * v, upper=False, unitriangular=True)
        gamma = g.exp()[..., None]
        W = torch.linalg.solve_triangular(eye + A, b * gamma * k, upper=False,
                                          unitriangular=True)
        P = q @ k.transpose(-1, -2) * ratio
        qg = gamma * q
        kd = (g[..., -1:, None] - g[..., None]).exp() * k  # exp(g_C - g_j) k_j
        decay = gamma[:, :, -1:, :]                         # gamma_C, [N, n, 1, 1]
    else:
        U, W, P, qg, kd = v, None, (q @ k.transpose(-1, -2)).masked_fill(~incl, 0), q, k
    S = q.new_zeros(N, D, D)
    ys = []
    # unbind, not x[:, c] in the loop: each select's backward would write a
    # zero-filled gradient of the whole tensor
    U, P, qg, kd = (x.unbind(1) for x in (U, P, qg, kd))
    W, decay = (None, None) if W is None else (W.unbind(1), decay.unbind(1))
    for c in range(n):
        St = S.transpose(1, 2)
        X = U[c] if W is None else U[c] - W[c] @ St
        ys.append(qg[c] @ St + P[c] @ X)
        S = (S if W is None else decay[c] * S) + X.transpose(1, 2) @ kd[c]
    return torch.cat(ys, 1)[:, :T]


def inputs(N, T, D, dtype, alpha_shift=3.0, seed=1):
    """q, k, v ~ N(0, 1), eta = sigmoid(N(0, 1)), alpha = sigmoid(N(alpha_shift, 1))
    (0.93 on average at the default shift) and r for the loss <y, r>."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(N, T, D, generator=gen, dtype=dtype).requires_grad_()
               for _ in range(3))
    eta = torch.sigmoid(torch.randn(N, T, generator=gen, dtype=dtype)).requires_grad_()
    alpha = torch.sigmoid(torch.randn(N, T, generator=gen, dtype=dtype) + alpha_shift)
    alpha.requires_grad_()
    r = torch.randn(N, T, D, generator=gen, dtype=dtype)
    return (q, k, v, eta, alpha), r


def layer(variant, C, xs):
    return loop(variant, *xs) if C == 1 else chunked(variant, *xs, C)


def check(chunk):
    """The chunked form against the loop in float64; True when every case agrees."""
    names = ("y", "grad.q", "grad.k", "grad.v", "grad.eta", "grad.alpha")
    # alpha_shift 0: alpha from 0.05 to 0.95, strong decay within a chunk
    small = [(3, 5, T, C, shift) for T in (1, 7, 16, 23) for C in (2, 3, 4, 8)
             for shift in (0.0, 3.0)]
    bench = (16, 32, 200, chunk if chunk > 1 else 64, 3.0)
    passed = failed = 0
    for variant in VARIANTS:
        cases = small if variant == "gated-deltanet" else [c for c in small if c[4]]
        for N, D, T, C, shift in cases + [bench]:
            xs, r = inputs(N, T, D, torch.float64, shift)
            got = []
            for f in (lambda: loop(variant, *xs), lambda: chunked(variant, *xs, C)):
                for x in xs:
                    x.grad = None
                y = f()
                (y * r).sum().backward()
                got.append([y.detach()] + [x.grad if x.grad is not None
                                           else torch.zeros_like(x) for x in xs])
            diffs = [(a - b).abs().max().item() for a, b in zip(*got)]
            worst = max(diffs)
            good = worst <= 1e-10
            passed, failed = passed + good, failed + (not good)
            largest = max(a.abs().max().item() for a in got[0])
            print(f"{'ok  ' if good else 'FAIL'}  {variant} N {N} D {D} T {T} chunk {C} "
                  f"alpha_shift {shift:g}  "
                  f"max |chunked - loop| {worst:.1e} ({names[diffs.index(worst)]}; "
                  f"largest entry {largest:.3g})")
    print(f"{passed} passed, {failed} failed")
    return failed == 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--chunk", type=int, default=1,
                   help="tokens a chunk: 1 the per-token loop, more the chunkwise form")
    p.add_argument("--check", action="store_true",
                   help="compare the chunked form with the loop in float64 and exit")
    a = p.parse_args()
    if a.chunk < 1 or a.seq_len < 1 or a.reps < 1 or a.threads < 1:
        p.error("--chunk, --seq-len, --reps and --threads want positive integers")
    torch.set_num_threads(a.threads)
    if a.check:
        sys.exit(0 if check(a.chunk) else 1)
    B, H, D, T = 4, 4, 32, a.seq_len
    for variant in VARIANTS:
        xs, r = inputs(B * H, T, D, torch.float32)
        times, cpu = [], []
        for i in range(a.reps + 1):  # one warm-up
            for x in xs:
                x.grad = None
            t0, c0 = time.perf_counter(), time.process_time()
            (layer(variant, a.chunk, xs) * r).sum().backward()
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
                cpu.append((time.process_time() - c0) * 1e3)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"torch layer.{variant}.b{a.chunk}  threads {a.threads}  T {T}  median "
              f"{statistics.median(times):.1f} ms  (min {min(times):.1f}; CPU "
              f"{statistics.median(cpu):.1f} ms)  peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()
