#!/usr/bin/env python3
"""Titans (the `titans` preset) in idiomatic PyTorch eager, the peer of
`miras-bench train` and `miras-bench layer` for a side-by-side figure.

    /usr/bin/python3 tools/bench/bench_torch_titans.py --case train [--threads 2] [--reps 3]
    /usr/bin/python3 tools/bench/bench_torch_titans.py --case layer --chunk 16 [--seq-len 512]

The memory (MIRAS §"MIRAS's Variants"; Titans §3.1, the deep memory): per head
M_W(x) = x + LN(W_1 gelu(W_2 x)), W_1 [d, 4d], W_2 [4d, d], LN without affine
(eps 1e-5), exact erf GELU; the ℓ2 attentional bias ℓ_t(W) = ½‖M_W(k_t) − v_t‖²;
GD with momentum (Titans Eq. 10, the surprise S) and the ℓ2 retention gate
(Titans Eq. 13, the forget gate written as the kept fraction α):

    S_t = μ_t S_{t−1} − η_t ∇ℓ_t(W'),   W_t = α_t W_{t−1} + S_t,   y_t = M_{W_t}(q_t)

read after write. Chunk b (Titans §3.2, "Parallelize the Long-term Memory
Training"): every token of a chunk takes its gradient at W' = the state the
previous chunk left; the momentum and decay scans run inside the chunk; b = 1
is the per-token recurrence.

The inner gradient is written in closed form, not with
torch.autograd.grad(create_graph=True): the chunk needs each token's gradient
apart (the scans weight them by η_s and the decays), and for the MLP each is
rank one per layer, ∂ℓ_s/∂W_l = δ_{l,s} u_{l,s}ᵀ; autograd gives the sum over the
chunk, and one weight copy per token (or functorch's vmap) would materialise
b gradients of every weight. With the factors, the chunk runs in TTT's dual
form ("Learning to (Learn at Test Time)", §2.7): no per-token weight is formed,
each read is W' x plus a [b, b] causal mix of the factors (below). The outer
loop (the model's parameters, q, k, v, the gates, W_0) is torch.autograd
through all of it. tests/crosscheck_titans_torch.py checks titans_layer against
build/tools/miras-layer and against a per-token loop that takes the inner
gradient with autograd.grad.

The block and the LM are the `miras-bench train` model (block.c, lm.c): per
layer x + mixer(RMSNorm(x)), x + SwiGLU(RMSNorm(x)); the mixer
q = ℓ2norm(SiLU(conv(x W_q))), k likewise, v = SiLU(conv(x W_v)) (causal
depthwise conv, kernel 4), the gates η = σ(·), α = 1 − σ(·) = σ(−·), μ = σ(·)
from a rank-32 projection per head, y = (RMSNorm(o) ⊙ w ⊙ SiLU(x W_g)) W_out;
tied embeddings, vocabulary 256, d_model 128, 4 layers, 4 heads, SwiGLU 384,
B = 16, T = 256, chunk 16, AdamW lr 1e-3, weight decay 0.1 on the matrices.

OPENBLAS_NUM_THREADS=1 and OMP_WAIT_POLICY=passive are set before torch loads,
as tools/bench/bench_torch.py does (see there why).
"""
import argparse, math, os, resource, statistics, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import torch  # noqa: E402 (after the environment)
import torch.nn.functional as F  # noqa: E402

LN_EPS = 1e-5      # the memory's LayerNorm
NORM_EPS = 1e-6    # every RMSNorm and the ℓ2 normalisation of q and k
ETA0, ALPHA0, MU0 = 0.005, 0.998, 0.5  # the preset's initial gate levels


def layer_norm(a):
    """LN without affine over the last axis, and 1/√(var + eps) (for the inner backward)."""
    mean = a.mean(-1, keepdim=True)
    r = torch.rsqrt(a.var(-1, unbiased=False, keepdim=True) + LN_EPS)
    return (a - mean) * r, r


class Gelu(torch.autograd.Function):
    """F.gelu (exact erf) whose backward gets a contiguous incoming gradient. PyTorch 1.13's
    float32 gelu_backward on the CPU returns garbage when that gradient is strided (here the
    gradient of a transposed operand of a product: u in U Uᵀ); float64 and silu, sigmoid, erf
    and exp are unaffected. .contiguous() is free when it already is."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return F.gelu(z)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(g.contiguous(), z)


gelu = Gelu.apply


def gelu_grad(z):
    """gelu'(z) = Φ(z) + z φ(z) for the exact erf GELU."""
    return 0.5 * (1 + torch.erf(z * math.sqrt(0.5))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def decay_matrix(a):
    """P[t, s] = Π_{s<i≤t} a_i for s ≤ t, 0 above the diagonal; a [N, n] → [N, n, n].
    A cumulative product down each column of a masked copy: no logs, so a gate at 0 is exact."""
    n = a.shape[1]
    below = torch.ones(n, n, dtype=torch.bool).tril(-1)          # i > s
    x = torch.where(below, a[:, :, None], torch.ones((), dtype=a.dtype))
    return x.cumprod(1) * torch.ones(n, n, dtype=a.dtype).tril()


def titans_layer(q, k, v, eta, alpha, mu, w1, w2, chunk):
    """y [N, T, d] of the Titans memory over q, k, v [N, T, d] with the gates η, α, μ [N, T]
    and W_0 = (w1 [d, h], w2 [h, d]), shared or with [N] in front, in chunks of `chunk`.

    Per chunk of n tokens from the state (A, S) the previous chunk left, every token s takes
    its gradient at W' = A (MIRAS "Parallelizable Training"; Titans §3.2). The gradient of
    ℓ_s = ½‖k_s + LN(a_s) − v_s‖², a_s = W_1 u_s, u_s = gelu(z_s), z_s = W_2 k_s, is rank one
    per layer:
        e_s = k_s + LN(a_s) − v_s,   δ1_s = r_s (e_s − mean(e_s) − â_s mean(e_s ⊙ â_s))
        δ2_s = gelu'(z_s) ⊙ W_1ᵀ δ1_s,   ∇_{W_1} ℓ_s = δ1_s u_sᵀ,   ∇_{W_2} ℓ_s = δ2_s k_sᵀ
    (â_s = LN(a_s), r_s = 1/√(var(a_s) + eps)). Unrolling the two scans inside the chunk,
        A_t = ā_t A + m̄_t S − Σ_{s≤t} C[t, s] ∇ℓ_s,   S_t = μ̄_t S − Σ_{s≤t} P_μ[t, s] η_s ∇ℓ_s
        C[t, s] = η_s Σ_{s≤j≤t} P_α[t, j] P_μ[j, s],   ā_t = Π_{i≤t} α_i,   μ̄_t = Π_{i≤t} μ_i,
        m̄_t = Σ_{j≤t} P_α[t, j] μ̄_j   (P from decay_matrix),
    so A_t x_t for the read needs no A_t: A x_t scaled, plus (C ⊙ X Uᵀ) Δ (TTT's dual form)."""
    N = q.shape[0]
    if w1.dim() == 2:
        w1, w2 = w1.expand(N, *w1.shape), w2.expand(N, *w2.shape)
    a1, a2 = w1, w2                                   # A: W_1 [N, d, h], W_2 [N, h, d]
    s1, s2 = torch.zeros_like(a1), torch.zeros_like(a2)  # S_0 = 0
    ys = []
    # split once (slicing per chunk would make each chunk's backward fill a [N, T, …] gradient)
    for qc, kc, vc, et, al, m in zip(*(x.split(chunk, 1) for x in (q, k, v, eta, alpha, mu))):
        # the chunk's gradients at W' = A, as factors
        z = kc @ a2.transpose(1, 2)                   # [N, n, h]
        u = gelu(z)
        ahat, r = layer_norm(u @ a1.transpose(1, 2))  # [N, n, d]
        e = kc + ahat - vc
        d1 = r * (e - e.mean(-1, keepdim=True) - ahat * (e * ahat).mean(-1, keepdim=True))
        d2 = gelu_grad(z) * (d1 @ a1)                 # [N, n, h]
        # the scans' coefficients (one token: C = η, ā = α, m̄ = μ̄ = μ, P = 1)
        if al.shape[1] == 1:
            c, p_m, abar, mbar = et[..., None], None, al[..., None], m
            mix = m[..., None]
        else:
            p_a, p_m = decay_matrix(al), decay_matrix(m)
            c = (p_a @ p_m) * et[:, None, :]          # C [N, n, n]
            abar = al.cumprod(1)[..., None]           # [N, n, 1]
            mbar = m.cumprod(1)
            mix = p_a @ mbar[..., None]               # m̄ [N, n, 1]
        # the read, y_t = q_t + LN(A_{1,t} gelu(A_{2,t} q_t))
        zq = abar * (qc @ a2.transpose(1, 2)) + mix * (qc @ s2.transpose(1, 2)) \
            - (c * (qc @ kc.transpose(1, 2))) @ d2
        uq = gelu(zq)
        aq = abar * (uq @ a1.transpose(1, 2)) + mix * (uq @ s1.transpose(1, 2)) \
            - (c * (uq @ u.transpose(1, 2))) @ d1
        ys.append(qc + layer_norm(aq)[0])
        # the state the chunk leaves: row n − 1 of the sums above
        ce = c[:, -1, :, None]                                           # [N, n, 1]
        se = (et if p_m is None else p_m[:, -1, :] * et)[..., None]
        ae, me, we = abar[:, -1, :, None], mix[:, -1, :, None], mbar[:, -1, None, None]
        g1a, g2a = (ce * d1).transpose(1, 2) @ u, (ce * d2).transpose(1, 2) @ kc
        g1s, g2s = (se * d1).transpose(1, 2) @ u, (se * d2).transpose(1, 2) @ kc
        a1, a2, s1, s2 = (ae * a1 + me * s1 - g1a, ae * a2 + me * s2 - g2a,
                          we * s1 - g1s, we * s2 - g2s)
    return torch.cat(ys, 1)


def memory_init(d, heads=None, dtype=torch.float32, expansion=4):
    """W_0 ~ N(0, 1/fan_in) per layer (mlp.c's init): W_1 [d, h], W_2 [h, d], [heads] in front."""
    h = expansion * d
    lead = () if heads is None else (heads,)
    return (torch.randn(*lead, d, h, dtype=dtype) / math.sqrt(h),
            torch.randn(*lead, h, d, dtype=dtype) / math.sqrt(d))


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def linear(d_in, d_out, std, bias=False):
    lin = torch.nn.Linear(d_in, d_out, bias=bias)
    torch.nn.init.normal_(lin.weight, std=std)
    return lin


def causal_conv(channels, kernel):
    """Depthwise causal conv; taps N(0, 0.1²) but the current token's, 1 (near the identity)."""
    conv = torch.nn.Conv1d(channels, channels, kernel, groups=channels, bias=False, padding=kernel - 1)
    with torch.no_grad():
        conv.weight.normal_(0, 0.1)
        conv.weight[:, :, -1] = 1
    return conv


class Gate(torch.nn.Module):
    """One value per head and token: act(x D U + b), rank r, b where act gives `level`."""

    def __init__(self, d_model, heads, rank, level, kind):
        super().__init__()
        self.kind = kind
        self.down = linear(d_model, rank, 1 / math.sqrt(d_model))
        self.up = linear(rank, heads, 0.1 / math.sqrt(rank), bias=True)
        # σ(b) = level (η, μ); α = 1 − σ(b) = level
        logit = math.log(level / (1 - level))
        torch.nn.init.constant_(self.up.bias, -logit if kind == "alpha" else logit)

    def forward(self, x):
        pre = self.up(self.down(x))
        return torch.sigmoid(-pre if self.kind == "alpha" else pre)


class TitansMixer(torch.nn.Module):
    def __init__(self, d_model, heads, chunk, out_scale, gate_rank=32, conv_kernel=4):
        super().__init__()
        self.heads, self.hd, self.chunk = heads, d_model // heads, chunk
        inner, sd = heads * self.hd, 1 / math.sqrt(d_model)
        self.q_proj, self.k_proj, self.v_proj = (linear(d_model, inner, sd) for _ in range(3))
        self.q_conv, self.k_conv, self.v_conv = (causal_conv(inner, conv_kernel) for _ in range(3))
        self.eta = Gate(d_model, heads, gate_rank, ETA0, "eta")
        self.alpha = Gate(d_model, heads, gate_rank, ALPHA0, "alpha")
        self.mu = Gate(d_model, heads, gate_rank, MU0, "mu")
        self.out_norm = RMSNorm(self.hd)
        self.gate_proj = linear(d_model, inner, sd)
        self.out_proj = linear(inner, d_model, out_scale / math.sqrt(inner))
        w1, w2 = memory_init(self.hd, heads)
        self.w0_1, self.w0_2 = torch.nn.Parameter(w1), torch.nn.Parameter(w2)

    def branch(self, x, proj, conv):
        T = x.shape[1]
        return F.silu(conv(proj(x).transpose(1, 2))[..., :T].transpose(1, 2))

    def heads_of(self, t):  # [B, T, H·c] → [B·H, T, c]; a gate [B, T, H] → [B·H, T]
        B, T = t.shape[:2]
        return t.view(B, T, self.heads, -1).transpose(1, 2).reshape(B * self.heads, T, -1).squeeze(-1)

    def forward(self, x):
        B, T, _ = x.shape
        l2 = lambda t: t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + NORM_EPS)  # noqa: E731
        q = l2(self.heads_of(self.branch(x, self.q_proj, self.q_conv)))
        k = l2(self.heads_of(self.branch(x, self.k_proj, self.k_conv)))
        v = self.heads_of(self.branch(x, self.v_proj, self.v_conv))
        eta, alpha, mu = (self.heads_of(g(x)) for g in (self.eta, self.alpha, self.mu))
        w1 = self.w0_1.expand(B, *self.w0_1.shape).reshape(B * self.heads, *self.w0_1.shape[1:])
        w2 = self.w0_2.expand(B, *self.w0_2.shape).reshape(B * self.heads, *self.w0_2.shape[1:])
        o = self.out_norm(titans_layer(q, k, v, eta, alpha, mu, w1, w2, self.chunk))
        o = o.view(B, self.heads, T, self.hd).transpose(1, 2).reshape(B, T, -1)
        return self.out_proj(o * F.silu(self.gate_proj(x)))


class Block(torch.nn.Module):
    def __init__(self, d_model, heads, hidden, chunk, out_scale):
        super().__init__()
        self.mixer_norm, self.mlp_norm = RMSNorm(d_model), RMSNorm(d_model)
        self.mixer = TitansMixer(d_model, heads, chunk, out_scale)
        self.w_gate = linear(d_model, hidden, 1 / math.sqrt(d_model))
        self.w_up = linear(d_model, hidden, 1 / math.sqrt(d_model))
        self.w_down = linear(hidden, d_model, out_scale / math.sqrt(hidden))

    def forward(self, x):
        h = x + self.mixer(self.mixer_norm(x))
        u = self.mlp_norm(h)
        return h + self.w_down(F.silu(self.w_gate(u)) * self.w_up(u))


class LM(torch.nn.Module):
    def __init__(self, vocab=256, d_model=128, layers=4, heads=4, hidden=384, chunk=16):
        super().__init__()
        out_scale = 1 / math.sqrt(2 * layers)  # GPT-2's scaling of the residual branches
        self.emb = torch.nn.Embedding(vocab, d_model)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = torch.nn.ModuleList(Block(d_model, heads, hidden, chunk, out_scale)
                                          for _ in range(layers))
        self.final_norm = RMSNorm(d_model)

    def forward(self, tok, tgt):
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x)
        logits = self.final_norm(x) @ self.emb.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def adamw(model, lr=1e-3, weight_decay=0.1):
    """AdamW with weight decay on the matrices (every parameter of rank ≥ 2), as miras-bench."""
    ps = list(model.parameters())
    return torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": weight_decay},
                              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}], lr=lr)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def case_train(a):
    B, T = 16, a.seq_len or 256
    data_path = a.data or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "data", "tinyshakespeare.txt")
    text = open(data_path, "rb").read() if os.path.exists(data_path) else bytes(range(256)) * 4096
    data = torch.tensor(list(text[: 1 << 20]), dtype=torch.long)
    model = LM(chunk=a.chunk or 16)
    opt = adamw(model)
    n_params = sum(p.numel() for p in model.parameters())

    def step():
        starts = torch.randint(0, len(data) - T - 1, (B,))
        tok = torch.stack([data[s: s + T] for s in starts])
        tgt = torch.stack([data[s + 1: s + T + 1] for s in starts])
        opt.zero_grad(set_to_none=True)
        loss = model(tok, tgt)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(2):
        step()
    ms, cpu = [], []
    for _ in range(a.reps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    print(f"torch train.titans chunk {a.chunk or 16} threads {a.threads} B {B} T {T}: median "
          f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}; CPU {statistics.median(cpu):.1f} ms), "
          f"peak RSS {peak_rss_mb():.0f} MB, loss {loss:.3f}, {n_params} parameters, "
          f"torch {torch.__version__}")


def case_layer(a):
    B, H, D, T = 4, 4, 32, a.seq_len or 512
    N, chunk = B * H, a.chunk or 16
    torch.manual_seed(7)
    # bench_layer.c's inputs: unit q and k, gates σ(logit(level) + z), z ~ N(0, 0.5²)
    q = F.normalize(torch.randn(N, T, D), dim=-1).requires_grad_()
    k = F.normalize(torch.randn(N, T, D), dim=-1).requires_grad_()
    v = torch.randn(N, T, D, requires_grad=True)
    r = torch.randn(N, T, D)
    gates = [torch.sigmoid(0.5 * torch.randn(N, T) + math.log(x / (1 - x))).requires_grad_()
             for x in (ETA0, ALPHA0, MU0)]
    w1, w2 = (w.requires_grad_() for w in memory_init(D))
    leaves = [q, k, v, *gates, w1, w2]
    ms, cpu = [], []
    for i in range(a.reps + 1):  # one warm-up
        for x in leaves:
            x.grad = None
        t0, c0 = time.perf_counter(), time.process_time()
        (titans_layer(q, k, v, *gates, w1, w2, chunk) * r).sum().backward()
        if i:
            ms.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
    assert all(x.grad is not None for x in leaves)
    print(f"torch layer.titans.b{chunk} threads {a.threads} B {B} H {H} hd {D} T {T}: median "
          f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}; CPU {statistics.median(cpu):.1f} ms), "
          f"peak RSS {peak_rss_mb():.0f} MB, torch {torch.__version__}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("train", "layer"), required=True)
    p.add_argument("--chunk", type=int, default=0, help="tokens per chunk (default 16)")
    p.add_argument("--seq-len", type=int, default=0, help="T (default: train 256, layer 512)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--data", default=None, help="train: the text (default data/tinyshakespeare.txt)")
    a = p.parse_args()
    for name in ("chunk", "seq_len"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.threads < 1 or a.reps < 1:
        p.error("--threads and --reps must be >= 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    (case_train if a.case == "train" else case_layer)(a)


if __name__ == "__main__":
    main()
