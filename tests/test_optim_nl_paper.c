/* Nested Learning's Eq. 22 (delta_momentum) and Eq. 23 (deep_momentum)
 * against the paper's equations written out as plain f64 loops over arrays
 * (no framework op or optimizer helper in the references), their
 * nl_form = normalised options against the earlier rules written out the
 * same way, and the hyperparameter checks.
 *
 * Shapes read from the paper (nl_momentum.c, nl_deep.c say why):
 *   Eq. 22: G = ∇L as [shape[0], rest] (a vector as a row [1, n]),
 *           m ← α m − β m GᵀG − P g,  p ← p + lr m.
 *   Eq. 23: U = ∇L as rows [numel / last, last], m_φ(x) = W2 tanh(W1 x),
 *           L⁽²⁾ = Σ_j [m_φ(u_j)]_j,  φ ← α φ − η ∇_φ L⁽²⁾,
 *           p ← p + lr ∂L⁽²⁾(φ_{i+1}; U)/∂U. */
#include <stdio.h>

#include "harness.h"
#include "optim/optim.h"

enum { NPARAM = 4, MAXN = 64, STEPS = 6, HID = 3 };

/* The parameters the tests step: a wide and a tall matrix, a vector, and a
 * rank-3 tensor. */
static const int ranks[NPARAM] = {2, 2, 1, 3};
static const int64_t shapes[NPARAM][3] = {{3, 5}, {6, 4}, {5}, {2, 3, 4}};

typedef struct run {
    int n[NPARAM];                          /* numel */
    double p0[NPARAM][MAXN];                /* initial values */
    double g[STEPS][NPARAM][MAXN];          /* raw gradients */
    double p[STEPS][NPARAM][MAXN];          /* the optimizer's parameters after each step */
    double w1_0[NPARAM][HID * MAXN];        /* Eq. 23: the memory's initial key projection */
} run;

/* Steps the optimizer `kind` with hyperparameters h over the four parameters
 * (f64) with seeded gradients of scale gs, recording everything. */
static void run_optimizer(mi_optim_kind kind, const mi_optim_hparams *h, uint64_t seed, double gs,
                          run *out)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *ps[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        ps[i] = mi_randn(&r, MI_F64, ranks[i], shapes[i], 0, 1);
        out->n[i] = (int)ps[i]->numel;
        for (int k = 0; k < out->n[i]; k++) out->p0[i][k] = mi_get(ps[i], k);
        /* the memory's W1 as the optimizer draws it: N(0, 1/c) from seed and index */
        int64_t c = shapes[i][ranks[i] - 1];
        mi_rng rw;
        mi_rng_seed(&rw, h->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1);
        mi_tensor *w1 = mi_randn(&rw, MI_F64, MI_SHAPE(HID, c), 0, 1.0 / sqrt((double)c));
        for (int k = 0; k < HID * c; k++) out->w1_0[i][k] = mi_get(w1, k);
    }
    mi_optim *o = mi_optim_new_simple(kind, ps, NPARAM, h);
    ck_assert_msg(o != NULL, "%s", mi_error());
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < NPARAM; i++) {
            ps[i]->grad = mi_randn(&r, MI_F64, ranks[i], shapes[i], 0, gs);
            for (int k = 0; k < out->n[i]; k++) out->g[s][i][k] = mi_get(ps[i]->grad, k);
        }
        ck_assert_msg(mi_optim_step(o) == 0, "%s", mi_error());
        for (int i = 0; i < NPARAM; i++)
            for (int k = 0; k < out->n[i]; k++) out->p[s][i][k] = mi_get(ps[i], k);
    }
    mi_optim_free(o);
}

static void expect_trajectory(const run *t, double ref[STEPS][NPARAM][MAXN], const char *what)
{
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < NPARAM; i++)
            for (int k = 0; k < t->n[i]; k++)
                ck_assert_msg(fabs(t->p[s][i][k] - ref[s][i][k]) <= 1e-12,
                              "%s: step %d parameter %d [%d]: %.17g, the equation gives %.17g",
                              what, s + 1, i, k, t->p[s][i][k], ref[s][i][k]);
}

/* ---------------------------------------------------------------- Eq. 22 */
/* Nested Learning, Eq. 22, one parameter viewed as G [r, c]:
 *   m ← α m − β m GᵀG − P g,  p ← p + lr m,  g = ∇L + λ p,
 * P g = g / (√v + ε), v ← β₂ v + (1 − β₂) g² with precond, else g; with
 * normalised: m ← α m − β ĝ ⟨ĝ, m⟩ − P g, ĝ = g / (‖g‖₂ + ε). */
static void eq22_reference(const mi_optim_hparams *h, const run *t, bool normalised,
                           double ref[STEPS][NPARAM][MAXN])
{
    for (int i = 0; i < NPARAM; i++) {
        int n = t->n[i], r = ranks[i] == 1 ? 1 : (int)shapes[i][0], c = n / r;
        double p[MAXN], m[MAXN] = {0}, v[MAXN] = {0};
        memcpy(p, t->p0[i], sizeof p);
        for (int s = 0; s < STEPS; s++) {
            double g[MAXN], pg[MAXN], erase[MAXN] = {0};
            for (int k = 0; k < n; k++) {
                g[k] = t->g[s][i][k] + h->weight_decay * p[k];
                v[k] = h->beta2 * v[k] + (1 - h->beta2) * g[k] * g[k];
                pg[k] = h->precond ? g[k] / (sqrt(v[k]) + h->eps) : g[k];
            }
            if (normalised) {
                double nrm = 0, dot = 0;
                for (int k = 0; k < n; k++) nrm += g[k] * g[k];
                nrm = sqrt(nrm) + h->eps;
                for (int k = 0; k < n; k++) dot += g[k] / nrm * m[k];
                for (int k = 0; k < n; k++) erase[k] = g[k] / nrm * dot;
            } else {
                for (int a = 0; a < r; a++)           /* (m GᵀG)[a][b] */
                    for (int b = 0; b < c; b++)
                        for (int k = 0; k < c; k++) {
                            double gram = 0;          /* (GᵀG)[k][b] */
                            for (int l = 0; l < r; l++) gram += g[l * c + k] * g[l * c + b];
                            erase[a * c + b] += m[a * c + k] * gram;
                        }
            }
            for (int k = 0; k < n; k++) {
                m[k] = h->momentum * m[k] - h->delta * erase[k] - pg[k];
                p[k] += h->lr * m[k];
                ref[s][i][k] = p[k];
            }
        }
    }
}

static mi_optim_hparams eq22_hp(bool precond, mi_nl_form form)
{
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_DELTA_MOMENTUM);
    h.lr = 0.1;
    h.momentum = 0.8;
    h.delta = 0.7;
    h.weight_decay = 0.05;
    h.precond = precond;
    h.beta2 = 0.9;
    h.eps = 1e-3;
    h.nl_form = form;
    return h;
}

START_TEST(eq22_default_is_the_papers_equation)
{
    ck_assert_int_eq(mi_optim_defaults(MI_OPT_DELTA_MOMENTUM).nl_form, MI_NL_FORM_PAPER);
    static run t;
    static double ref[STEPS][NPARAM][MAXN];
    for (int precond = 0; precond < 2; precond++) {
        mi_optim_hparams h = eq22_hp(precond, MI_NL_FORM_PAPER);
        run_optimizer(MI_OPT_DELTA_MOMENTUM, &h, 220 + (uint64_t)precond, 0.4, &t);
        eq22_reference(&h, &t, false, ref);
        expect_trajectory(&t, ref, precond ? "Eq. 22, P = RMS" : "Eq. 22, P = I");
    }
    /* β = 1, the paper's unit weight, with the defaults otherwise */
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_DELTA_MOMENTUM);
    run_optimizer(MI_OPT_DELTA_MOMENTUM, &h, 222, 0.4, &t);
    eq22_reference(&h, &t, false, ref);
    expect_trajectory(&t, ref, "Eq. 22, defaults");
}
END_TEST

START_TEST(eq22_normalised_option_keeps_the_earlier_rule)
{
    static run t;
    static double ref[STEPS][NPARAM][MAXN];
    for (int precond = 0; precond < 2; precond++) {
        mi_optim_hparams h = eq22_hp(precond, MI_NL_FORM_NORMALISED);
        run_optimizer(MI_OPT_DELTA_MOMENTUM, &h, 230 + (uint64_t)precond, 2.0, &t);
        eq22_reference(&h, &t, true, ref);
        expect_trajectory(&t, ref, "Eq. 22 normalised");
    }
}
END_TEST

/* ---------------------------------------------------------------- Eq. 23 */
/* Nested Learning, Eq. 23, one parameter as rows U [r, c], memory
 * m(x) = W2 tanh(W1 x), W1 [h, c], W2 [r, h] (0 at first):
 *   H = tanh(U W1ᵀ), W1 ← α W1 − η (W2 ⊙ (1 − H²))ᵀ U, W2 ← α W2 − η H,
 *   Δ = (W2 ⊙ (1 − H²)) W1 with the new W1, W2 and H, p ← p + lr Δ. */
static void eq23_paper_reference(const mi_optim_hparams *h, const run *t,
                                 double ref[STEPS][NPARAM][MAXN])
{
    for (int i = 0; i < NPARAM; i++) {
        int n = t->n[i], c = (int)shapes[i][ranks[i] - 1], r = n / c;
        double p[MAXN], w1[HID * MAXN], w2[MAXN * HID] = {0};
        memcpy(p, t->p0[i], sizeof p);
        memcpy(w1, t->w1_0[i], sizeof w1);
        for (int s = 0; s < STEPS; s++) {
            double U[MAXN], H[MAXN * HID], w1n[HID * MAXN], w2n[MAXN * HID];
            for (int k = 0; k < n; k++) U[k] = t->g[s][i][k] + h->weight_decay * p[k];
            for (int j = 0; j < r; j++)
                for (int a = 0; a < HID; a++) {
                    double z = 0;
                    for (int k = 0; k < c; k++) z += U[j * c + k] * w1[a * c + k];
                    H[j * HID + a] = tanh(z);
                }
            for (int a = 0; a < HID; a++)
                for (int k = 0; k < c; k++) {
                    double d = 0; /* ∂L⁽²⁾/∂W1[a][k] = Σ_j W2[j][a] (1 − H[j][a]²) U[j][k] */
                    for (int j = 0; j < r; j++)
                        d += w2[j * HID + a] * (1 - H[j * HID + a] * H[j * HID + a]) * U[j * c + k];
                    w1n[a * c + k] = h->momentum * w1[a * c + k] - h->mem_lr * d;
                }
            for (int j = 0; j < r * HID; j++) w2n[j] = h->momentum * w2[j] - h->mem_lr * H[j];
            memcpy(w1, w1n, sizeof(double) * (size_t)(HID * c));
            memcpy(w2, w2n, sizeof(double) * (size_t)(r * HID));
            for (int j = 0; j < r; j++) {
                double D[HID];
                for (int a = 0; a < HID; a++) {
                    double z = 0;
                    for (int k = 0; k < c; k++) z += U[j * c + k] * w1[a * c + k];
                    D[a] = w2[j * HID + a] * (1 - tanh(z) * tanh(z));
                }
                for (int k = 0; k < c; k++) {
                    double delta = 0;
                    for (int a = 0; a < HID; a++) delta += D[a] * w1[a * c + k];
                    p[j * c + k] += h->lr * delta;
                    ref[s][i][j * c + k] = p[j * c + k];
                }
            }
        }
    }
}

/* The earlier rule (nl_form = normalised): M ← α M − g; ρ = rms(U),
 * Û = U / (ρ + ε), H = tanh(Û W1ᵀ), W2 [c, h] ← α W2 − η ÛᵀH / r,
 * W1 ← W1 − η ((Û W2) ⊙ (1 − H²))ᵀ Û / r, Δ = M + ρ tanh(Û W1ᵀ) W2ᵀ. */
static void eq23_normalised_reference(const mi_optim_hparams *h, const run *t,
                                      double ref[STEPS][NPARAM][MAXN])
{
    for (int i = 0; i < NPARAM; i++) {
        int n = t->n[i], c = (int)shapes[i][ranks[i] - 1], r = n / c;
        double p[MAXN], M[MAXN] = {0}, w1[HID * MAXN], w2[MAXN * HID] = {0};
        memcpy(p, t->p0[i], sizeof p);
        memcpy(w1, t->w1_0[i], sizeof w1);
        for (int s = 0; s < STEPS; s++) {
            double g[MAXN], K[MAXN], H[MAXN * HID], dw1[HID * MAXN] = {0}, dw2[MAXN * HID] = {0};
            double rho = 0;
            for (int k = 0; k < n; k++) {
                g[k] = t->g[s][i][k] + h->weight_decay * p[k];
                M[k] = h->momentum * M[k] - g[k];
                rho += g[k] * g[k];
            }
            rho = sqrt(rho / n);
            for (int k = 0; k < n; k++) K[k] = g[k] / (rho + h->eps);
            for (int j = 0; j < r; j++)
                for (int a = 0; a < HID; a++) {
                    double z = 0, kw2 = 0;
                    for (int k = 0; k < c; k++) z += K[j * c + k] * w1[a * c + k];
                    H[j * HID + a] = tanh(z);
                    for (int k = 0; k < c; k++) kw2 += K[j * c + k] * w2[k * HID + a];
                    double dA = kw2 * (1 - H[j * HID + a] * H[j * HID + a]);
                    for (int k = 0; k < c; k++) {
                        dw2[k * HID + a] += K[j * c + k] * H[j * HID + a] / r;
                        dw1[a * c + k] += dA * K[j * c + k] / r;
                    }
                }
            for (int k = 0; k < c * HID; k++) w2[k] = h->momentum * w2[k] - h->mem_lr * dw2[k];
            for (int k = 0; k < HID * c; k++) w1[k] -= h->mem_lr * dw1[k];
            for (int j = 0; j < r; j++) {
                double hh[HID];
                for (int a = 0; a < HID; a++) {
                    double z = 0;
                    for (int k = 0; k < c; k++) z += K[j * c + k] * w1[a * c + k];
                    hh[a] = tanh(z);
                }
                for (int k = 0; k < c; k++) {
                    double f = 0;
                    for (int a = 0; a < HID; a++) f += hh[a] * w2[k * HID + a];
                    p[j * c + k] += h->lr * (M[j * c + k] + rho * f);
                    ref[s][i][j * c + k] = p[j * c + k];
                }
            }
        }
    }
}

static mi_optim_hparams eq23_hp(mi_nl_form form)
{
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM);
    h.lr = 0.1;
    h.momentum = 0.8;
    h.mem_hidden = HID;
    h.mem_lr = 0.6;
    h.weight_decay = 0.02;
    h.seed = 7;
    h.nl_form = form;
    return h;
}

START_TEST(eq23_default_is_the_papers_equation)
{
    ck_assert_int_eq(mi_optim_defaults(MI_OPT_DEEP_MOMENTUM).nl_form, MI_NL_FORM_PAPER);
    static run t;
    static double ref[STEPS][NPARAM][MAXN];
    mi_optim_hparams h = eq23_hp(MI_NL_FORM_PAPER);
    run_optimizer(MI_OPT_DEEP_MOMENTUM, &h, 240, 0.8, &t);
    eq23_paper_reference(&h, &t, ref);
    expect_trajectory(&t, ref, "Eq. 23");
    /* the state is the MLP alone: W1 [h, c], W2 [r, h], no linear momentum */
    mi_tensor *p = mi_zeros(MI_F64, MI_SHAPE(6, 4));
    mi_optim *o = mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, &p, 1, &h);
    p->grad = mi_ones(MI_F64, MI_SHAPE(6, 4));
    ck_assert_int_eq(mi_optim_step(o), 0);
    mi_tensor *w1 = mi_optim_state(o, 0, "mem_w1"), *w2 = mi_optim_state(o, 0, "mem_w2");
    ck_assert(w1 && w1->shape[0] == HID && w1->shape[1] == 4);
    ck_assert(w2 && w2->shape[0] == 6 && w2->shape[1] == HID);
    ck_assert_ptr_null(mi_optim_state(o, 0, "momentum"));
    mi_optim_free(o);
}
END_TEST

START_TEST(eq23_normalised_option_keeps_the_earlier_rule)
{
    static run t;
    static double ref[STEPS][NPARAM][MAXN];
    mi_optim_hparams h = eq23_hp(MI_NL_FORM_NORMALISED);
    run_optimizer(MI_OPT_DEEP_MOMENTUM, &h, 250, 3.0, &t);
    eq23_normalised_reference(&h, &t, ref);
    expect_trajectory(&t, ref, "Eq. 23 normalised");
}
END_TEST

/* ---------------------------------------------------------------- checks */
START_TEST(bad_nl_form_is_an_error)
{
    mi_tensor *p = mi_zeros(MI_F64, MI_SHAPE(2, 3));
    mi_optim_kind kinds[2] = {MI_OPT_DELTA_MOMENTUM, MI_OPT_DEEP_MOMENTUM};
    const char *names[2] = {"delta_momentum: unknown nl_form 7",
                            "deep_momentum: unknown nl_form -1"};
    int bad[2] = {7, -1};
    for (int k = 0; k < 2; k++) {
        mi_optim_hparams h = mi_optim_defaults(kinds[k]);
        h.nl_form = (mi_nl_form)bad[k];
        ck_assert_ptr_null(mi_optim_new_simple(kinds[k], &p, 1, &h));
        ck_assert_error_has(names[k]);
        ck_assert_error_has("(paper 0, normalised 1)");
        mi_error_clear();
        /* edited between steps: the step fails and changes nothing */
        h.nl_form = MI_NL_FORM_PAPER;
        mi_optim *o = mi_optim_new_simple(kinds[k], &p, 1, &h);
        ck_assert_ptr_nonnull(o);
        mi_optim_group_hparams(o, 0)->nl_form = (mi_nl_form)bad[k];
        p->grad = mi_ones(MI_F64, MI_SHAPE(2, 3));
        ck_assert_int_eq(mi_optim_step(o), -1);
        ck_assert_error_has("unknown nl_form");
        mi_error_clear();
        for (int i = 0; i < 6; i++) ck_assert(mi_get(p, i) == 0);
        mi_optim_free(o);
    }
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_DELTA_MOMENTUM);
    h.delta = -1;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_DELTA_MOMENTUM, &p, 1, &h));
    ck_assert_error_has("delta must be");
    mi_error_clear();
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("optim_nl_paper");
    TCase *eq = tcase_slow("equations");
    tcase_add_test(eq, eq22_default_is_the_papers_equation);
    tcase_add_test(eq, eq22_normalised_option_keeps_the_earlier_rule);
    tcase_add_test(eq, eq23_default_is_the_papers_equation);
    tcase_add_test(eq, eq23_normalised_option_keeps_the_earlier_rule);
    tcase_add_test(eq, bad_nl_form_is_an_error);
    suite_add_tcase(s, eq);
    return s;
}
