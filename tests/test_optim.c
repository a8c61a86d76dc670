/* Outer optimizers, part 1: the common interface, closed forms with
 * degenerate hyperparameters, multi-step runs against the update formulas
 * written out here, PyTorch 1.13 reference trajectories, schedules and clipping.
 * State save → load → continue, gradient accumulation and argument errors
 * are in test_optim_state.c; the Nested Learning memories, Muon's band, training and
 * hypergradients in test_optim_nested.c. */
#include <stdio.h>
#include <unistd.h>

#include "data/optim_reference.h"
#include "harness.h"
#include "optim/optim.h"

static mi_tensor *t_from(mi_dtype dt, int rank, const int64_t *shape, const double *v)
{
    mi_tensor *t = mi_tensor_new(dt, rank, shape);
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, v[i]);
    return t;
}

/* Asserts |a_i − b_i| ≤ tol for all i. */
static void assert_all_close(const mi_tensor *a, const double *b, double tol, const char *what)
{
    for (int64_t i = 0; i < a->numel; i++)
        ck_assert_msg(fabs(mi_get(a, i) - b[i]) <= tol, "%s[%lld] = %.17g, expected %.17g", what,
                      (long long)i, mi_get(a, i), b[i]);
}

static double sgn(double x) { return (x > 0) - (x < 0); }

/* ---------------------------------------------------------------- closed forms */

/* lr 1, no momentum: p − g, bit for bit. */
START_TEST(sgd_lr_one_is_p_minus_g)
{
    mi_rng r;
    mi_rng_seed(&r, 1);
    mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(3, 5), 0, 1), *p0 = mi_detach(p);
    p->grad = mi_randn(&r, MI_F64, MI_SHAPE(3, 5), 0, 1);
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_SGD);
    h.lr = 1;
    mi_optim *o = mi_optim_new_simple(MI_OPT_SGD, &p, 1, &h);
    ck_assert_int_eq(mi_optim_step(o), 0);
    for (int i = 0; i < 15; i++) ck_assert(mi_get(p, i) == mi_get(p0, i) - mi_get(p->grad, i));
    ck_assert_ptr_null(mi_optim_state(o, 0, "momentum_buffer"));
    mi_optim_free(o);
}
END_TEST

/* Adam and AdamW with β₁ = β₂ = 0 and ε = 0: m = g, v = g², no bias
 * correction, so the step is lr·sign(g); AdamW first shrinks p by 1 − lr·λ. */
START_TEST(adam_with_zero_betas_steps_by_sign)
{
    mi_rng r;
    mi_rng_seed(&r, 2);
    for (int kind = MI_OPT_ADAM; kind <= MI_OPT_ADAMW; kind++) {
        mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(4, 3), 0, 1), *p0 = mi_detach(p);
        mi_optim_hparams h = mi_optim_defaults(kind);
        h.lr = 0.25;
        h.beta1 = h.beta2 = 0;
        h.eps = 0;
        h.weight_decay = kind == MI_OPT_ADAMW ? 0.5 : 0;
        mi_optim *o = mi_optim_new_simple(kind, &p, 1, &h);
        for (int step = 0; step < 3; step++) {
            mi_tensor *before = mi_detach(p);
            p->grad = mi_randn(&r, MI_F64, MI_SHAPE(4, 3), 0, 1);
            ck_assert_int_eq(mi_optim_step(o), 0);
            for (int i = 0; i < 12; i++) {
                double want = mi_get(before, i) * (1 - 0.25 * h.weight_decay) -
                              0.25 * sgn(mi_get(p->grad, i));
                ck_assert_msg(mi_get(p, i) == want, "%s step %d [%d]: %.17g vs %.17g",
                              mi_optim_kind_name(kind), step, i, mi_get(p, i), want);
            }
        }
        (void)p0;
        ck_assert_int_eq(mi_optim_steps(o), 3);
        mi_optim_free(o);
    }
}
END_TEST

/* Nested Learning's momentum memories with degenerate settings. */
START_TEST(nested_momentum_closed_forms)
{
    mi_rng r;
    mi_rng_seed(&r, 3);
    mi_tensor *g1 = mi_randn(&r, MI_F64, MI_SHAPE(2, 5), 0, 1);
    mi_tensor *g2 = mi_randn(&r, MI_F64, MI_SHAPE(2, 5), 0, 1);
    /* Eq. 20 with β₂ = 0, ε = 0: P g = sign(g); m₂ = α m₁ − sign(g₂) = −α s₁ − s₂. */
    {
        mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(2, 5), 0, 1), *p0 = mi_detach(p);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_PRECOND_MOMENTUM);
        h.lr = 0.5;
        h.momentum = 0.75;
        h.beta2 = 0;
        h.eps = 0;
        mi_optim *o = mi_optim_new_simple(MI_OPT_PRECOND_MOMENTUM, &p, 1, &h);
        p->grad = g1;
        ck_assert_int_eq(mi_optim_step(o), 0);
        p->grad = g2;
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < 10; i++) {
            double s1 = sgn(mi_get(g1, i)), s2 = sgn(mi_get(g2, i));
            ck_assert_close(mi_get(p, i), mi_get(p0, i) - 0.5 * s1 + 0.5 * (-0.75 * s1 - s2), 1e-15);
        }
        mi_optim_free(o);
    }
    /* Eq. 22, normalised form, with α = 1, β = 1, ε = 0 and a constant
     * gradient: the delta rule replaces the momentum instead of accumulating
     * it, m stays −g:
     * p₂ = p₀ − 2 lr g (plain momentum would give p₀ − 3 lr g). */
    {
        mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(2, 5), 0, 1), *p0 = mi_detach(p);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_DELTA_MOMENTUM);
        h.lr = 0.1;
        h.momentum = 1;
        h.delta = 1;
        h.eps = 0;
        h.nl_form = MI_NL_FORM_NORMALISED;
        mi_optim *o = mi_optim_new_simple(MI_OPT_DELTA_MOMENTUM, &p, 1, &h);
        for (int s = 0; s < 2; s++) {
            p->grad = g1;
            ck_assert_int_eq(mi_optim_step(o), 0);
        }
        for (int i = 0; i < 10; i++)
            ck_assert_close(mi_get(p, i), mi_get(p0, i) - 0.2 * mi_get(g1, i), 1e-14);
        /* and with β = 0 it is heavy-ball momentum: m₃ = α m₂ − g = −2g */
        h.delta = 0;
        *mi_optim_group_hparams(o, 0) = h;
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < 10; i++)
            ck_assert_close(mi_get(p, i), mi_get(p0, i) - 0.4 * mi_get(g1, i), 1e-14);
        mi_optim_free(o);
    }
    /* Eq. 23 with a linear memory (mem_hidden 0) and α = 0: p − lr g. */
    {
        mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(2, 5), 0, 1), *p0 = mi_detach(p);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM);
        h.mem_hidden = 0;
        h.momentum = 0;
        h.lr = 0.5;
        mi_optim *o = mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, &p, 1, &h);
        p->grad = g1;
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < 10; i++)
            ck_assert(mi_get(p, i) == mi_get(p0, i) + 0.5 * -mi_get(g1, i));
        mi_optim_free(o);
    }
    /* Eq. 28 with x = e₀, β = 1, lr = 0: W (I − e₀e₀ᵀ) zeroes column 0, exactly. */
    {
        mi_tensor *w = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), *w0 = mi_detach(w);
        mi_tensor *x = mi_zeros(MI_F64, MI_SHAPE(4));
        mi_set(x, 0, 1.0);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_L2_GD);
        h.lr = 0;
        h.eps = 0;
        mi_optim *o = mi_optim_new_simple(MI_OPT_L2_GD, &w, 1, &h);
        w->grad = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1);
        ck_assert_int_eq(mi_optim_set_inputs(o, 0, x), 0);
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                ck_assert(mi_get(w, i * 4 + j) == (j == 0 ? 0.0 : mi_get(w0, i * 4 + j)));
        /* the inputs were used once: the next step is plain GD (Eq. 25) */
        h.lr = 0.5;
        *mi_optim_group_hparams(o, 0) = h;
        mi_tensor *before = mi_detach(w);
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < 12; i++)
            ck_assert(mi_get(w, i) == mi_get(before, i) - 0.5 * mi_get(w->grad, i));
        mi_optim_free(o);
    }
}
END_TEST

/* ---------------------------------------------------------------- formulas written out */
#define NP 12

/* Runs `steps` steps of an optimizer on one [3, 4] f64 parameter with fresh
 * random gradients; returns the trajectory's gradients and parameters. */
typedef struct traj {
    double p0[NP], g[6][NP], p[6][NP];
} traj;

static void run_traj(mi_optim_kind kind, const mi_optim_hparams *h, int steps, uint64_t seed,
                     traj *t)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *p = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1);
    for (int i = 0; i < NP; i++) t->p0[i] = mi_get(p, i);
    mi_optim *o = mi_optim_new_simple(kind, &p, 1, h);
    ck_assert_ptr_nonnull(o);
    for (int s = 0; s < steps; s++) {
        p->grad = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1);
        for (int i = 0; i < NP; i++) t->g[s][i] = mi_get(p->grad, i);
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < NP; i++) t->p[s][i] = mi_get(p, i);
    }
    mi_optim_free(o);
}

/* Adam's and AdamW's step in place (one loop, what mi_optim_step runs with
 * number hyperparameters) against the same rule as recorded ops
 * (mi_optim_step_functional), f32 and f64, five steps, a decay mask on one
 * of two parameters: equal to f32's and f64's rounding. */
START_TEST(adam_in_place_matches_its_ops)
{
    for (int dt = 0; dt < 2; dt++)
        for (int kind = MI_OPT_ADAM; kind <= MI_OPT_ADAMW; kind++) {
            mi_dtype t = dt ? MI_F64 : MI_F32;
            mi_rng r;
            mi_rng_seed(&r, 7 + (uint64_t)(2 * dt + kind));
            mi_tensor *p[2] = {mi_randn(&r, t, MI_SHAPE(5, 7), 0, 1), mi_randn(&r, t, MI_SHAPE(9), 0, 1)};
            mi_tensor *q[2] = {mi_tensor_to(p[0], t), mi_tensor_to(p[1], t)};
            mi_optim_hparams h = mi_optim_defaults(kind);
            h.lr = 0.05, h.beta1 = 0.8, h.beta2 = 0.9, h.eps = 1e-4, h.weight_decay = 0.3;
            mi_param_group g[2] = {{.params = p, .n = 1, .hp = h}, {.params = p + 1, .n = 1, .hp = h}};
            g[1].hp.weight_decay = 0;
            mi_optim *o = mi_optim_new(kind, g, 2);
            ck_assert_msg(o != NULL, "%s", mi_error());
            mi_optim_fstate *fs = mi_optim_fstate_new(o);
            ck_assert_ptr_nonnull(fs);
            for (int s = 0; s < 5; s++) {
                mi_tensor *gr[2] = {mi_randn(&r, t, MI_SHAPE(5, 7), 0, 1),
                                    mi_randn(&r, t, MI_SHAPE(9), 0, 1)};
                mi_set(gr[0], 3, 0), mi_set(gr[1], s, 0); /* v = 0 where g has been 0 */
                for (int i = 0; i < 2; i++) p[i]->grad = gr[i];
                ck_assert_msg(mi_optim_step(o) == 0, "%s", mi_error());
                ck_assert_msg(mi_optim_step_functional(o, fs, q, gr, NULL, q) == 0, "%s",
                              mi_error());
                for (int i = 0; i < 2; i++)
                    for (int64_t e = 0; e < p[i]->numel; e++) {
                        double a = mi_get(p[i], e), b = mi_get(q[i], e);
                        ck_assert_msg(fabs(a - b) <= (dt ? 1e-14 : 1e-6) * (1 + fabs(b)),
                                      "%s %s step %d param %d [%lld]: in place %.17g, ops %.17g",
                                      mi_optim_kind_name(kind), mi_dtype_name(t), s, i,
                                      (long long)e, a, b);
                    }
                for (int i = 0; i < 2; i++) p[i]->grad = NULL;
            }
            mi_optim_free(o);
        }
    /* the fused step's argument checks */
    mi_tensor *p = mi_zeros(MI_F32, MI_SHAPE(4)), *m = mi_zeros(MI_F32, MI_SHAPE(4));
    mi_adam_step s = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .step = 1};
    ck_assert_int_eq(mi_adam_update(p, m, mi_zeros(MI_F32, MI_SHAPE(5)), m, &s), -1);
    ck_assert_error_has("adam_update: p f32 [4], m, v and g must all be its dtype and shape, "
                        "got f32 [5]");
    mi_error_clear();
    ck_assert_int_eq(mi_adam_update(p, m, m, mi_zeros(MI_F64, MI_SHAPE(4)), &s), -1);
    ck_assert_error_has("got f64 [4]");
    mi_error_clear();
}
END_TEST

START_TEST(sgd_and_adam_follow_their_formulas)
{
    const int S = 6;
    /* SGD: μ 0.8, τ 0.3, λ 0.05, and Nesterov */
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_SGD);
        h.lr = 0.07;
        h.momentum = 0.8;
        h.dampening = nesterov ? 0 : 0.3;
        h.weight_decay = 0.05;
        h.nesterov = nesterov;
        traj t;
        run_traj(MI_OPT_SGD, &h, S, 10 + nesterov, &t);
        double p[NP], b[NP];
        memcpy(p, t.p0, sizeof p);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < NP; i++) {
                double g = t.g[s][i] + h.weight_decay * p[i];
                b[i] = s == 0 ? g : h.momentum * b[i] + (1 - h.dampening) * g;
                double d = nesterov ? g + h.momentum * b[i] : b[i];
                p[i] -= h.lr * d;
                ck_assert_close(t.p[s][i], p[i], 1e-13);
            }
    }
    /* Adam (L2) and AdamW (decoupled) */
    for (int kind = MI_OPT_ADAM; kind <= MI_OPT_ADAMW; kind++) {
        mi_optim_hparams h = mi_optim_defaults(kind);
        h.lr = 0.03;
        h.beta1 = 0.8;
        h.beta2 = 0.95;
        h.eps = 1e-3;
        h.weight_decay = 0.2;
        traj t;
        run_traj(kind, &h, S, 20 + kind, &t);
        double p[NP], m[NP] = {0}, v[NP] = {0};
        memcpy(p, t.p0, sizeof p);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < NP; i++) {
                double g = t.g[s][i];
                if (kind == MI_OPT_ADAM) g += h.weight_decay * p[i];
                else p[i] *= 1 - h.lr * h.weight_decay;
                m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
                v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
                double mh = m[i] / (1 - pow(h.beta1, s + 1)), vh = v[i] / (1 - pow(h.beta2, s + 1));
                p[i] -= h.lr * mh / (sqrt(vh) + h.eps);
                ck_assert_close(t.p[s][i], p[i], 1e-13);
            }
    }
}
END_TEST

START_TEST(nested_momentum_follows_its_formulas)
{
    const int S = 6;
    /* Eq. 20 (RMS preconditioner) and Eq. 22's normalised form with and
     * without it (the paper's form: tests/test_optim_nl_paper.c) */
    for (int c = 0; c < 3; c++) {
        mi_optim_kind kind = c == 0 ? MI_OPT_PRECOND_MOMENTUM : MI_OPT_DELTA_MOMENTUM;
        mi_optim_hparams h = mi_optim_defaults(kind);
        h.lr = 0.05;
        h.momentum = 0.7;
        h.beta2 = 0.9;
        h.eps = 1e-3;
        h.delta = 0.6;
        h.weight_decay = 0.1;
        h.precond = c != 2;
        h.nl_form = MI_NL_FORM_NORMALISED;
        traj t;
        run_traj(kind, &h, S, 30 + c, &t);
        double p[NP], m[NP] = {0}, v[NP] = {0};
        memcpy(p, t.p0, sizeof p);
        for (int s = 0; s < S; s++) {
            double g[NP], pg[NP], nrm = 0, dot = 0;
            for (int i = 0; i < NP; i++) {
                g[i] = t.g[s][i] + h.weight_decay * p[i];
                v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
                pg[i] = h.precond ? g[i] / (sqrt(v[i]) + h.eps) : g[i];
                nrm += g[i] * g[i];
            }
            nrm = sqrt(nrm) + h.eps;
            for (int i = 0; i < NP; i++) dot += g[i] / nrm * m[i];
            for (int i = 0; i < NP; i++) {
                double along = kind == MI_OPT_DELTA_MOMENTUM ? h.delta * g[i] / nrm * dot : 0;
                m[i] = h.momentum * m[i] - along - pg[i];
                p[i] += h.lr * m[i];
                ck_assert_msg(fabs(t.p[s][i] - p[i]) < 1e-13, "case %d step %d [%d]: %.17g vs %.17g",
                              c, s, i, t.p[s][i], p[i]);
            }
        }
    }
    /* Eq. 28–29 with a batch of inputs: W − (β/B)(W X̂ᵀ)X̂ − lr g */
    {
        mi_rng r;
        mi_rng_seed(&r, 40);
        mi_tensor *w = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), *w0 = mi_detach(w);
        mi_tensor *x = mi_randn(&r, MI_F64, MI_SHAPE(5, 4), 0, 2);
        w->grad = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1);
        mi_optim_hparams h = mi_optim_defaults(MI_OPT_L2_GD);
        h.lr = 0.1;
        h.delta = 0.7;
        h.eps = 1e-6;
        h.weight_decay = 0.05;
        mi_optim *o = mi_optim_new_simple(MI_OPT_L2_GD, &w, 1, &h);
        ck_assert_int_eq(mi_optim_set_inputs(o, 0, x), 0);
        ck_assert_int_eq(mi_optim_step(o), 0);
        double xh[5][4], want[12];
        for (int b = 0; b < 5; b++) {
            double s = 0;
            for (int j = 0; j < 4; j++) s += mi_get(x, b * 4 + j) * mi_get(x, b * 4 + j);
            for (int j = 0; j < 4; j++) xh[b][j] = mi_get(x, b * 4 + j) / sqrt(s + h.eps);
        }
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                double proj = 0;
                for (int b = 0; b < 5; b++) {
                    double wx = 0;
                    for (int k = 0; k < 4; k++) wx += mi_get(w0, i * 4 + k) * xh[b][k];
                    proj += wx * xh[b][j];
                }
                double wij = mi_get(w0, i * 4 + j);
                want[i * 4 + j] = wij - h.delta / 5 * proj -
                                  h.lr * (mi_get(w->grad, i * 4 + j) + h.weight_decay * wij);
            }
        assert_all_close(w, want, 1e-14, "l2_gd");
        mi_optim_free(o);
    }
}
END_TEST

/* ---------------------------------------------------------------- PyTorch reference */
static mi_tensor *ref_loss(mi_tensor *w, mi_tensor *V)
{
    mi_tensor *A = t_from(MI_F64, MI_SHAPE(4, 4), ref_A), *b = t_from(MI_F64, MI_SHAPE(4), ref_b);
    mi_tensor *C = t_from(MI_F64, MI_SHAPE(3, 3), ref_C), *T = t_from(MI_F64, MI_SHAPE(2, 3), ref_T);
    mi_tensor *wc = mi_unsqueeze(w, 1);
    mi_tensor *quad = mi_sum(mi_mul(wc, mi_matmul(A, wc)), MI_ALL, false);
    mi_tensor *lin = mi_sum(mi_mul(b, w), MI_ALL, false);
    mi_tensor *fit = mi_sum(mi_square(mi_sub(mi_matmul(V, C), T)), MI_ALL, false);
    return mi_add(mi_sub(mi_mul_scalar(quad, 0.5), lin), mi_mul_scalar(fit, 0.5));
}

static void check_reference(mi_optim_kind kind, const mi_optim_hparams *h,
                            const double (*ref)[REF_NPARAM], const char *name)
{
    mi_tensor *w = mi_requires_grad(t_from(MI_F64, MI_SHAPE(4), ref_w0), true);
    mi_tensor *V = mi_requires_grad(t_from(MI_F64, MI_SHAPE(2, 3), ref_V0), true);
    mi_tensor *ps[2] = {w, V};
    mi_optim *o = mi_optim_new_simple(kind, ps, 2, h);
    ck_assert_msg(o != NULL, "%s: %s", name, mi_error());
    double worst = 0;
    for (int s = 0; s < REF_STEPS; s++) {
        mi_optim_zero_grad(o);
        ck_assert_int_eq(mi_backward(ref_loss(w, V)), 0);
        ck_assert_int_eq(mi_optim_step(o), 0);
        for (int i = 0; i < REF_NPARAM; i++) {
            double got = i < 4 ? mi_get(w, i) : mi_get(V, i - 4);
            double err = fabs(got - ref[s][i]);
            if (err > worst) worst = err;
            ck_assert_msg(err <= 1e-12 * (1 + fabs(ref[s][i])),
                          "%s step %d param %d: %.17g, torch %.17g", name, s + 1, i, got,
                          ref[s][i]);
        }
    }
    mi_optim_free(o);
}

START_TEST(matches_pytorch_reference)
{
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_SGD);
    h.lr = 0.1;
    check_reference(MI_OPT_SGD, &h, ref_sgd, "sgd");
    h.lr = 0.05;
    h.momentum = 0.9;
    h.dampening = 0.1;
    h.weight_decay = 0.01;
    check_reference(MI_OPT_SGD, &h, ref_sgd_momentum, "sgd_momentum");
    h.dampening = 0;
    h.nesterov = true;
    check_reference(MI_OPT_SGD, &h, ref_sgd_nesterov, "sgd_nesterov");

    h = mi_optim_defaults(MI_OPT_ADAM);
    h.lr = 0.1;
    h.weight_decay = 0.1;
    check_reference(MI_OPT_ADAM, &h, ref_adam, "adam");
    h = mi_optim_defaults(MI_OPT_ADAMW);
    h.lr = 0.1;
    h.weight_decay = 0.1;
    check_reference(MI_OPT_ADAMW, &h, ref_adamw, "adamw");
    h = mi_optim_defaults(MI_OPT_ADAMW); /* torch's defaults: lr 1e-3, (0.9, 0.999), 1e-8, 1e-2 */
    check_reference(MI_OPT_ADAMW, &h, ref_adamw_defaults, "adamw_defaults");

    /* Eq. 20 with the RMS preconditioner ≡ torch.optim.RMSprop(momentum=0.9), defaults */
    h = mi_optim_defaults(MI_OPT_PRECOND_MOMENTUM);
    check_reference(MI_OPT_PRECOND_MOMENTUM, &h, ref_rmsprop_momentum, "rmsprop_momentum");
}
END_TEST

/* Documented defaults (docs/optimizers.md). */
START_TEST(defaults_are_documented_values)
{
    mi_optim_hparams a = mi_optim_defaults(MI_OPT_ADAMW), d = mi_optim_defaults(MI_OPT_ADAM);
    ck_assert(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 &&
              a.weight_decay == 1e-2);
    ck_assert(d.lr == 1e-3 && d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8 &&
              d.weight_decay == 0);
    mi_optim_hparams m = mi_optim_defaults(MI_OPT_MUON);
    ck_assert(m.lr == 0.02 && m.momentum == 0.95 && m.nesterov && m.ns_steps == 5 &&
              m.aux_lr == 3e-4 && m.beta2 == 0.95);
    for (int k = 0; k < MI_OPT_KIND_COUNT; k++) {
        ck_assert_int_eq(mi_optim_kind_from_name(mi_optim_kind_name(k)), k);
    }
    ck_assert_int_eq(mi_optim_kind_from_name("adagrad"), -1);
    ck_assert_error_has("adamw");
}
END_TEST

/* ---------------------------------------------------------------- groups, masks, memory */
START_TEST(groups_and_weight_decay_masks)
{
    mi_rng r;
    mi_rng_seed(&r, 50);
    mi_tensor *W = mi_randn(&r, MI_F64, MI_SHAPE(3, 4), 0, 1), *bias = mi_randn(&r, MI_F64, MI_SHAPE(4), 0, 1);
    mi_tensor *gain = mi_randn(&r, MI_F64, MI_SHAPE(4), 0, 1);
    mi_tensor *W0 = mi_detach(W), *b0 = mi_detach(bias), *g0 = mi_detach(gain);
    mi_tensor *ps[2] = {W, bias};
    bool decay[2];
    mi_decay_mask_matrices(ps, 2, decay);
    ck_assert(decay[0] && !decay[1]);
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_ADAMW), h2 = h;
    h.lr = 0.1;
    h.weight_decay = 0.5;
    h2.lr = 0.01; /* a second group with its own lr and decay */
    h2.weight_decay = 0.25;
    mi_param_group groups[2] = {{.params = ps, .n = 2, .hp = h, .decay = decay},
                                {.params = &gain, .n = 1, .hp = h2}};
    mi_optim *o = mi_optim_new(MI_OPT_ADAMW, groups, 2);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(mi_optim_param_count(o), 3);
    ck_assert_int_eq(mi_optim_group_count(o), 2);
    /* zero gradients: Adam's step is 0, so only the decoupled decay moves p */
    W->grad = mi_zeros(MI_F64, MI_SHAPE(3, 4));
    bias->grad = mi_zeros(MI_F64, MI_SHAPE(4));
    gain->grad = mi_zeros(MI_F64, MI_SHAPE(4));
    ck_assert_int_eq(mi_optim_step(o), 0);
    for (int i = 0; i < 12; i++) ck_assert(mi_get(W, i) == mi_get(W0, i) * (1 - 0.1 * 0.5));
    for (int i = 0; i < 4; i++) {
        ck_assert(mi_get(bias, i) == mi_get(b0, i)); /* masked: no decay */
        ck_assert(mi_get(gain, i) == mi_get(g0, i) * (1 - 0.01 * 0.25));
    }
    /* a parameter without a gradient is skipped and keeps no state */
    gain->grad = NULL;
    ck_assert_int_eq(mi_optim_step(o), 0);
    ck_assert_int_eq(mi_optim_param_steps(o, 2), 1);
    ck_assert_int_eq(mi_optim_param_steps(o, 0), 2);
    /* lr scale multiplies every group's lr */
    ck_assert_int_eq(mi_optim_set_lr_scale(o, 0.5), 0);
    mi_tensor *before = mi_detach(W);
    ck_assert_int_eq(mi_optim_step(o), 0);
    for (int i = 0; i < 12; i++) ck_assert(mi_get(W, i) == mi_get(before, i) * (1 - 0.05 * 0.5));
    mi_optim_zero_grad(o);
    ck_assert(mi_get(W->grad, 0) == 0);
    mi_optim_free(o);
}
END_TEST

/* A step allocates nothing in the caller's scope (temporaries go to the
 * optimizer's scratch scope) and nothing new after the first step. */
START_TEST(in_place_steps_allocate_nothing_permanent)
{
    mi_rng r;
    mi_rng_seed(&r, 51);
    for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
        mi_tensor *W = mi_randn(&r, MI_F32, MI_SHAPE(6, 5), 0, 1), *b = mi_randn(&r, MI_F32, MI_SHAPE(5), 0, 1);
        W->grad = mi_randn(&r, MI_F32, MI_SHAPE(6, 5), 0, 1);
        b->grad = mi_randn(&r, MI_F32, MI_SHAPE(5), 0, 1);
        mi_tensor *x = mi_randn(&r, MI_F32, MI_SHAPE(3, 5), 0, 1);
        mi_tensor *ps[2] = {W, b};
        mi_optim *o = mi_optim_new_simple(kind, ps, 2, NULL);
        size_t used = 0;
        for (int s = 0; s < 5; s++) {
            if (kind == MI_OPT_L2_GD) mi_optim_set_inputs(o, 0, x);
            if (s == 1) used = mi_scope_stats_get(test_scope).bytes_used;
            ck_assert_msg(mi_optim_step(o) == 0, "%s: %s", mi_optim_kind_name(kind), mi_error());
        }
        ck_assert_msg(mi_scope_stats_get(test_scope).bytes_used == used, "%s allocated in the "
                      "caller's scope", mi_optim_kind_name(kind));
        mi_optim_free(o);
    }
}
END_TEST


/* ---------------------------------------------------------------- schedules, clipping */
START_TEST(schedules_are_exact)
{
    mi_schedule c = {.kind = MI_SCHED_CONSTANT, .lr = 0.3};
    ck_assert(mi_schedule_lr(&c, 0) == 0.3 && mi_schedule_lr(&c, 12345) == 0.3);
    mi_schedule s = {.kind = MI_SCHED_WARMUP_COSINE, .lr = 1.0, .min_lr = 0.1, .warmup = 4, .total = 14};
    ck_assert(mi_schedule_lr(&s, 0) == 0.25);
    ck_assert(mi_schedule_lr(&s, 1) == 0.5);
    ck_assert(mi_schedule_lr(&s, 3) == 1.0);
    ck_assert(mi_schedule_lr(&s, 4) == 1.0);                  /* cos 0 */
    ck_assert_close(mi_schedule_lr(&s, 9), 0.55, 1e-15);      /* halfway: (lr + floor) / 2 */
    ck_assert(mi_schedule_lr(&s, 14) == 0.1);                 /* cos π: the floor */
    ck_assert(mi_schedule_lr(&s, 15) == 0.1 && mi_schedule_lr(&s, 1000) == 0.1);
    ck_assert_close(mi_schedule_lr(&s, 6), 0.1 + 0.45 * (1 + cos(M_PI * 0.2)), 1e-15);
    /* monotone after warmup */
    for (int t = 4; t < 14; t++) ck_assert(mi_schedule_lr(&s, t + 1) <= mi_schedule_lr(&s, t));
    /* the optimizer follows it: SGD lr 2, gradient 1, schedule peak 2 */
    mi_tensor *p = mi_zeros(MI_F64, MI_SHAPE(1));
    p->grad = mi_ones(MI_F64, MI_SHAPE(1));
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_SGD);
    h.lr = 2;
    mi_optim *o = mi_optim_new_simple(MI_OPT_SGD, &p, 1, &h);
    mi_schedule s2 = {.kind = MI_SCHED_WARMUP_COSINE, .lr = 2, .min_lr = 0, .warmup = 2, .total = 4};
    double want = 0;
    for (int t = 0; t < 6; t++) {
        ck_assert_int_eq(mi_optim_apply_schedule(o, &s2), 0);
        ck_assert_int_eq(mi_optim_step(o), 0);
        want -= mi_schedule_lr(&s2, t);
        ck_assert_close(mi_get(p, 0), want, 1e-15);
    }
    mi_optim_free(o);
}
END_TEST

START_TEST(clipping_is_exact)
{
    mi_tensor *a = mi_zeros(MI_F64, MI_SHAPE(2)), *b = mi_zeros(MI_F64, MI_SHAPE(1)), *c = mi_zeros(MI_F64, MI_SHAPE(1));
    a->grad = t_from(MI_F64, MI_SHAPE(2), (double[]){3, 4});
    b->grad = t_from(MI_F64, MI_SHAPE(1), (double[]){12});
    mi_tensor *ps[3] = {a, b, c}; /* c has no gradient: ignored */
    ck_assert(mi_grad_norm(ps, 3) == 13);
    ck_assert(mi_clip_grad_norm(ps, 3, 20) == 13); /* under the limit: unchanged */
    ck_assert(mi_get(a->grad, 0) == 3 && mi_get(b->grad, 0) == 12);
    ck_assert(mi_clip_grad_norm(ps, 3, 6.5) == 13);
    double coef = 6.5 / (13 + 1e-6);
    ck_assert(mi_get(a->grad, 0) == 3 * coef && mi_get(a->grad, 1) == 4 * coef);
    ck_assert(mi_get(b->grad, 0) == 12 * coef);
    ck_assert_close(mi_grad_norm(ps, 3), 6.5, 1e-6);
    /* f32 gradients and the optimizer form */
    mi_tensor *f = mi_zeros(MI_F32, MI_SHAPE(2));
    f->grad = t_from(MI_F32, MI_SHAPE(2), (double[]){-6, 8});
    mi_optim *o = mi_optim_new_simple(MI_OPT_SGD, &f, 1, NULL);
    ck_assert(mi_optim_clip_grad_norm(o, 5) == 10);
    ck_assert_close(mi_get(f->grad, 0), -6 * (5 / (10 + 1e-6)), 1e-6);
    ck_assert(mi_clip_grad_norm(ps, 3, -1) < 0);
    ck_assert_error_has("max_norm");
    mi_optim_free(o);
}
END_TEST



Suite *make_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_slow("closed-forms");
    tcase_add_test(tc, sgd_lr_one_is_p_minus_g);
    tcase_add_test(tc, adam_with_zero_betas_steps_by_sign);
    tcase_add_test(tc, nested_momentum_closed_forms);
    tcase_add_test(tc, adam_in_place_matches_its_ops);
    tcase_add_test(tc, sgd_and_adam_follow_their_formulas);
    tcase_add_test(tc, nested_momentum_follows_its_formulas);
    tcase_add_test(tc, matches_pytorch_reference);
    tcase_add_test(tc, defaults_are_documented_values);
    tcase_add_test(tc, groups_and_weight_decay_masks);
    tcase_add_test(tc, in_place_steps_allocate_nothing_permanent);
    tcase_add_test(tc, schedules_are_exact);
    tcase_add_test(tc, clipping_is_exact);
    suite_add_tcase(s, tc);
    return s;
}
