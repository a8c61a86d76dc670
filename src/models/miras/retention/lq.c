/* ℓq memory stability (Moneta; MIRAS "Alternative Retention Gates",
 * Variant 4, and "MIRAS's Variants", eq:q-norm):
 *
 *   A_t = α_t A_{t-1} − η_t ∇ℓ(W_{t-1}; k_t, v_t),   W_t = normalise_q(A_t)
 *
 * normalise_q is mi_lq_normalize over the whole of each weight, in the form
 * config lq_form picks, with ε = config lq_eps:
 *   MI_LQ_FROBENIUS (default)  W = A / (‖A‖_F² + ε)^((q−2)/(2q))   Frobenius norm
 *   MI_LQ_PAPER                W = A / (‖A‖_q^q + ε)^((q−2)/q)     eq:q-norm, entrywise
 * (the Frobenius form is this project's default; docs/models.md says why).
 * ε (1e-6) changes nothing at the norms a memory has (‖A‖_F² ≈ its rows) and
 * bounds the read's derivative where the accumulator vanishes: a forget
 * gate near 0 can decay A to 1e-37 within a sequence, and without ε the
 * outer gradient through W = A/‖A‖^½ overflows there (NaN in training).
 * The state is the accumulator A; the weights are read from it at every
 * token (read after write) and the gradient of a chunk is taken at the
 * weights read from the previous chunk's state, so the normalisation acts
 * between chunks ("Parallelizable Training": the q ≠ 2 non-linearity is not
 * applied inside a chunk).
 *
 * init: A_0 is chosen so that the first read gives the initial weights,
 * read(A_0) = W_0 (exactly for ε = 0). In the Frobenius form
 *   A_0 = W_0 (‖W_0‖_F² + ε)^(r/(2(1−r))),  r = (q−2)/q   (q = 4: A_0 = W_0 ‖W_0‖_F)
 * Starting at A_0 = W_0 instead reads as W_0/‖W_0‖^r: with the
 * memory's LeCun init that shrinks the MLP by ‖W_0‖_F^½ ≈ 2.4–3.4, its
 * LayerNorm amplifies the inner gradients by as much again, and Moneta's
 * inner loop diverged on the byte LM (pre-clip gradient norms 20–300 at every
 * step; docs/quality.md). The paper's form keeps A_0 = W_0 (its scaling is
 * not a power of ‖A‖ that this inverts for every q). */
#include <math.h>
#include <string.h>

#include "components.h"

typedef struct lq_params {
    double q;
    int form;  /* MI_LQ_FROBENIUS or MI_LQ_PAPER (ops.h) */
    double eps;
} lq_params;

/* Index = the enum's value (ops.h). "spec", the Frobenius form's earlier
 * name, still reads (older checkpoints' overrides). */
static const char *const lq_forms[] = {"frobenius|spec", "paper", NULL};

static const mi_field lq_fields[] = {
    MI_FIELD_REAL_AT(lq_params, "q", q, "4", 1, INFINITY, MI_FIELD_LO_OPEN | MI_FIELD_HI_OPEN,
                     "lq: the exponent"),
    MI_FIELD_CHOICE_AT(lq_params, "lq_form", form, "frobenius", lq_forms,
                       "lq: A/(|A|_F^2 + eps)^((q-2)/(2q)) or MIRAS eq:q-norm, A/|A|_q^(q-2)"),
    MI_FIELD_REAL_AT(lq_params, "lq_eps", eps, "1e-6", 0, INFINITY, MI_FIELD_HI_OPEN,
                     "lq: added to the norm's power sum (0: the exact norm)"),
};

static lq_params params(const mi_miras_config *c)
{
    lq_params p;
    memcpy(&p, &c->retention_params, sizeof p);
    return p;
}

/* [N, n, w…] → [N, n, 1, Π w] so that the ℓq step sees one matrix per weight. */
static mi_tensor *lq_read(const mi_miras_config *c, mi_tensor *a, mi_tensor *eta)
{
    if (!a) return NULL;
    lq_params p = params(c);
    mi_tensor *flat = mi_reshape(a, 4, (const int64_t[]){a->shape[0], a->shape[1], 1, -1});
    return mi_reshape(mi_lq_normalize(flat, p.q, p.form, p.eps), a->rank, a->shape);
}

static mi_tensor *lq_init(const mi_miras_config *c, mi_tensor *w0)
{
    lq_params p = params(c);
    if (!w0 || p.form != MI_LQ_FROBENIUS) return w0;
    double r = (p.q - 2) / p.q;
    uint32_t axes = 0;
    for (int d = 2; d < w0->rank; d++) axes |= 1u << d;
    mi_tensor *sq = mi_sum_axes(mi_square(w0), axes, true);
    return mi_mul(w0, mi_pow_scalar(mi_add_scalar(sq, p.eps), r / (2 * (1 - r))));
}

/* The Frobenius form only scales each whole weight, W = s·A with
 * s = (‖A‖_F² + ε)^(−r/2): a chunk reads it from the gradients' factors. */
static bool lq_read_is_scale(const mi_miras_config *c)
{
    return params(c).form == MI_LQ_FROBENIUS;
}

static mi_tensor *lq_read_scale(const mi_miras_config *c, mi_tensor *sq_norm)
{
    lq_params p = params(c);
    return mi_pow_scalar(mi_add_scalar(sq_norm, p.eps), -(p.q - 2) / (2 * p.q));
}

const mi_retention_kind mi_retention_lq = {
    .name = "lq", .formula = "A_t = alpha_t A_{t-1} - eta_t grad, W_t = A_t / ||A_t||^r",
    .init = lq_init, .read = lq_read, .read_is_scale = lq_read_is_scale,
    .read_scale = lq_read_scale, .uses_alpha = true, .rule = MI_RETENTION_RULE_LQ,
    MI_PARAMS(lq_params, lq_fields),
};
