#!/usr/bin/env python3
"""The cost model of docs/distributed.md: predicted tokens/s of data-parallel
miras-train on N nodes from one node's measured compute rate and a ring
all-reduce of the f32 gradients.

  t_comp(b)  = b·T / tau                           (b sequences of T tokens per node)
  t_ar       = 2(N−1)/N · S / beta + 2(N−1)·k·alpha  (S = 4·P bytes in k buckets)
  serial     : t_step = t_comp + t_ar               (miras-train today: sum after backward)
  overlapped : t_step = max(t_comp, t_ar)           (buckets sent while backward runs)
  tokens/s   = N·b·T / t_step
  b*         = t_ar·tau / T: the per-node batch below which the all-reduce
               outlasts the compute and cannot hide behind it.

usage: tools/lib/dist_cost_model.py PARAMS TOKENS_PER_S [--T 256] [--b 16] [--alpha-us 30]
prints the markdown tables of docs/distributed.md."""
import argparse
import math

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("params", type=float, help="parameters of the model (P)")
p.add_argument("tau", type=float, help="one node's measured tokens/s (compute only)")
p.add_argument("--T", type=int, default=256, help="tokens per sequence")
p.add_argument("--b", type=int, default=16, help="sequences per node per step")
p.add_argument("--alpha-us", type=float, default=30.0, help="latency per message (µs)")
p.add_argument("--bucket-mb", type=float, default=4.0, help="bucket size (MiB)")
a = p.parse_args()

S = 4 * a.params
k = math.ceil(S / (a.bucket_mb * 2**20))
alpha = a.alpha_us * 1e-6
nodes = [8, 16, 32, 64, 128, 256]
links = [10, 25, 100]


def t_ar(n, gbit):
    return 2 * (n - 1) / n * S / (gbit * 1e9 / 8) + 2 * (n - 1) * k * alpha


t_comp = a.b * a.T / a.tau
print(f"P = {a.params:.0f} parameters (S = {S / 1e6:.2f} MB of f32 gradients, {k} bucket(s)), "
      f"tau = {a.tau:.0f} tokens/s a node, b = {a.b} sequences × T = {a.T} a node, "
      f"alpha = {a.alpha_us:g} µs: t_comp = {t_comp * 1e3:.0f} ms a step\n")
head = "t_ar ms · tokens/s (serial) · efficiency"
print("| nodes | " + " | ".join(f"{g} Gb/s: {head}" for g in links) + " |")
print("|---:|" + "---:|" * len(links))
for n in nodes:
    cells = []
    for g in links:
        t = t_ar(n, g)
        tps = n * a.b * a.T / (t_comp + t)
        cells.append(f"{t * 1e3:.1f} · {tps:,.0f} · {t_comp / (t_comp + t):.1%}")
    print(f"| {n} | " + " | ".join(cells) + " |")
print()
print("b* (sequences a node; global batch N·b*) below which the all-reduce cannot hide "
      "behind compute:\n")
print("| nodes | " + " | ".join(f"{g} Gb/s" for g in links) + " |")
print("|---:|" + "---:|" * len(links))
for n in nodes:
    cells = []
    for g in links:
        bs = t_ar(n, g) * a.tau / a.T
        cells.append(f"{bs:.2f} (global {n * bs:,.0f})")
    print(f"| {n} | " + " | ".join(cells) + " |")
