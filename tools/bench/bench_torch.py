#!/usr/bin/env python3
"""The `miras-bench train` transformer case in idiomatic PyTorch eager, for a
side-by-side figure: byte vocabulary 256, d_model 128, 4 layers, 4 heads (head
dim 32), SwiGLU 384, RMSNorm, RoPE, tied embeddings, B=16, T=256, AdamW lr 1e-3
wd 0.1. Prints the median ms per optimizer step over --reps after two warm-ups
and the process's peak RSS.

    /usr/bin/python3 tools/bench/bench_torch.py --threads 2 [--data data/tinyshakespeare.txt]

Debian's PyTorch calls a threaded OpenBLAS from its own threads: unless
OPENBLAS_NUM_THREADS=1 the two oversubscribe the cores (a step took 1.0-6.5 s
instead of 0.42 s here), so the script sets it, and OMP_WAIT_POLICY=passive as
miras-bench runs, before torch loads.
"""
import argparse, math, os, resource, statistics, time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import torch  # noqa: E402 (after the environment)
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--data", default=None)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
V, D, L, H, FF, B, T = 256, 128, 4, 4, 384, 16, 256
hd = D // H


class RMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g


inv = 10000.0 ** (-torch.arange(0, hd, 2).float() / hd)
ang = torch.arange(T).float()[:, None] * inv[None, :]
cos, sin = ang.cos(), ang.sin()


def rope(x):  # x [B, H, T, hd], pairs (i, i + hd/2)
    x0, x1 = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(), RMSNorm()
        self.qkv = torch.nn.Linear(D, 3 * D, bias=False)
        self.o = torch.nn.Linear(D, D, bias=False)
        self.gate = torch.nn.Linear(D, FF, bias=False)
        self.up = torch.nn.Linear(D, FF, bias=False)
        self.down = torch.nn.Linear(FF, D, bias=False)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
        s = rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(hd) + mask
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        h = x + self.o(y)
        u = self.n2(h)
        return h + self.down(F.silu(self.gate(u)) * self.up(u))


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm()

    def forward(self, tok, tgt, mask):
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x, mask)
        logits = self.norm(x) @ self.emb.weight.t()
        return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


text = open(a.data, "rb").read() if a.data else bytes(range(256)) * 4096
data = torch.tensor(list(text[: 1 << 20]), dtype=torch.long)
model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
mask = torch.full((T, T), float("-inf")).triu(1)


def step(i):
    starts = torch.randint(0, len(data) - T - 1, (B,))
    tok = torch.stack([data[s : s + T] for s in starts])
    tgt = torch.stack([data[s + 1 : s + T + 1] for s in starts])
    opt.zero_grad(set_to_none=True)
    loss = model(tok, tgt, mask)
    loss.backward()
    opt.step()
    return loss.item()


for i in range(2):
    step(i)
ms = []
for i in range(a.reps):
    t0 = time.perf_counter()
    loss = step(i)
    ms.append((time.perf_counter() - t0) * 1e3)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"torch.transformer threads {a.threads}: median {statistics.median(ms):.1f} ms "
      f"(min {min(ms):.1f}), peak RSS {rss:.0f} MB, loss {loss:.3f}, torch {torch.__version__}")
