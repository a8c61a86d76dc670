/* The project's own kernels (MI_BACKEND_OWN, f32) for the sequence ops
 * rope, attention and conv1d_causal_wgrad, built with -O3 -ffast-math
 * -march=native like the other OWN files.
 *
 * rope: REF evaluates pow, cos and sin for every (t, i) and walks the
 * leading dimension innermost, with a stride of T·D; here the angles come
 * from a table made once per call (in double, then rounded, as REF; see
 * own_rope_f32) and each row is rotated contiguously. Same products as REF, so within an ulp
 * (fast math may contract them into FMAs).
 *
 * attention: REF's online softmax rescales the running sum at every new
 * maximum and calls expf per key, on one thread. Here each batch entry's query
 * rows go in blocks of 64, each over the keys its rows read (the causal mask
 * leaves the blocks above the diagonal out): the scores sc·Q Kᵀ as one
 * product, per row the max, the exponentials with own_math.h's polynomial (≤ 2
 * ulp) and their sum over the keys that row reads, zeros at the block's
 * others, then y = P V as one product, P's rows divided by their sums in y's
 * rows (and the vjp's in g's), never in P. The products are oneDNN's sgemm on
 * the calling thread (gemm_thread_f32; OpenBLAS's where MIRAS_BACKEND leaves
 * oneDNN out), the batch entries split over the threads, so the result does
 * not depend on the thread count; sums are reassociated (a few ulp from REF).
 * The vjp recomputes the same blocks' probabilities, and its four products run
 * over the same blocks. With one query per batch entry (a decoding step
 * against a KV cache) the scores are dot products with the key rows as they
 * lie, and only the keys the row reads are touched. Row t sits at position
 * attrs.start + t.
 *
 * conv1d_causal_wgrad: REF sums each dw[c, j] over (b, t) with a stride of C
 * between terms (a cache miss per term at C = 128); here the (b, t) rows are
 * walked once, in REF's order, and every channel of a row is added at once,
 * into dwᵀ [K, C]: the same sums in the same order (fast math may fuse the
 * products into them), split over channels between threads. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

#define OWN_VECTORS
#include "own_kernels.h"
#include "own_math.h"
#include "own_sequence.h"

/* ================================================================ rope */
typedef struct rope_ctx {
    const float *x, *cs, *sn;
    float *y;
    int64_t nt, d, h, nh; /* nh rows a position ([.., T, H, D]; 1: [.., T, D]) */
} rope_ctx;

static void rope_range(const void *c, int64_t r0, int64_t r1)
{
    const rope_ctx *k = c;
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = (r / k->nh) % k->nt, h = k->h;
        const float *restrict x = k->x + r * k->d, *restrict cs = k->cs + t * h,
                              *restrict sn = k->sn + t * h;
        float *restrict y = k->y + r * k->d;
        for (int64_t i = 0; i < h; i++) {
            float x0 = x[i], x1 = x[i + h];
            y[i] = x0 * cs[i] - x1 * sn[i];
            y[i + h] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

void own_rope_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int rk = in[0]->rank;
    int64_t nt = in[0]->shape[a->axis == -3 ? rk - 3 : rk - 2], d = in[0]->shape[rk - 1];
    int64_t h = d / 2, nh = a->axis == -3 ? in[0]->shape[rk - 2] : 1;
    float *table = malloc(sizeof(float) * (size_t)(2 * nt * h));
    if (!table) {
        own_ref(&mi_op_rope, o, in, a); /* no table, no speed-up: REF needs none */
        return;
    }
    rope_ctx k = {.x = in[0]->data, .y = o->data, .cs = table, .sn = table + nt * h,
                  .nt = nt, .d = d, .h = h, .nh = nh};
    /* θ_i = base^(−2i/d); (cos, sin)(tθ_i) exactly at every 32nd t, in
     * between one rotation by θ_i from t − 1 (in double: 31 rotations stay
     * within 1e-14 of the exact angle, far below f32's rounding), so the
     * table costs h·(nt/32 + 1) sin/cos pairs, not h·nt. */
    for (int64_t i = 0; i < h; i++) {
        double th = pow(a->p, -2.0 * (double)i / (double)d), c1 = cos(th), s1 = sin(th);
        double c = 1, s = 0;
        for (int64_t t = 0; t < nt; t++) {
            if (t % 32 == 0) {
                c = cos((double)t * th), s = sin((double)t * th);
            } else {
                double cn = c * c1 - s * s1;
                s = s * c1 + c * s1, c = cn;
            }
            table[t * h + i] = (float)c;
            table[nt * h + t * h + i] = (float)(a->reverse ? -s : s);
        }
    }
    own_parallel(o->numel / d, own_stream_work(o->numel) * 2, OWN_PAR_MIN, 1, rope_range, &k);
    free(table);
}

/* ================================================================ attention */
typedef struct attention_ctx {
    const float *q, *k, *v;
    float *y;
    int64_t nt, ns, d, dv, window, start;
    int64_t nh; /* heads between a position's rows ([.., T, H, D]); 1: [.., T, D] */
    bool causal;
    float sc;
} attention_ctx;

/* The dims of q [.., T, D], k [.., S, D], v [.., S, Dv] (or, with attrs.axis
 * = −3, [.., T, H, D] …: batch entry l is head l mod H of sequence l / H). */
static attention_ctx attention_ctx_of(const mi_tensor *q, const mi_tensor *k, const mi_tensor *v,
                                      const mi_attrs *a)
{
    int rk = q->rank, sx = a->axis == -3 ? rk - 3 : rk - 2;
    attention_ctx c = {.q = q->data, .k = k->data, .v = v ? v->data : NULL,
                       .nt = q->shape[sx], .ns = k->shape[sx], .d = q->shape[rk - 1],
                       .dv = v ? v->shape[rk - 1] : 0, .window = a->window, .start = a->start,
                       .nh = a->axis == -3 ? q->shape[rk - 2] : 1, .causal = a->causal};
    c.sc = (float)(1.0 / sqrt((double)c.d));
    return c;
}

/* Row t of batch entry l in a tensor of len rows per entry (q, y: T; k, v: S),
 * in rows of the tensor's width; consecutive t are nh rows apart. */
static inline int64_t row_of(const attention_ctx *c, int64_t l, int64_t t, int64_t len)
{
    return ((l / c->nh) * len + t) * c->nh + l % c->nh;
}

/* The keys lo … hi that row t of a batch entry reads. */
static void attention_keys(const attention_ctx *c, int64_t t, int64_t *lo, int64_t *hi)
{
    int64_t p = c->start + t;
    *lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    *hi = c->causal && p < c->ns - 1 ? p : c->ns - 1;
}

/* y = scale · Σ_j p_j V[j] for rows V[j] of P·OWN_W floats, ldv apart: y in
 * P vector registers across the n rows (P a constant after inlining). */
static inline __attribute__((always_inline)) void weighted_rows(int P, const float *restrict V,
                                                                int64_t ldv,
                                                                const float *restrict p,
                                                                int64_t n, float scale,
                                                                float *restrict y)
{
    vecf acc[4] = {0};
    for (int64_t j = 0; j < n; j++)
        for (int u = 0; u < P; u++) acc[u] += p[j] * vld(V + j * ldv + u * OWN_W);
    for (int u = 0; u < P; u++) vst(y + u * OWN_W, scale * acc[u]);
}

/* s[0 … n) = exp(s − max s) (own_math.h's polynomial, in vectors:
 * own_vexp_lo); returns their sum. */
static float exp_shifted(float *restrict s, int64_t n)
{
    int64_t nv = n - n % OWN_W;
    vecf mv = (vecf){0} - INFINITY, zv = {0};
    for (int64_t j = 0; j < nv; j += OWN_W) mv = own_vmax(mv, vld(s + j));
    float m = -INFINITY, z = 0;
    for (int i = 0; i < OWN_W; i++) m = mv[i] > m ? mv[i] : m;
    for (int64_t j = nv; j < n; j++) m = s[j] > m ? s[j] : m;
    for (int64_t j = 0; j < nv; j += OWN_W) {
        vecf e = own_vexp_lo(vld(s + j) - m);
        vst(s + j, e);
        zv += e;
    }
    for (int i = 0; i < OWN_W; i++) z += zv[i];
    for (int64_t j = nv; j < n; j++) {
        s[j] = f_exp_lo(s[j] - m);
        z += s[j];
    }
    return z;
}

/* p[0 … n) = exp(p − max p) and y = Σ_j p_j V[lo + j] / Σ_j p_j (V's rows
 * ldv apart). */
static void attention_softmax_v(const attention_ctx *c, const float *restrict V, int64_t ldv,
                                int64_t lo, int64_t n, float *restrict p, float *restrict y)
{
    int64_t dv = c->dv;
    float iz = 1.0f / exp_shifted(p, n);
    if (dv == OWN_W || dv == 2 * OWN_W || dv == 4 * OWN_W) {
        /* y in registers across the keys (heads of 16, 32, 64 with AVX-512) */
        switch (dv / OWN_W) {
        case 1: weighted_rows(1, V + lo * ldv, ldv, p, n, iz, y); return;
        case 2: weighted_rows(2, V + lo * ldv, ldv, p, n, iz, y); return;
        default: weighted_rows(4, V + lo * ldv, ldv, p, n, iz, y); return;
        }
    }
    for (int64_t e = 0; e < dv; e++) y[e] = 0;
    for (int64_t j = 0; j < n; j++) {
        const float *restrict vs = V + (lo + j) * ldv;
        for (int64_t e = 0; e < dv; e++) y[e] += p[j] * vs[e];
    }
    for (int64_t e = 0; e < dv; e++) y[e] *= iz;
}

/* Row r's output from the key rows in place: p_j = sc·q·k_{lo+j}, each a
 * contiguous dot product over the head dimension. */
static void attention_row_direct(const attention_ctx *c, int64_t r, float *restrict p)
{
    int64_t l = r / c->nt, t = r % c->nt, d = c->d, ns = c->ns, ldk = c->nh * d, lo, hi;
    attention_keys(c, t, &lo, &hi);
    int64_t n = hi - lo + 1;
    const float *restrict q = c->q + row_of(c, l, t, c->nt) * d;
    const float *restrict K = c->k + row_of(c, l, lo, ns) * d;
    for (int64_t j = 0; j < n; j++) {
        float dot = 0;
        for (int64_t e = 0; e < d; e++) dot += q[e] * K[j * ldk + e];
        p[j] = dot * c->sc;
    }
    attention_softmax_v(c, c->v + row_of(c, l, 0, ns) * c->dv, c->nh * c->dv, lo, n, p,
                        c->y + row_of(c, l, t, c->nt) * c->dv);
}

/* Query rows in a block: the forward, the vjp's probabilities and its
 * products take a batch entry's rows BLOCK_ROWS at a time, each block over
 * the keys its rows read (the first row's lo to the last row's hi): with the
 * causal mask the blocks above the diagonal are never multiplied. */
#define BLOCK_ROWS 64

/* The rows of the block from row r0 (n), and the keys lo … lo + w − 1 they
 * read: the first row's lo to the last row's hi. */
static int64_t block_keys(const attention_ctx *k, int64_t r0, int64_t *lo, int64_t *w)
{
    int64_t n = k->nt - r0 < BLOCK_ROWS ? k->nt - r0 : BLOCK_ROWS, hi, unused;
    attention_keys(k, r0, lo, &unused);
    attention_keys(k, r0 + n - 1, &unused, &hi);
    *w = hi - *lo + 1;
    return n;
}

/* The probabilities of the block of n rows from r0 of one batch entry (Q,
 * K its row 0, rows nh·D apart) over its keys lo … lo + w − 1, into P (rows
 * ldp apart) as E = exp(s − max) and iz = 1/Σ E per row (P = iz E; the
 * callers scale what is smaller than P: y's rows, g's): the scores sc·Q Kᵀ
 * as one sgemm, then over the keys each row reads its max and its
 * exponentials' sum, zeros at the block's others. OWN_W rows at a time,
 * so their maxima and sums each come out of one fold (own_lane_maxes,
 * own_lane_sums) and not a horizontal reduction a row (a row is 4 to 16
 * vectors at T = 256); a row's last len mod OWN_W keys one at a time. */
static void block_probs(const attention_ctx *k, const float *Q, const float *K, int64_t r0,
                        int64_t n, int64_t lo, int64_t w, float *P, int64_t ldp, float *iz)
{
    int64_t ld = k->nh * k->d;
    gemm_thread_f32(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)w, (int)k->d, k->sc,
                    Q + r0 * ld, (int)ld, K + lo * ld, (int)ld, 0, P, (int)ldp);
    for (int64_t i0 = 0; i0 < n; i0 += OWN_W) {
        int64_t nr = n - i0 < OWN_W ? n - i0 : OWN_W, off[OWN_W], len[OWN_W];
        float mx[OWN_W], z[OWN_W], tail[OWN_W];
        vecf part[OWN_W];
        for (int64_t r = 0; r < OWN_W; r++) { /* each row's max */
            vecf m = (vecf){0} - INFINITY;
            float t = -INFINITY;
            if (r < nr) {
                int64_t rlo, rhi;
                attention_keys(k, r0 + i0 + r, &rlo, &rhi);
                off[r] = rlo - lo, len[r] = rhi - rlo + 1;
                const float *s = P + (i0 + r) * ldp + off[r];
                int64_t nv = len[r] - len[r] % OWN_W;
                for (int64_t j = 0; j < nv; j += OWN_W) m = own_vmax(m, vld(s + j));
                for (int64_t j = nv; j < len[r]; j++) t = s[j] > t ? s[j] : t;
            }
            part[r] = m, tail[r] = t;
        }
        vst(mx, own_lane_maxes(part));
        for (int64_t r = 0; r < OWN_W; r++) { /* e^(s − max) and its sum */
            vecf e = {0};
            float t = 0;
            if (r < nr) {
                float m = mx[r] > tail[r] ? mx[r] : tail[r], *s = P + (i0 + r) * ldp + off[r];
                int64_t nv = len[r] - len[r] % OWN_W;
                for (int64_t j = 0; j < nv; j += OWN_W) {
                    vecf v = own_vexp_lo(vld(s + j) - m);
                    vst(s + j, v);
                    e += v;
                }
                for (int64_t j = nv; j < len[r]; j++) t += s[j] = f_exp_lo(s[j] - m);
            }
            part[r] = e, tail[r] = t;
        }
        vst(z, own_lane_sums(part));
        for (int64_t r = 0; r < nr; r++) {
            float *row = P + (i0 + r) * ldp;
            iz[i0 + r] = 1.0f / (z[r] + tail[r]);
            memset(row, 0, sizeof(float) * (size_t)off[r]);
            memset(row + off[r] + len[r], 0, sizeof(float) * (size_t)(w - off[r] - len[r]));
        }
    }
}

/* The n rows of Y (ld apart, e wide) times iz, row by row. */
static void scale_rows(float *Y, int64_t ld, int64_t n, int64_t e, const float *iz)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < e; c++) Y[i * ld + c] *= iz[i];
}

/* REF's one-pass online softmax for one row: the fallback when no score
 * buffer can be had. */
static void attention_row_online(const attention_ctx *c, int64_t r)
{
    int64_t l = r / c->nt, t = r % c->nt, d = c->d, dv = c->dv, lo, hi;
    int64_t ldk = c->nh * d, ldv = c->nh * dv;
    attention_keys(c, t, &lo, &hi);
    const float *q = c->q + row_of(c, l, t, c->nt) * d, *K = c->k + row_of(c, l, 0, c->ns) * d;
    const float *V = c->v + row_of(c, l, 0, c->ns) * dv;
    float *y = c->y + row_of(c, l, t, c->nt) * dv;
    float m = -INFINITY, z = 0;
    for (int64_t e = 0; e < dv; e++) y[e] = 0;
    for (int64_t s = lo; s <= hi; s++) {
        float dot = 0;
        for (int64_t e = 0; e < d; e++) dot += q[e] * K[s * ldk + e];
        dot *= c->sc;
        if (dot > m) {
            float f = f_exp_lo(m - dot);
            z *= f;
            for (int64_t e = 0; e < dv; e++) y[e] *= f;
            m = dot;
        }
        float p = f_exp_lo(dot - m);
        z += p;
        for (int64_t e = 0; e < dv; e++) y[e] += p * V[s * ldv + e];
    }
    for (int64_t e = 0; e < dv; e++) y[e] /= z;
}

/* Rows r0 … r1 − 1 one at a time (a decoding step: one query an entry). */
static void attention_rows(const void *c, int64_t r0, int64_t r1)
{
    const attention_ctx *k = c;
    float *buf = malloc(sizeof(float) * (size_t)k->ns);
    for (int64_t r = r0; r < r1; r++) {
        if (buf) attention_row_direct(k, r, buf);
        else attention_row_online(k, r);
    }
    free(buf);
}

/* Batch entries b0 … b1 − 1, a block of rows at a time: P over the block's
 * keys (block_probs), then y = iz (E V), E V as one sgemm. */
static void attention_entries(const void *c, int64_t b0, int64_t b1)
{
    const attention_ctx *k = c;
    int64_t nt = k->nt, ns = k->ns, d = k->d, e = k->dv;
    float *p = malloc(sizeof(float) * (size_t)(BLOCK_ROWS * ns));
    for (int64_t b = b0; b < b1; b++) {
        if (!p) {
            for (int64_t r = b * nt; r < (b + 1) * nt; r++) attention_row_online(k, r);
            continue;
        }
        const float *Q = k->q + row_of(k, b, 0, nt) * d, *K = k->k + row_of(k, b, 0, ns) * d;
        const float *V = k->v + row_of(k, b, 0, ns) * e;
        float *Y = k->y + row_of(k, b, 0, nt) * e;
        int64_t ldv = k->nh * e;
        for (int64_t r0 = 0; r0 < nt; r0 += BLOCK_ROWS) {
            int64_t lo, w, n = block_keys(k, r0, &lo, &w);
            float iz[BLOCK_ROWS];
            block_probs(k, Q, K, r0, n, lo, w, p, w, iz);
            gemm_thread_f32(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)e, (int)w, 1,
                            p, (int)w, V + lo * ldv, (int)ldv, 0, Y + r0 * ldv, (int)ldv);
            scale_rows(Y + r0 * ldv, ldv, n, e, iz);
        }
    }
    free(p);
}

void own_attention_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    attention_ctx k = attention_ctx_of(in[0], in[1], in[2], a);
    k.y = o->data;
    int64_t rows = k.nt ? in[0]->numel / k.d : 0, work = rows * k.ns * (k.d + k.dv);
    if (k.nt == 1) {
        own_parallel(rows, work, OWN_PAR_MIN, 1, attention_rows, &k);
        return;
    }
    own_parallel(rows / k.nt, work, OWN_PAR_MIN, 1, attention_entries, &k);
}

/* ---------------------------------------------------------------- attention's gradients
 * From the cotangent g, per batch entry (sequence.c's vjp):
 *   dv = Pᵀ g,  dS = P ⊙ (g vᵀ − rowsum(P ⊙ g vᵀ)),  dq = sc dS k,  dk = sc dSᵀ q
 * The query rows go in blocks of BLOCK_ROWS. A block's P is recomputed as
 * the forward makes it (block_probs) into a block-sized scratch, so no
 * [T, S] tensor of probabilities is written and read back; its four
 * products run over the keys its rows read only (the first row's lo to the
 * last row's hi): with the causal mask the blocks above the diagonal are
 * never multiplied, where the dense products take all of T×S. The products are
 * oneDNN's sgemm on the calling thread, the batch entries split over the
 * threads (each accumulates its own dk, dv), so the result does not depend
 * on the thread count. */
typedef struct grads_ctx {
    attention_ctx a;
    const float *g;
    float *dq, *dk, *dv;
    atomic_int failed;
} grads_ctx;

static void grads_range(const void *v, int64_t b0, int64_t b1)
{
    grads_ctx *c = (grads_ctx *)v;
    const attention_ctx *k = &c->a;
    int64_t nt = k->nt, ns = k->ns, d = k->d, e = k->dv;
    float *ds = malloc(sizeof(float) * (size_t)(BLOCK_ROWS * (2 * ns + e))), iz[BLOCK_ROWS];
    if (!ds) {
        atomic_store(&c->failed, 1);
        return;
    }
    float *Pb = ds + BLOCK_ROWS * ns, *Gs = Pb + BLOCK_ROWS * ns; /* Gs: g's rows times iz */
    for (int64_t b = b0; b < b1; b++) {
        int64_t q0 = row_of(k, b, 0, nt), k0 = row_of(k, b, 0, ns), ld = k->nh * d,
                le = k->nh * e;
        const float *Q = k->q + q0 * d, *K = k->k + k0 * d, *V = k->v + k0 * e, *G = c->g + q0 * e;
        float *dQ = c->dq + q0 * d, *dK = c->dk + k0 * d, *dV = c->dv + k0 * e;
        for (int64_t s = 0; s < ns; s++) {
            memset(dK + s * ld, 0, sizeof(float) * (size_t)d);
            memset(dV + s * le, 0, sizeof(float) * (size_t)e);
        }
        for (int64_t r0 = 0; r0 < nt; r0 += BLOCK_ROWS) {
            int64_t lo, w, n = block_keys(k, r0, &lo, &w);
            block_probs(k, Q, K, r0, n, lo, w, Pb, w, iz);
            /* dv += Pᵀ g = Eᵀ (iz g) */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < e; j++) Gs[i * e + j] = iz[i] * G[(r0 + i) * le + j];
            gemm_thread_f32(CblasRowMajor, CblasTrans, CblasNoTrans, (int)w, (int)e, (int)n, 1, Pb,
                            (int)w, Gs, (int)e, 1, dV + lo * le, (int)le);
            gemm_thread_f32(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)w, (int)e, 1,
                            G + r0 * le, (int)le, V + lo * le, (int)le, 0, ds, (int)w);
            /* dS = P ⊙ (g vᵀ − Σ_j P g vᵀ) with P = iz E */
            for (int64_t i = 0; i < n; i++) {
                const float *pr = Pb + i * w;
                float *dr = ds + i * w, dot = 0, z = iz[i];
                for (int64_t j = 0; j < w; j++) dot += pr[j] * dr[j];
                dot *= z;
                for (int64_t j = 0; j < w; j++) dr[j] = z * pr[j] * (dr[j] - dot);
            }
            gemm_thread_f32(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)d, (int)w,
                            k->sc, ds, (int)w, K + lo * ld, (int)ld, 0, dQ + r0 * ld, (int)ld);
            gemm_thread_f32(CblasRowMajor, CblasTrans, CblasNoTrans, (int)w, (int)d, (int)n, k->sc,
                            ds, (int)w, Q + r0 * ld, (int)ld, 1, dK + lo * ld, (int)ld);
        }
    }
    free(ds);
}

int own_attention_grads_f32(const mi_tensor *q, const mi_tensor *k,
                            const mi_tensor *v, const mi_tensor *g, const mi_attrs *a,
                            mi_tensor *dq, mi_tensor *dk, mi_tensor *dv)
{
    grads_ctx c = {.a = attention_ctx_of(q, k, v, a), .g = g->data, .dq = dq->data,
                   .dk = dk->data, .dv = dv->data};
    atomic_init(&c.failed, 0);
    int64_t entries = q->numel / (c.a.nt * c.a.d);
    own_parallel(entries, 4 * entries * c.a.nt * c.a.ns * (c.a.d + c.a.dv), OWN_PAR_MIN, 1,
                 grads_range, &c);
    if (atomic_load(&c.failed)) {
        mi_error_set("attention: out of memory for the vjp's scratch (%lld x (2 x %lld + %lld) "
                     "floats)", (long long)BLOCK_ROWS, (long long)c.a.ns, (long long)c.a.dv);
        return -1;
    }
    /* mi_flops: the products run, 2·(2 Dv + 2 D) per row and key of each block */
    uint64_t cells = 0;
    for (int64_t r0 = 0; r0 < c.a.nt; r0 += BLOCK_ROWS) {
        int64_t lo, w, n = block_keys(&c.a, r0, &lo, &w);
        cells += (uint64_t)(n * w);
    }
    op_flops_add((uint64_t)entries * cells * 4u * (uint64_t)(c.a.d + c.a.dv));
    return 0;
}

/* ================================================================ conv1d_causal_wgrad */
typedef struct wgrad_ctx {
    const float *g, *x;
    float *dw, *acc; /* dw [C, K]; acc dwᵀ [K, C] */
    int64_t nb, nt, nc, k;
} wgrad_ctx;

static void wgrad_range(const void *c, int64_t c0, int64_t c1)
{
    const wgrad_ctx *w = c;
    int64_t nc = w->nc, k = w->k;
    for (int64_t j = 0; j < k; j++)
        for (int64_t ch = c0; ch < c1; ch++) w->acc[j * nc + ch] = 0;
    for (int64_t b = 0; b < w->nb; b++)
        for (int64_t j = 0; j < k; j++) {
            float *restrict acc = w->acc + j * nc;
            for (int64_t t = k - 1 - j > 0 ? k - 1 - j : 0; t < w->nt; t++) {
                const float *restrict g = w->g + (b * w->nt + t) * nc;
                const float *restrict x = w->x + (b * w->nt + t - k + 1 + j) * nc;
                for (int64_t ch = c0; ch < c1; ch++) acc[ch] += g[ch] * x[ch];
            }
        }
    for (int64_t ch = c0; ch < c1; ch++)
        for (int64_t j = 0; j < k; j++) w->dw[ch * k + j] = w->acc[j * nc + ch];
}

void own_conv1d_causal_wgrad_f32(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    wgrad_ctx w = {.g = in[0]->data, .x = in[1]->data, .dw = o->data, .nb = in[0]->shape[0],
                   .nt = in[0]->shape[1], .nc = in[0]->shape[2], .k = a->index};
    w.acc = malloc(sizeof(float) * (size_t)(w.k * w.nc));
    if (!w.acc) {
        own_ref(&mi_op_conv1d_causal_wgrad, o, in, a);
        return;
    }
    own_parallel(w.nc, in[0]->numel * w.k, OWN_PAR_MIN, 16, wgrad_range, &w);
    free(w.acc);
}
