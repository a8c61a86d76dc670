#!/usr/bin/env python3
"""Independent re-implementation of the MQAR generator (src/data/mqar.c,
the draw order documented in src/data/tasks.h) in plain Python, to check the
golden checksums fixed in tests/test_tasks.c. Run: python3 tests/gen_tasks_golden.py

It shares nothing with the C code but the written description: xoshiro256**
seeded through splitmix64 (tensor.h), mi_task_rng's mixing, partial
Fisher-Yates draws, successive weighted gap sampling and the random fill."""
import math

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    def __init__(self, seed):
        self.s = []
        x = seed
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            self.s.append(mix64(x))

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n


def task_rng(seed, split, index):
    h = mix64((seed + 0x9E3779B97F4A7C15) & M64)
    h = mix64(h ^ (((split + 1) * 0xD1B54A32D192ED03) & M64))
    h = mix64(h ^ (index & M64))
    return Rng(h)


def distinct(r, lo, count, n):
    pool = list(range(lo, lo + count))
    for j in range(n):
        k = j + r.below(count - j)
        pool[j], pool[k] = pool[k], pool[j]
    return pool[:n]


def mqar(V, L, N, a, P, rnq, seed, split, index):
    r = task_rng(seed, split, index)
    C = 2 * N * P
    space = (L - C) // 2
    keys = distinct(r, 1, V // 2 - 1, N)
    values = distinct(r, V // 2, V - V // 2, N)
    w = [a * math.pow(i, a - 1) for i in range(1, space + 1)]
    taken = [False] * space
    gaps = []
    for _ in range(N):
        total = 0.0
        for g in range(space):
            if not taken[g]:
                total += w[g]
        u = r.uniform() * total
        acc, pick = 0.0, -1
        for g in range(space):
            if taken[g]:
                continue
            pick = g
            acc += w[g]
            if u < acc:
                break
        taken[pick] = True
        gaps.append(pick)
    seq = [0] * (L + 1)
    lab = [-100] * (L + 1)
    for p in range(P):
        for j in range(N):
            seq[p * 2 * N + 2 * j] = keys[j]
            seq[p * 2 * N + 2 * j + 1] = values[j]
    for j in range(N):
        seq[C + 2 * gaps[j]] = keys[j]
        lab[C + 2 * gaps[j] + 1] = values[j]
    inputs, targets = seq[:-1], lab[1:]
    if rnq:
        for t in range(L):
            if inputs[t] == 0:
                inputs[t] = r.below(V)
    return inputs, targets


def fnv1a(values, h=0xCBF29CE484222325):
    for v in values:
        for b in (v & M64).to_bytes(8, "little"):
            h = ((h ^ b) * 0x100000001B3) & M64
    return h


def golden(V, L, N, a, P, rnq, seed, split, first, B):
    xs, ys = [], []
    for i in range(first, first + B):
        x, y = mqar(V, L, N, a, P, rnq, seed, split, i)
        xs += x
        ys += y
    return fnv1a(ys, fnv1a(xs))


if __name__ == "__main__":
    # The configurations of tests/test_tasks.c's mqar_golden_checksum.
    print("default  V=8192 L=64 N=4 P=1 rnq seed=1234 train first=0 B=4: 0x%016x"
          % golden(8192, 64, 4, 0.01, 1, True, 1234, 0, 0, 4))
    print("variant  V=300 L=128 N=8 P=2 no-rnq seed=7 valid first=5 B=3: 0x%016x"
          % golden(300, 128, 8, 0.01, 2, False, 7, 1, 5, 3))
