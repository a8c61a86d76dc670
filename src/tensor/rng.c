/* xoshiro256** with splitmix64 seeding; see tensor.h for the contract. */
#include <math.h>

#include "tensor.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void mi_rng_seed(mi_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mi_rng_next(mi_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double mi_rng_uniform(mi_rng *r) { return (double)(mi_rng_next(r) >> 11) * 0x1.0p-53; }

double mi_rng_normal(mi_rng *r)
{
    /* Box–Muller: u1 in (0, 1] keeps the log finite. */
    double u1 = 1.0 - mi_rng_uniform(r), u2 = mi_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t mi_rng_below(mi_rng *r, uint64_t n)
{
    if (n == 0) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    uint64_t x;
    do x = mi_rng_next(r);
    while (x >= limit);
    return x % n;
}

mi_tensor *mi_randn(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, double mean,
                    double std)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, mean + std * mi_rng_normal(r));
    return t;
}

mi_tensor *mi_rand(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, double lo, double hi)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, lo + (hi - lo) * mi_rng_uniform(r));
    return t;
}
