#!/usr/bin/env python3
"""Cross-checks the PyTorch peer of Titans (tools/bench/bench_torch_titans.py,
titans_layer) against miras-layer --model titans, and both against a
per-token loop written here.

The rule (the titans preset; MIRAS "Parallelizable Training", Titans §3.2):
M_W(x) = x + LN(W_1 gelu(W_2 x)), ℓ_t(W) = ½‖M_W(k_t) − v_t‖²,

    S_t = μ_t S_{t−1} − η_t ∇ℓ_t(W'),   W_t = α_t W_{t−1} + S_t,   y_t = M_{W_t}(q_t)

with W' the state the previous chunk of b tokens left (b = 1: W_{t−1}). The
loop below keeps every W_t and S_t, takes each token's inner gradient with
torch.autograd.grad(create_graph=True) (the peer writes it in closed form and
never forms W_t: TTT's dual form) and reads after the write.

float64, N = 2 sequences, T = 7 tokens, d = 4 (hidden 16), chunks 1, 2 and 3
(3 does not divide 7). Writes the inputs to a safetensors file, runs the tool,
compares y and the gradients of sum(y ⊙ r) with respect to q, k, v, η, α, μ,
W_1 and W_2 (shared by the sequences): peer against miras and the loop
against miras, each to 1e-10.

The peer in float32 against itself in float64 (N = 4, T = 40, d = 8, chunk
16): each of y and the gradients to 1e-4 of its largest entry. (Debian's
PyTorch 1.13 has computed float32 GELU gradients wrongly for a strided
incoming gradient; float64 never showed it.)

Given miras-train and miras-eval, also the whole language model: a small
titans LM (d_model 32, 2 layers, 2 heads, chunk 5 over windows of 24 bytes,
so the last chunk is short) trained 20 steps by miras-train, its checkpoint
loaded into the peer's LM (bench_torch_titans.LM, float64) and the validation
loss of both compared. miras computes in float32 (the checkpoint's dtype), so
this one agrees to float32's rounding, 1e-5 nats; the peer's loss at chunk 1
and with the memory's inner loop switched off (η = 0) are printed beside it
to show how far another rule moves it.

  /usr/bin/python3 tests/crosscheck_titans_torch.py [build/tools/miras-layer
                                                     [build/tools/miras-train build/tools/miras-eval]]
"""
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from crosscheck_layer_torch import load, save  # noqa: E402 (the safetensors reader and writer)

N, T, D = 2, 7, 4
TOL = 1e-10


def peer():
    path = os.path.join(HERE, "..", "tools", "bench", "bench_torch_titans.py")
    spec = importlib.util.spec_from_file_location("bench_torch_titans", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def memory(w1, w2, x):
    """M_W(x) = x + LN(W_1 gelu(W_2 x)) for W [N, out, in] and x [N, in]."""
    a = (w1 @ F.gelu(w2 @ x[..., None]))[..., 0]
    return x + F.layer_norm(a, a.shape[-1:], eps=1e-5)


def loop(q, k, v, eta, alpha, mu, w1, w2, chunk):
    """The rule token by token, every state kept."""
    a = [w1.expand(N, *w1.shape), w2.expand(N, *w2.shape)]
    s = [torch.zeros_like(a[0]), torch.zeros_like(a[1])]
    ys = []
    for t in range(T):
        if t % chunk == 0:
            at = list(a)  # W': where this chunk's gradients are taken
        loss = 0.5 * (memory(at[0], at[1], k[:, t]) - v[:, t]).pow(2).sum()
        g = torch.autograd.grad(loss, at, create_graph=True)
        for i in range(2):
            s[i] = mu[:, t, None, None] * s[i] - eta[:, t, None, None] * g[i]
            a[i] = alpha[:, t, None, None] * a[i] + s[i]
        ys.append(memory(a[0], a[1], q[:, t]))
    return torch.stack(ys, 1)


def inputs(gen):
    dt = torch.float64
    rand = lambda *s: torch.rand(*s, generator=gen, dtype=dt)    # noqa: E731
    randn = lambda *s: torch.randn(*s, generator=gen, dtype=dt)  # noqa: E731
    return {
        "q": F.normalize(randn(N, T, D), dim=-1),
        "k": F.normalize(randn(N, T, D), dim=-1),
        "v": randn(N, T, D),
        # gates well inside (0, 1) and rates large enough that the inner steps matter
        "eta": rand(N, T) * 0.3 + 0.05,
        "alpha": rand(N, T) * 0.3 + 0.65,
        "mu": rand(N, T) * 0.8 + 0.1,
        "w0.0": randn(D, 4 * D) / 4 / D ** 0.5,
        "w0.1": randn(4 * D, D) / D ** 0.5,
        "r": randn(N, T, D),
    }


def grads(fn, x, chunk):
    leaves = {n: t.clone().requires_grad_() for n, t in x.items() if n != "r"}
    y = fn(*(leaves[n] for n in ("q", "k", "v", "eta", "alpha", "mu", "w0.0", "w0.1")), chunk)
    (y * x["r"]).sum().backward()
    out = {"y": y.detach()}
    out.update({"grad." + n: t.grad for n, t in leaves.items()})
    return out


def worst(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)


def check(tool, mod, chunk, gen):
    x = inputs(gen)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        save(src, x)
        subprocess.run([tool, "--in", src, "--out", dst, "--model", "titans",
                        "--chunk", str(chunk)], check=True, stdout=subprocess.DEVNULL)
        miras = load(dst)
    ours, naive = grads(mod.titans_layer, x, chunk), grads(loop, x, chunk)
    missing = [n for n in ours if n not in miras]
    if missing:
        print(f"FAIL  titans chunk {chunk}: miras-layer wrote no {', '.join(missing)}")
        return False
    e_peer, e_loop = worst(ours, miras), worst(naive, miras)
    scale = max(t.abs().max().item() for t in miras.values())
    ok = e_peer <= TOL and e_loop <= TOL
    print(f"{'ok  ' if ok else 'FAIL'}  titans chunk {chunk}  max |peer - miras| {e_peer:.1e}, "
          f"|loop - miras| {e_loop:.1e} over {', '.join(ours)} (largest entry {scale:.1f})")
    return ok


def check_float32(mod):
    gen = torch.Generator().manual_seed(1)
    n, t, d = 4, 40, 8
    x = {"q": F.normalize(torch.randn(n, t, d, generator=gen, dtype=torch.float64), dim=-1),
         "k": F.normalize(torch.randn(n, t, d, generator=gen, dtype=torch.float64), dim=-1),
         "v": torch.randn(n, t, d, generator=gen, dtype=torch.float64),
         "eta": torch.rand(n, t, generator=gen, dtype=torch.float64) * 0.3 + 0.05,
         "alpha": torch.rand(n, t, generator=gen, dtype=torch.float64) * 0.3 + 0.65,
         "mu": torch.rand(n, t, generator=gen, dtype=torch.float64) * 0.8 + 0.1,
         "w0.0": torch.randn(d, 4 * d, generator=gen, dtype=torch.float64) / (2 * d ** 0.5),
         "w0.1": torch.randn(4 * d, d, generator=gen, dtype=torch.float64) / d ** 0.5,
         "r": torch.randn(n, t, d, generator=gen, dtype=torch.float64)}
    wide = grads(mod.titans_layer, x, 16)
    narrow = grads(mod.titans_layer, {k: v.float() for k, v in x.items()}, 16)
    rel = max(((narrow[k].double() - wide[k]).abs().max() / wide[k].abs().max()).item() for k in wide)
    ok = rel <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'}  titans chunk 16 float32  max |f32 - f64| / max |f64| {rel:.1e} "
          f"over {', '.join(wide)}")
    return ok


def lm_from_checkpoint(mod, path):
    """The peer's LM with the parameters of a miras-train checkpoint, float64."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    meta = json.loads(raw[8:8 + n])["__metadata__"]
    w = {k: t.double() for k, t in load(path).items()}
    D, L, H = (int(meta["lm." + k]) for k in ("d_model", "layers", "heads"))
    chunk = int(dict(kv.split("=", 1) for kv in meta["lm.mixer_overrides"].split(","))["chunk"])
    hidden = int(meta["lm.mlp_hidden"]) or 3 * D
    lm = mod.LM(int(meta["lm.vocab"]), D, L, H, hidden, chunk).double()
    params = dict(lm.named_parameters())
    # miras keeps x W with W [in, out] (nn.Linear holds Wᵀ) and a conv as [C, K]
    rename = {"embeddings.weight": "emb.weight", "final_norm.weight": "final_norm.weight"}
    for l in range(L):
        b, m = f"blocks.{l}.", f"blocks.{l}.mixer."
        rename.update({b + "mixer_norm.weight": b + "mixer_norm.weight",
                       b + "mlp_norm.weight": b + "mlp_norm.weight",
                       m + "out_norm": m + "out_norm.weight",
                       m + "memory.w0.0": m + "w0_1", m + "memory.w0.1": m + "w0_2"})
        for x in ("q_proj", "k_proj", "v_proj", "gate_proj", "out_proj"):
            rename[m + x] = m + x + ".weight"
        for x in ("w_gate", "w_up", "w_down"):
            rename[b + "mlp." + x] = b + x + ".weight"
        for x in ("q_conv", "k_conv", "v_conv"):
            rename[m + x] = m + x + ".weight"
        for g in ("eta", "alpha", "mu"):
            rename.update({m + g + "_down": m + g + ".down.weight", m + g + "_up": m + g + ".up.weight",
                           m + g + "_bias": m + g + ".up.bias"})
    theirs = {k for k in w if not k.startswith("opt.")}
    if theirs != set(rename) or set(rename.values()) != set(params):
        raise SystemExit(f"parameters differ: miras only {sorted(theirs - set(rename))}, "
                         f"peer only {sorted(set(params) - set(rename.values()))}")
    with torch.no_grad():
        for src, dst in rename.items():
            t = w[src]
            if dst.endswith("_conv.weight"):
                t = t[:, None, :]
            elif t.dim() == 2 and not src.endswith("embeddings.weight"):
                t = t.t()
            if params[dst].shape != t.shape:
                raise SystemExit(f"{src} {list(t.shape)} does not fit {dst} {list(params[dst].shape)}")
            params[dst].copy_(t)
    return lm, sum(p.numel() for p in params.values())


def eval_loss(lm, text, T, windows):
    """mi_text_windows over the validation split (its last 10%): windows of T + 1 bytes, stride T."""
    begin = len(text) // 10 * 9 + len(text) % 10 * 9 // 10
    data = torch.tensor(list(text), dtype=torch.long)
    starts = [begin + w * T for w in range(windows)]
    tok = torch.stack([data[s:s + T] for s in starts])
    tgt = torch.stack([data[s + 1:s + T + 1] for s in starts])
    with torch.no_grad():
        return lm(tok, tgt).item()


def check_lm(train, evaluate, mod):
    T, windows = 24, 8
    text = open(os.path.join(HERE, "..", "data", "tinyshakespeare.txt"), "rb").read()[:40000]
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "text.txt")
        with open(data, "wb") as f:
            f.write(text)
        subprocess.run([train, "--model", "titans", "--set", "chunk=5", "--set", "eta=0.1", "--d-model", "32",
                        "--layers", "2", "--heads", "2", "--set", "mlp_hidden=48", "--steps", "20",
                        "--batch", "4", "--seq-len", str(T), "--lr", "1e-2", "--data", data,
                        "--out", os.path.join(d, "run"), "--eval-every", "20", "--threads", "1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ckpt = os.path.join(d, "run", "ckpt.safetensors")
        out = subprocess.run([evaluate, ckpt, "--data", data, "--seq-len", str(T), "--max-windows",
                              str(windows), "--json", "--threads", "1"],
                             check=True, capture_output=True, text=True).stdout
        theirs = json.loads(out)["text"]["loss"]
        lm, n_params = lm_from_checkpoint(mod, ckpt)
    ours = eval_loss(lm, text, T, windows)
    for b in lm.blocks:
        b.mixer.chunk = 1
    per_token = eval_loss(lm, text, T, windows)
    with torch.no_grad():
        for b in lm.blocks:  # η = σ(−∞) = 0: the memory stays at W_0
            b.mixer.eta.up.bias.fill_(-math.inf)
    frozen = eval_loss(lm, text, T, windows)
    ok = abs(ours - theirs) <= 1e-5 and math.isfinite(ours)
    print(f"{'ok  ' if ok else 'FAIL'}  titans LM ({n_params} parameters, chunk 5, T {T}): "
          f"validation loss peer {ours:.6f}, miras {theirs:.6f}, |peer - miras| "
          f"{abs(ours - theirs):.1e}; the peer at chunk 1 {per_token:.6f}, with eta = 0 {frozen:.6f}")
    return ok


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else "build/tools/miras-layer"
    mod = peer()
    gen = torch.Generator().manual_seed(0)
    results = [check(tool, mod, b, gen) for b in (1, 2, 3)]
    results.append(check_float32(mod))
    if len(sys.argv) > 3:
        results.append(check_lm(sys.argv[2], sys.argv[3], mod))
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
