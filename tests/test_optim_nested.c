/* Outer optimizers, part 2: Muon's Newton–Schulz band and formula, Nested
 * Learning's memories (closed-form inner gradients against mi_grad,
 * gradchecks of every rule through the functional step), hypergradients
 * d(loss after k steps)/d(lr, momentum) against finite differences, and every
 * optimizer on a convex quadratic and on the small 2-layer MLP. */
#include <stdio.h>

#include "harness.h"
#include "optim/optim.h"

/* ---------------------------------------------------------------- small dense helpers */
/* Eigenvalues of a symmetric n×n matrix (row-major, destroyed) by cyclic
 * Jacobi rotations. */
static void jacobi_eigenvalues(double *a, int n, double *ev)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = a[i * n + i];
}

/* Singular values of an r×c tensor via the eigenvalues of the smaller Gram
 * matrix; returns how many (min(r, c)). */
static int singular_values(const mi_tensor *x, double *sv)
{
    int r = (int)x->shape[0], c = (int)x->shape[1], n = r < c ? r : c;
    double g[64 * 64];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            if (r <= c)
                for (int k = 0; k < c; k++) s += mi_get(x, i * c + k) * mi_get(x, j * c + k);
            else
                for (int k = 0; k < r; k++) s += mi_get(x, k * c + i) * mi_get(x, k * c + j);
            g[i * n + j] = s;
        }
    jacobi_eigenvalues(g, n, sv);
    for (int i = 0; i < n; i++) sv[i] = sqrt(sv[i] > 0 ? sv[i] : 0);
    return n;
}

/* Muon's Newton–Schulz quintic from its published definition (Jordan et al.
 * 2024), with the published coefficients rather than the library's:
 *   X₀ = G / (‖G‖_F + 1e-7), transposed when rows > cols,
 *   X ← a X + (b A + c A²) X,  A = X Xᵀ,  (a, b, c) = (3.4445, −4.7750, 2.0315),
 * transposed back at the end. Here (b A + c A²) X is evaluated as
 * b (A X) + c (A (A X)). */
static const double NS_A = 3.4445, NS_B = -4.7750, NS_C = 2.0315;

static void ns_plain(const double *g, int r, int c, int steps, double *out)
{
    bool tall = r > c;
    int m = tall ? c : r, n = tall ? r : c; /* X is m×n, m ≤ n */
    double X[64 * 64], A[64 * 64], AX[64 * 64], AAX[64 * 64], nrm = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            X[i * n + j] = tall ? g[j * c + i] : g[i * c + j];
            nrm += X[i * n + j] * X[i * n + j];
        }
    for (int i = 0; i < m * n; i++) X[i] /= sqrt(nrm) + 1e-7;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                A[i * m + j] = 0;
                for (int k = 0; k < n; k++) A[i * m + j] += X[i * n + k] * X[j * n + k];
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                AX[i * n + j] = 0;
                for (int k = 0; k < m; k++) AX[i * n + j] += A[i * m + k] * X[k * n + j];
            }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                AAX[i * n + j] = 0;
                for (int k = 0; k < m; k++) AAX[i * n + j] += A[i * m + k] * AX[k * n + j];
            }
        for (int i = 0; i < m * n; i++) X[i] = NS_A * X[i] + NS_B * AX[i] + NS_C * AAX[i];
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) out[i * c + j] = tall ? X[j * n + i] : X[i * n + j];
}

static double phi(double s) { return NS_A * s + NS_B * s * s * s + NS_C * pow(s, 5); }

/* ---------------------------------------------------------------- Newton–Schulz */
START_TEST(newton_schulz_of_a_diagonal_is_the_scalar_iteration)
{
    /* G = [diag(3, 1, 0.5) | 0]: each singular value s goes to φ⁵(s / (‖G‖_F + 1e-7)) */
    mi_tensor *g = mi_zeros(MI_F64, MI_SHAPE(3, 5));
    const double d[3] = {3, 1, 0.5};
    for (int i = 0; i < 3; i++) mi_set(g, i * 5 + i, d[i]);
    mi_tensor *x = mi_newton_schulz(g, 5);
    double f = sqrt(9 + 1 + 0.25) + 1e-7;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            double want = 0;
            if (i == j) {
                want = d[i] / f;
                for (int k = 0; k < 5; k++) want = phi(want);
            }
            ck_assert_close(mi_get(x, i * 5 + j), want, 1e-13);
        }
    /* transposed input: transposed output */
    mi_tensor *xt = mi_newton_schulz(mi_transpose(g, 0, 1), 5);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) ck_assert_close(mi_get(xt, j * 3 + i), mi_get(x, i * 5 + j), 1e-14);
}
END_TEST

/* φ(s) = a s + b s³ + c s⁵ maps [0.01, 1] into [0.6818, 1.1344] after five
 * steps (and keeps that band: it is the iteration's attractor), so the
 * output's singular values lie there whatever the input's spectrum. */
START_TEST(newton_schulz_output_is_near_orthogonal)
{
    double band_lo = 1e9, band_hi = 0;
    for (int i = 0; i <= 99000; i++) {
        double x = 0.01 + i * 1e-5;
        for (int k = 0; k < 5; k++) x = phi(x);
        band_lo = fmin(band_lo, x);
        band_hi = fmax(band_hi, x);
    }
    ck_assert(band_lo > 0.68 && band_hi < 1.135);
    mi_rng r;
    mi_rng_seed(&r, 100);
    const int64_t shapes[][2] = {{8, 16}, {16, 8}, {5, 9}, {12, 20}, {20, 12}, {3, 7}, {1, 6}, {32, 48}};
    double lo = 1e9, hi = 0;
    for (int dti = 0; dti < 2; dti++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int trial = 0; trial < 3; trial++) {
                mi_dtype dt = dti ? MI_F64 : MI_F32;
                mi_tensor *g = mi_randn(&r, dt, MI_SHAPE(shapes[s][0], shapes[s][1]), 0, 1);
                /* columns of very different scales: a spread-out spectrum */
                for (int64_t i = 0; i < g->numel; i++)
                    mi_set(g, i, mi_get(g, i) * (1 + 3.0 * (double)(i % shapes[s][1]) / (double)shapes[s][1]));
                double sv_in[64], sv[64], fro = 0, smin = 1e300;
                int n = singular_values(g, sv_in);
                for (int i = 0; i < n; i++) {
                    fro += sv_in[i] * sv_in[i];
                    smin = fmin(smin, sv_in[i]);
                }
                /* the band holds for σ/‖G‖_F ≥ 0.01 (smaller ones need more steps) */
                ck_assert(smin / sqrt(fro) >= 0.01);
                mi_tensor *x = mi_newton_schulz(g, 5);
                ck_assert_ptr_nonnull(x);
                ck_assert(singular_values(x, sv) == n);
                for (int i = 0; i < n; i++) {
                    ck_assert_msg(sv[i] >= 0.68 && sv[i] <= 1.135,
                                  "%s [%lld,%lld]: singular value %g outside [0.68, 1.135]",
                                  mi_dtype_name(dt), (long long)shapes[s][0], (long long)shapes[s][1], sv[i]);
                    if (sv[i] < lo) lo = sv[i];
                    if (sv[i] > hi) hi = sv[i];
                }
            }
    fprintf(stderr, "newton_schulz: output singular values within [%.4f, %.4f]\n", lo, hi);
}
END_TEST

/* Muon against its published definition (Jordan et al. 2024), per step on a
 * matrix W viewed as [shape[0], rest], gradient G, momentum μ, lr η, decay λ:
 *   B ← μ B + (1 − μ) G              (B₀ = 0)
 *   U = (1 − μ) G + μ B   (Nesterov),   else U = B
 *   W ← (1 − η λ) W − η √max(1, rows/cols) · NS(U)
 * on a wide, a tall and a rank-3 parameter, with and without Nesterov; a
 * vector takes exactly AdamW with aux_lr. */
START_TEST(muon_follows_its_formula)
{
    mi_rng r;
    mi_rng_seed(&r, 101);
    const int64_t shapes[3][3] = {{3, 5, 0}, {6, 2, 0}, {4, 2, 3}};
    const int ranks[3] = {2, 2, 3};
    for (int s = 0; s < 6; s++) {
        bool nesterov = s < 3;
        int ns_steps = nesterov ? 5 : 3;
        const int64_t *shp = shapes[s % 3];
        int rank = ranks[s % 3], R = (int)shp[0], N = R;
        for (int k = 1; k < rank; k++) N *= (int)shp[k];
        int C = N / R;
        mi_tensor *p = mi_randn(&r, MI_F64, rank, shp, 0, 1);
        double W[64], B[64] = {0}, U[64], O[64];
        const double mu = 0.9, lr = 0.05, lambda = 0.1;
        for (int i = 0; i < N; i++) W[i] = mi_get(p, i);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_MUON);
        h.momentum = mu;
        h.lr = lr;
        h.weight_decay = lambda;
        h.nesterov = nesterov;
        h.ns_steps = ns_steps;
        mi_optim *opt = mi_optim_new_simple(MI_OPT_MUON, &p, 1, &h);
        for (int step = 0; step < 4; step++) {
            p->grad = mi_randn(&r, MI_F64, rank, shp, 0, 1);
            ck_assert_int_eq(mi_optim_step(opt), 0);
            for (int i = 0; i < N; i++) {
                double G = mi_get(p->grad, i);
                B[i] = mu * B[i] + (1 - mu) * G;
                U[i] = nesterov ? (1 - mu) * G + mu * B[i] : B[i];
            }
            ns_plain(U, R, C, ns_steps, O);
            double scale = sqrt(fmax(1.0, (double)R / C));
            for (int i = 0; i < N; i++) {
                W[i] = (1 - lr * lambda) * W[i] - lr * scale * O[i];
                ck_assert_msg(fabs(mi_get(p, i) - W[i]) <= 1e-12 * (1 + fabs(W[i])),
                              "case %d step %d [%d]: %.17g, the definition gives %.17g", s, step,
                              i, mi_get(p, i), W[i]);
            }
        }
        mi_optim_free(opt);
    }
    /* the fallback */
    mi_tensor *a = mi_randn(&r, MI_F64, MI_SHAPE(5), 0, 1), *c = mi_detach(a);
    mi_optim *muon = mi_optim_new_simple(MI_OPT_MUON, &a, 1, NULL);
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_ADAMW);
    mi_optim_hparams m = mi_optim_defaults(MI_OPT_MUON);
    h.lr = m.aux_lr;
    h.beta1 = m.beta1;
    h.beta2 = m.beta2;
    h.eps = m.eps;
    h.weight_decay = m.weight_decay;
    mi_optim *adamw = mi_optim_new_simple(MI_OPT_ADAMW, &c, 1, &h);
    for (int step = 0; step < 3; step++) {
        a->grad = c->grad = mi_randn(&r, MI_F64, MI_SHAPE(5), 0, 1);
        ck_assert_int_eq(mi_optim_step(muon), 0);
        ck_assert_int_eq(mi_optim_step(adamw), 0);
        ck_assert(!memcmp(a->data, c->data, 5 * sizeof(double)));
    }
    mi_optim_free(muon);
    mi_optim_free(adamw);
}
END_TEST

/* ---------------------------------------------------------------- deep momentum's memory */
START_TEST(deep_memory_inner_gradient_equals_autograd)
{
    mi_rng r;
    mi_rng_seed(&r, 110);
    const int64_t shapes[3][3] = {{5, 3, 0}, {7, 0, 0}, {2, 3, 4}};
    const int ranks[3] = {2, 1, 3};
    for (int s = 0; s < 3; s++) {
        mi_tensor *g = mi_randn(&r, MI_F64, ranks[s], shapes[s], 0, 0.01); /* any scale */
        int64_t c = shapes[s][ranks[s] - 1];
        mi_tensor *w1 = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(4, c), 0, 0.6), true);
        mi_tensor *w2 = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(c, 4), 0, 0.6), true);
        mi_tensor *L = mi_deep_memory_objective(w1, w2, g, 1e-8), *auto_g[2], *d1, *d2;
        ck_assert_int_eq(mi_grad(&L, NULL, 1, (mi_tensor *[]){w1, w2}, 2, false, auto_g), 0);
        ck_assert_int_eq(mi_deep_memory_grad(w1, w2, g, 1e-8, &d1, &d2), 0);
        for (int64_t i = 0; i < w1->numel; i++) {
            ck_assert_close(mi_get(d1, i), mi_get(auto_g[0], i), 1e-12);
            ck_assert_close(mi_get(d2, i), mi_get(auto_g[1], i), 1e-12);
        }
    }
}
END_TEST

static int objective_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    (void)ctx;
    out[0] = mi_deep_memory_objective(in[0], in[1], in[2], 1e-8);
    return out[0] ? 1 : -1;
}

static int memory_update_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    (void)n;
    const double *hp = ctx;
    mi_deep_memory mem = {.m = in[0], .w1 = in[1], .w2 = in[2]}, nxt;
    if (mi_deep_memory_update(&mem, in[3], hp[0], hp[1], 1e-8, &nxt, &out[3]) != 0) return -1;
    out[0] = nxt.m;
    out[1] = nxt.w1;
    out[2] = nxt.w2;
    return 4;
}

START_TEST(deep_memory_gradchecks)
{
    mi_rng r;
    mi_rng_seed(&r, 111);
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    mi_tensor *in[4] = {
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 5), 0, 1), true), /* M */
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(4, 5), 0, 0.5), true), /* W1 */
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(5, 4), 0, 0.5), true), /* W2 */
        mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 5), 0, 1), true), /* g */
    };
    mi_gradcheck_result res = mi_gradcheck(objective_fn, NULL, in + 1, 3, &o);
    ck_assert_msg(res.ok, "objective: %s", res.message);
    double hp[2] = {0.9, 0.3};
    res = mi_gradcheck(memory_update_fn, hp, in, 4, &o);
    ck_assert_msg(res.ok, "memory update: %s", res.message);
    ck_assert_int_gt(res.entries, 100);
    /* and second order (a hypergradient through the memory needs it) */
    res = mi_gradgradcheck(objective_fn, NULL, in + 1, 3, &o);
    ck_assert_msg(res.ok, "objective, second order: %s", res.message);
}
END_TEST

/* The linear memory (mem_hidden 0) is SGD with momentum α, bit for bit; with
 * the Newton–Schulz output (Eq. 24) it is Muon without Nesterov. */
START_TEST(deep_momentum_reduces_to_sgd_momentum_and_muon)
{
    mi_rng r;
    mi_rng_seed(&r, 112);
    for (int dti = 0; dti < 2; dti++) {
        mi_dtype dt = dti ? MI_F64 : MI_F32;
        mi_tensor *a = mi_randn(&r, dt, MI_SHAPE(4, 6), 0, 1), *b = mi_detach(a);
        mi_optim_hparams hd = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM), hs = mi_optim_defaults(MI_OPT_SGD);
        hd.mem_hidden = 0;
        hd.lr = hs.lr = 0.05;
        hd.momentum = hs.momentum = 0.9;
        mi_optim *od = mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, &a, 1, &hd);
        mi_optim *os = mi_optim_new_simple(MI_OPT_SGD, &b, 1, &hs);
        for (int s = 0; s < 6; s++) {
            a->grad = b->grad = mi_randn(&r, dt, MI_SHAPE(4, 6), 0, 1);
            ck_assert_int_eq(mi_optim_step(od), 0);
            ck_assert_int_eq(mi_optim_step(os), 0);
            ck_assert_msg(!memcmp(a->data, b->data, (size_t)a->numel * mi_dtype_size(dt)),
                          "%s step %d", mi_dtype_name(dt), s);
        }
        mi_optim_free(od);
        mi_optim_free(os);
    }
    mi_tensor *a = mi_randn(&r, MI_F64, MI_SHAPE(6, 4), 0, 1), *b = mi_detach(a);
    mi_optim_hparams hd = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM), hm = mi_optim_defaults(MI_OPT_MUON);
    hd.mem_hidden = 0;
    hd.output = MI_NL_OUT_NEWTON_SCHULZ;
    hd.lr = hm.lr = 0.02;
    hd.momentum = hm.momentum = 0.95;
    hm.nesterov = false;
    mi_optim *od = mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, &a, 1, &hd);
    mi_optim *om = mi_optim_new_simple(MI_OPT_MUON, &b, 1, &hm);
    for (int s = 0; s < 6; s++) {
        a->grad = b->grad = mi_randn(&r, MI_F64, MI_SHAPE(6, 4), 0, 1);
        ck_assert_int_eq(mi_optim_step(od), 0);
        ck_assert_int_eq(mi_optim_step(om), 0);
        /* equal up to the 1e-7 in X / (‖X‖_F + 1e-7): M and Muon's buffer differ
         * in scale by 1 − β, and the quintic is not scale-invariant */
        for (int i = 0; i < 24; i++) ck_assert_close(mi_get(a, i), mi_get(b, i), 1e-6);
    }
    mi_optim_free(od);
    mi_optim_free(om);
}
END_TEST

/* DMGD with an MLP memory against the memory update written out in plain C
 * loops (from the state the optimizer holds before each step). */
START_TEST(deep_momentum_mlp_follows_its_formula)
{
    mi_rng r;
    mi_rng_seed(&r, 113);
    enum { R = 3, C = 5, H = 4 };
    mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(R, C), 0, 1);
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM);
    h.mem_hidden = H;
    h.mem_lr = 0.5;
    h.lr = 0.1;
    h.momentum = 0.8;
    h.weight_decay = 0.01;
    h.nl_form = MI_NL_FORM_NORMALISED; /* the paper's form: tests/test_optim_nl_paper.c */
    mi_optim *o = mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, &p, 1, &h);
    p->grad = mi_randn(&r, MI_F64, MI_SHAPE(R, C), 0, 1);
    ck_assert_int_eq(mi_optim_step(o), 0);
    ck_assert_ptr_nonnull(mi_optim_state(o, 0, "mem_w1"));
    double mlp_norm = 0;
    for (int step = 0; step < 4; step++) {
        double P[R * C], M[R * C], W1[H * C], W2[C * H], G[R * C];
        for (int i = 0; i < R * C; i++) {
            P[i] = mi_get(p, i);
            M[i] = mi_get(mi_optim_state(o, 0, "momentum"), i);
        }
        for (int i = 0; i < H * C; i++) {
            W1[i] = mi_get(mi_optim_state(o, 0, "mem_w1"), i);
            W2[i] = mi_get(mi_optim_state(o, 0, "mem_w2"), i);
        }
        p->grad = mi_randn(&r, MI_F64, MI_SHAPE(R, C), 0, 1);
        ck_assert_int_eq(mi_optim_step(o), 0);
        /* g, ρ, Û */
        double rho = 0, K[R * C];
        for (int i = 0; i < R * C; i++) {
            G[i] = mi_get(p->grad, i) + h.weight_decay * P[i];
            rho += G[i] * G[i];
        }
        rho = sqrt(rho / (R * C));
        for (int i = 0; i < R * C; i++) K[i] = G[i] / (rho + h.eps);
        /* H = tanh(K W1ᵀ), dW2 = Kᵀ H / R, dW1 = ((K W2) ⊙ (1 − H²))ᵀ K / R */
        double Hm[R * H], dW1[H * C] = {0}, dW2[C * H] = {0};
        for (int i = 0; i < R; i++)
            for (int j = 0; j < H; j++) {
                double a = 0;
                for (int k = 0; k < C; k++) a += K[i * C + k] * W1[j * C + k];
                Hm[i * H + j] = tanh(a);
            }
        for (int i = 0; i < R; i++)
            for (int j = 0; j < H; j++) {
                double kw = 0;
                for (int k = 0; k < C; k++) kw += K[i * C + k] * W2[k * H + j];
                double dA = kw * (1 - Hm[i * H + j] * Hm[i * H + j]);
                for (int k = 0; k < C; k++) {
                    dW1[j * C + k] += dA * K[i * C + k] / R;
                    dW2[k * H + j] += K[i * C + k] * Hm[i * H + j] / R;
                }
            }
        for (int i = 0; i < H * C; i++) {
            W2[i] = h.momentum * W2[i] - h.mem_lr * dW2[i];
            W1[i] = W1[i] - h.mem_lr * dW1[i];
        }
        /* Δ = M' + ρ tanh(K W1'ᵀ) W2'ᵀ, p' = p + lr Δ */
        for (int i = 0; i < R; i++) {
            double hn[H];
            for (int j = 0; j < H; j++) {
                double a = 0;
                for (int k = 0; k < C; k++) a += K[i * C + k] * W1[j * C + k];
                hn[j] = tanh(a);
            }
            for (int k = 0; k < C; k++) {
                double f = 0;
                for (int j = 0; j < H; j++) f += hn[j] * W2[k * H + j];
                double m = h.momentum * M[i * C + k] - G[i * C + k];
                double want = P[i * C + k] + h.lr * (m + rho * f);
                mlp_norm += fabs(rho * f);
                ck_assert_close(mi_get(p, i * C + k), want, 1e-12);
            }
        }
    }
    ck_assert_msg(mlp_norm > 1e-3, "the MLP part of the memory contributed nothing (%g)", mlp_norm);
    mi_optim_free(o);
}
END_TEST

/* ---------------------------------------------------------------- every rule is differentiable */
typedef struct fctx {
    mi_optim *o;
    mi_tensor *x; /* ℓ2-GD inputs */
} fctx;

/* p after two functional steps with gradients g1, g2 and tensor lr, momentum. */
static int two_steps_fn(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    (void)n;
    fctx *f = c;
    mi_optim_fstate *fs = mi_optim_fstate_new(f->o);
    mi_hp_tensors hpt = {.lr = in[3], .momentum = in[4]};
    int kind = mi_optim_kind_of(f->o);
    if (kind == MI_OPT_ADAM || kind == MI_OPT_ADAMW) hpt = (mi_hp_tensors){.lr = in[3], .beta1 = in[4]};
    if (kind == MI_OPT_L2_GD) hpt = (mi_hp_tensors){.lr = in[3], .weight_decay = in[4]};
    mi_tensor *p = in[0];
    for (int s = 0; s < 2; s++) {
        if (kind == MI_OPT_L2_GD && mi_optim_set_inputs(f->o, 0, f->x) != 0) return -1;
        if (mi_optim_step_functional(f->o, fs, &p, &in[1 + s], &hpt, &p) != 0) return -1;
    }
    out[0] = p;
    return 1;
}

START_TEST(every_rule_gradchecks_through_two_functional_steps)
{
    mi_rng r;
    mi_rng_seed(&r, 120);
    mi_gradcheck_opts opts = MI_GRADCHECK_DEFAULTS;
    for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
        mi_tensor *shape_of = mi_zeros(MI_F64, MI_SHAPE(3, 4));
        mi_optim_hparams h = mi_optim_defaults(kind);
        h.eps = 1e-3; /* keep √v + ε away from a kink at 0 */
        h.momentum = kind == MI_OPT_SGD ? 0.9 : h.momentum;
        h.weight_decay = 0.1;
        h.mem_hidden = 3;
        h.mem_lr = 0.5;
        h.delta = 0.5;
        if (kind == MI_OPT_DEEP_MOMENTUM) h.output = MI_NL_OUT_NEWTON_SCHULZ;
        if (kind == MI_OPT_DELTA_MOMENTUM) h.precond = true;
        fctx f = {.o = mi_optim_new_simple(kind, &shape_of, 1, &h),
                  .x = mi_randn(&r, MI_F64, MI_SHAPE(2, 4), 0, 1)};
        ck_assert_ptr_nonnull(f.o);
        mi_tensor *in[5] = {
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), true),
            mi_requires_grad(mi_scalar(MI_F64, 0.05), true),
            mi_requires_grad(mi_scalar(MI_F64, kind == MI_OPT_L2_GD ? 0.1 : 0.8), true),
        };
        mi_gradcheck_result res = mi_gradcheck(two_steps_fn, &f, in, 5, &opts);
        ck_assert_msg(res.ok, "%s: %s", mi_optim_kind_name(kind), res.message);
        ck_assert_int_eq(res.entries, 12 * (12 * 3 + 2));
        mi_optim_free(f.o);
    }
}
END_TEST

/* ---------------------------------------------------------------- hypergradients */
typedef struct hyper_ctx {
    mi_tensor *w0, *x, *y, *xv, *yv;
    int k;
    bool generic; /* through mi_optim_step_functional (AdamW) instead of SGD */
    mi_optim *o;
} hyper_ctx;

static mi_tensor *lin_loss(mi_tensor *w, mi_tensor *x, mi_tensor *y)
{
    return mi_mean(mi_square(mi_sub(mi_tanh(mi_matmul_t(x, w, false, true)), y)), MI_ALL, false);
}

/* validation loss after k steps, as a function of (lr, momentum) */
static int hyper_fn(mi_tensor *const *in, int n, mi_tensor **out, void *c)
{
    (void)n;
    hyper_ctx *h = c;
    mi_tensor *w = mi_requires_grad(mi_detach(h->w0), true), *buf = NULL, *g;
    mi_optim_fstate *fs = h->generic ? mi_optim_fstate_new(h->o) : NULL;
    for (int s = 0; s < h->k; s++) {
        mi_tensor *L = lin_loss(w, h->x, h->y);
        if (mi_grad(&L, NULL, 1, &w, 1, true, &g) != 0) return -1;
        if (h->generic) {
            mi_hp_tensors hpt = {.lr = in[0], .beta1 = in[1]};
            if (mi_optim_step_functional(h->o, fs, &w, &g, &hpt, &w) != 0) return -1;
        } else if (mi_sgd_step_functional(&w, &g, buf ? &buf : NULL, 1, in[0], in[1], 0, 0, true,
                                          &w, &buf) != 0) {
            return -1;
        }
    }
    out[0] = lin_loss(w, h->xv, h->yv);
    return out[0] ? 1 : -1;
}

START_TEST(hypergradient_matches_finite_differences)
{
    mi_rng r;
    mi_rng_seed(&r, 130);
    hyper_ctx h = {
        .w0 = mi_randn(&r, MI_F64, MI_SHAPE(2, 3), 0, 0.5),
        .x = mi_randn(&r, MI_F64, MI_SHAPE(6, 3), 0, 1),
        .y = mi_randn(&r, MI_F64, MI_SHAPE(6, 2), 0, 0.5),
        .xv = mi_randn(&r, MI_F64, MI_SHAPE(5, 3), 0, 1),
        .yv = mi_randn(&r, MI_F64, MI_SHAPE(5, 2), 0, 0.5),
        .k = 4,
    };
    mi_gradcheck_opts o = MI_GRADCHECK_DEFAULTS;
    mi_tensor *hp[2] = {mi_requires_grad(mi_scalar(MI_F64, 0.3), true),
                        mi_requires_grad(mi_scalar(MI_F64, 0.7), true)};
    /* d(loss after 4 Nesterov SGD steps)/d(lr, momentum) */
    mi_gradcheck_result res = mi_gradcheck(hyper_fn, &h, hp, 2, &o);
    ck_assert_msg(res.ok, "sgd: %s", res.message);
    ck_assert_int_eq(res.entries, 2);
    /* the same by hand: mi_grad of the final loss against a central difference in lr */
    mi_tensor *L, *dl;
    ck_assert_int_eq(hyper_fn(hp, 2, &L, &h), 1);
    ck_assert_int_eq(mi_grad(&L, NULL, 1, &hp[0], 1, false, &dl), 0);
    double e = 1e-6, lr = mi_item(hp[0]), fd[2];
    for (int side = 0; side < 2; side++) {
        mi_tensor *lp = mi_scalar(MI_F64, lr + (side ? -e : e)), *Lp;
        ck_assert_int_eq(hyper_fn((mi_tensor *[]){lp, mi_detach(hp[1])}, 2, &Lp, &h), 1);
        fd[side] = mi_item(Lp);
    }
    ck_assert_close(mi_item(dl), (fd[0] - fd[1]) / (2 * e), 1e-7);
    ck_assert_msg(fabs(mi_item(dl)) > 1e-4, "hypergradient too small to mean anything: %g", mi_item(dl));
    /* through the generic functional step: AdamW, d/d(lr, β₁) */
    mi_tensor *shape_of = mi_zeros(MI_F64, MI_SHAPE(2, 3));
    h.generic = true;
    h.o = mi_optim_new_simple(MI_OPT_ADAMW, &shape_of, 1, NULL);
    mi_tensor *hp2[2] = {mi_requires_grad(mi_scalar(MI_F64, 0.05), true),
                         mi_requires_grad(mi_scalar(MI_F64, 0.8), true)};
    res = mi_gradcheck(hyper_fn, &h, hp2, 2, &o);
    ck_assert_msg(res.ok, "adamw: %s", res.message);
    mi_optim_free(h.o);
}
END_TEST

/* Learning a learning rate: a few steps of gradient descent on log lr with
 * the hypergradient lower the validation loss reached after k steps. */
START_TEST(learning_a_learning_rate)
{
    mi_rng r;
    mi_rng_seed(&r, 131);
    mi_tensor *teacher = mi_randn(&r, MI_F64, MI_SHAPE(2, 3), 0, 1);
    hyper_ctx h = {
        .w0 = mi_randn(&r, MI_F64, MI_SHAPE(2, 3), 0, 0.5),
        .x = mi_randn(&r, MI_F64, MI_SHAPE(16, 3), 0, 1),
        .k = 5,
    };
    h.y = mi_tanh(mi_matmul_t(h.x, teacher, false, true));
    h.xv = h.x;
    h.yv = h.y;
    double log_lr = log(0.01), first = 0, last = 0;
    for (int it = 0; it < 20; it++) {
        mi_tensor *ll = mi_requires_grad(mi_scalar(MI_F64, log_lr), true), *L, *d;
        mi_tensor *in[2] = {mi_exp(ll), mi_scalar(MI_F64, 0.5)};
        ck_assert_int_eq(hyper_fn(in, 2, &L, &h), 1);
        ck_assert_int_eq(mi_grad(&L, NULL, 1, &ll, 1, false, &d), 0);
        if (it == 0) first = mi_item(L);
        last = mi_item(L);
        log_lr -= 5.0 * mi_item(d);
    }
    fprintf(stderr, "learned lr %.4g: loss after 5 steps %.4g → %.4g\n", exp(log_lr), first, last);
    ck_assert_msg(last < 0.1 * first, "loss after learning lr: %g → %g", first, last);
}
END_TEST

/* ---------------------------------------------------------------- every optimizer descends */
/* Settings each kind is run with below (defaults, except where stated). */
static mi_optim_hparams train_hp(mi_optim_kind kind, bool mlp)
{
    mi_optim_hparams h = mi_optim_defaults(kind);
    switch (kind) {
    case MI_OPT_SGD: h.lr = mlp ? 0.5 : 0.1; h.momentum = 0.9; break;
    case MI_OPT_ADAM: h.lr = mlp ? 0.02 : 0.05; break;
    case MI_OPT_ADAMW: h.lr = mlp ? 0.02 : 0.05; break;
    case MI_OPT_MUON: h.lr = mlp ? 0.02 : 0.1; h.aux_lr = 0.02; break;
    case MI_OPT_PRECOND_MOMENTUM: h.lr = mlp ? 0.002 : 0.005; break;
    case MI_OPT_DELTA_MOMENTUM: h.lr = mlp ? 0.5 : 0.1; break;
    case MI_OPT_DEEP_MOMENTUM: h.lr = mlp ? 0.05 : 0.05; h.mem_hidden = 8; h.mem_lr = mlp ? 0.5 : 0.05; break;
    case MI_OPT_L2_GD: h.lr = mlp ? 1.0 : 0.2; h.delta = 0.05; break;
    default: break;
    }
    return h;
}

/* ½ Σ d_j (W_ij − T_ij)² + ½ ‖b − t‖², d_j = 1 … 6 */
static mi_tensor *quad_loss(mi_tensor *W, mi_tensor *b, mi_tensor *T, mi_tensor *t, mi_tensor *d)
{
    mi_tensor *fw = mi_sum(mi_mul(d, mi_square(mi_sub(W, T))), MI_ALL, false);
    mi_tensor *fb = mi_sum(mi_square(mi_sub(b, t)), MI_ALL, false);
    return mi_mul_scalar(mi_add(fw, fb), 0.5);
}

START_TEST(every_optimizer_decreases_a_convex_quadratic)
{
    mi_rng r;
    mi_rng_seed(&r, 140);
    mi_tensor *T = mi_randn(&r, MI_F64, MI_SHAPE(4, 6), 0, 1), *t = mi_randn(&r, MI_F64, MI_SHAPE(6), 0, 1);
    mi_tensor *d = mi_add_scalar(mi_arange(MI_F64, 6), 1.0);
    int bad_q = 0;
    for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
        mi_rng_seed(&r, 141);
        mi_tensor *W = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(4, 6), 0, 1), true);
        mi_tensor *b = mi_requires_grad(mi_randn(&r, MI_F64, MI_SHAPE(6), 0, 1), true);
        mi_optim_hparams h = train_hp(kind, false);
        /* The paper's Eq. 22 and 23 take the raw gradient, whose entries reach
         * ~10 here: the Gram erase α − σ² diverges and Eq. 23's tanh keys
         * saturate (its read-out has a 1 − H² factor). Their normalised forms
         * are scale-free; the paper's forms train the MLP below. */
        if (kind == MI_OPT_DELTA_MOMENTUM || kind == MI_OPT_DEEP_MOMENTUM)
            h.nl_form = MI_NL_FORM_NORMALISED;
        mi_optim *o = mi_optim_new_simple(kind, (mi_tensor *[]){W, b}, 2, &h);
        /* a cosine to 0: Muon's orthogonalised step does not shrink with the
         * gradient, so at a fixed lr it circles the minimum at a distance ∝ lr */
        mi_schedule sched = {.kind = MI_SCHED_WARMUP_COSINE, .lr = 1, .warmup = 0, .total = 200};
        double first = 0, last = 0;
        mi_scope *step = mi_scope_new("step");
        for (int s = 0; s < 200; s++) {
            ck_assert_int_eq(mi_optim_apply_schedule(o, &sched), 0);
            mi_scope_enter(step);
            mi_optim_zero_grad(o);
            mi_tensor *L = quad_loss(W, b, T, t, d);
            if (s == 0) first = mi_item(L);
            ck_assert_int_eq(mi_backward(L), 0);
            ck_assert_int_eq(mi_optim_step(o), 0);
            mi_scope_leave();
            mi_scope_reset(step);
        }
        mi_scope_enter(step);
        last = mi_item(quad_loss(W, b, T, t, d));
        mi_scope_leave();
        mi_scope_free(step);
        fprintf(stderr, "quadratic %-16s %10.4g → %10.4g (÷%.3g)\n", mi_optim_kind_name(kind), first,
                last, first / last);
        if (!(last < first / 100)) bad_q++;
        mi_optim_free(o);
    }
    ck_assert_int_eq(bad_q, 0);
}
END_TEST

/* The two-layer MLP f(x) = W2 tanh(W1 x) (tests/test_higher_order.c),
 * f32, fitting a random teacher of the same shape; 300 full-batch steps. */
START_TEST(every_optimizer_trains_the_small_mlp)
{
    mi_rng r;
    mi_rng_seed(&r, 150);
    mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(64, 8), 0, 1);
    mi_tensor *t1 = mi_randn(&r, MI_F32, MI_SHAPE(32, 8), 0, 0.5);
    mi_tensor *t2 = mi_randn(&r, MI_F32, MI_SHAPE(4, 32), 0, 0.5);
    mi_tensor *y = mi_matmul_t(mi_tanh(mi_matmul_t(x, t1, false, true)), t2, false, true);
    for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
        mi_rng_seed(&r, 151);
        mi_tensor *w1 = mi_requires_grad(mi_randn(&r, MI_F32, MI_SHAPE(32, 8), 0, 0.3), true);
        mi_tensor *w2 = mi_requires_grad(mi_randn(&r, MI_F32, MI_SHAPE(4, 32), 0, 0.3), true);
        mi_optim_hparams h = train_hp(kind, true);
        mi_optim *o = mi_optim_new_simple(kind, (mi_tensor *[]){w1, w2}, 2, &h);
        mi_scope *step = mi_scope_new("step");
        double first = 0, last = 0;
        for (int s = 0; s < 300; s++) {
            mi_scope_enter(step);
            mi_optim_zero_grad(o);
            mi_tensor *hdn = mi_tanh(mi_matmul_t(x, w1, false, true));
            mi_tensor *L = mi_mean(mi_square(mi_sub(mi_matmul_t(hdn, w2, false, true), y)), MI_ALL, false);
            if (s == 0) first = mi_item(L);
            last = mi_item(L);
            ck_assert_int_eq(mi_backward(L), 0);
            if (kind == MI_OPT_L2_GD) {
                mi_optim_set_inputs(o, 0, x);
                mi_optim_set_inputs(o, 1, mi_detach(hdn));
            }
            ck_assert_msg(mi_optim_step(o) == 0, "%s", mi_error());
            mi_scope_leave();
            mi_scope_reset(step);
        }
        mi_scope_free(step);
        fprintf(stderr, "mlp %-16s %10.4g → %10.4g (÷%.3g)\n", mi_optim_kind_name(kind), first, last,
                first / last);
        ck_assert_msg(last < first / 10, "%s: %g → %g", mi_optim_kind_name(kind), first, last);
        mi_optim_free(o);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("optim_nested");
    TCase *ns = tcase_slow("muon");
    tcase_add_test(ns, newton_schulz_of_a_diagonal_is_the_scalar_iteration);
    tcase_add_test(ns, newton_schulz_output_is_near_orthogonal);
    tcase_add_test(ns, muon_follows_its_formula);
    suite_add_tcase(s, ns);
    TCase *nl = tcase_slow("nested-learning");
    tcase_add_test(nl, deep_memory_inner_gradient_equals_autograd);
    tcase_add_test(nl, deep_memory_gradchecks);
    tcase_add_test(nl, deep_momentum_reduces_to_sgd_momentum_and_muon);
    tcase_add_test(nl, deep_momentum_mlp_follows_its_formula);
    tcase_add_test(nl, every_rule_gradchecks_through_two_functional_steps);
    suite_add_tcase(s, nl);
    TCase *hg = tcase_slow("hypergradients");
    tcase_add_test(hg, hypergradient_matches_finite_differences);
    tcase_add_test(hg, learning_a_learning_rate);
    suite_add_tcase(s, hg);
    TCase *tr = tcase_slow("training");
    tcase_add_test(tr, every_optimizer_decreases_a_convex_quadratic);
    tcase_add_test(tr, every_optimizer_trains_the_small_mlp);
    suite_add_tcase(s, tr);
    return s;
}
