/* Lattice memory (Lattice §2.1, Eq. 3–5 and the general form Eq. 10): m
 * memory slots s_1 … s_m ∈ R^d, the state S = [s_1, …, s_m] ∈ R^{d×m}, read
 * through φ, which normalises every slot: φ(S) = [s_1/‖s_1‖, …, s_m/‖s_m‖].
 *
 *   read (decoding)   M_S(x) = φ(S) x,    x ∈ R^m → R^d          (Eq. 3, Eq. 10's y_t)
 *   encoding          E_S(v) = φ(S)ᵀ v,   v ∈ R^d → R^m          (Eq. 6 and 8)
 *
 * Layout. The weight is Sᵀ, [m, dv]: one slot per row, so every per-slot
 * operation (φ, the explicit gradient below, the sphere retention's
 * projection) runs along the last axis. d = dv, and dk = m: keys and queries
 * have one entry per slot (the paper's k_t = W_k x_t ∈ R^m), so the
 * configuration's `slots` must equal the key dimension (checked here).
 *
 * Closed-form gradients (Eq. 4, 7, 9; Appendix B.2). With
 * Jφ(s) = P(s)/‖s‖ and P(s) = I − s sᵀ/‖s‖² (Eq. 5), every objective's
 * gradient is, slot by slot,
 *   ∂ℓ/∂s_i = c_i · P(s_i) h / ‖s_i‖ = c_i/‖s_i‖ · (h − φ_i ⟨φ_i, h⟩)
 * with (h, c) = (e, x) for the read (e = ∂ℓ/∂y ∈ R^d: Eq. 4, and Eq. 9 via
 * the dot objective) and (h, c) = (v, e) for the encoding (e = ∂ℓ/∂z ∈ R^m:
 * Eq. 7, 9): Eq. 10's h_t and c_t. P(s_i) h is formed as h − φ_i⟨φ_i, h⟩,
 * B.2's O(dm) form; no d×d projection is built.
 *
 * slot_norm = false removes φ (Remark A.2): M_S(x) = S x, E_S(v) = Sᵀ v, and
 * the gradients are the plain outer products (the delta rule with ℓ2).
 *
 * Initial state: orthonormal slots (§2.3, "we initialize S_0 with
 * orthonormal columns"), by Gram–Schmidt of a seeded Gaussian [m, d] draw,
 * each row orthogonalised twice against the rows before it. The paper
 * leaves m > d open (m unit vectors cannot be orthonormal in R^d): then the
 * slots are orthonormal in groups of d (slots [0, d), [d, 2d), …, each from
 * its own draw), all of unit norm. Channel-wise gates are not supported
 * (a row is a slot, not a value channel); η and α are per head. */
#include "components.h"

static int lattice_check_dims(const mi_miras_config *c, int64_t dk, int64_t dv)
{
    if (c->slots < 1)
        return mi_error_set("miras: lattice memory needs slots >= 1, got %d", c->slots), -1;
    if (dk != c->slots)
        return mi_error_set("miras: lattice memory has slots = %d, so keys and queries need "
                            "dk = %d (one entry per slot); got dk = %lld (set memory.slots= "
                            "to the key dimension)", c->slots, c->slots, (long long)dk), -1;
    if (dv < 1) return mi_error_set("miras: lattice memory needs dv >= 1, got %lld", (long long)dv), -1;
    return 0;
}

static int lattice_shapes(const mi_miras_config *c, int64_t dk, int64_t dv, int *n, int *ranks,
                          int64_t (*shapes)[MI_MAX_RANK])
{
    if (lattice_check_dims(c, dk, dv) != 0) return -1;
    *n = 1;
    ranks[0] = 2;
    shapes[0][0] = dk; /* m slots */
    shapes[0][1] = dv; /* each in R^d */
    return 0;
}

/* Orthonormal rows by Gram–Schmidt ("twice is enough"), in groups of dv. */
static int lattice_init(const mi_miras_config *c, int64_t dk, int64_t dv, mi_rng *rng, mi_dtype dt,
                        mi_tensor **w)
{
    if (lattice_check_dims(c, dk, dv) != 0) return -1;
    mi_tensor *g = mi_randn(rng, dt, MI_SHAPE(dk, dv), 0, 1);
    mi_tensor **rows = mi_scope_alloc(mi_scope_current(), sizeof(mi_tensor *) * (size_t)dk);
    if (!g || !rows) return -1;
    for (int64_t i = 0; i < dk; i++) {
        int64_t first = i - i % dv; /* the group this slot is orthogonal within */
        mi_tensor *r = mi_slice(g, 0, i, i + 1);
        if (i > first) {
            mi_tensor *qs = mi_concat(rows + first, (int)(i - first), 0);
            for (int pass = 0; pass < 2; pass++)
                r = mi_sub(r, mi_matmul(mi_matmul_t(r, qs, false, true), qs));
        }
        if (!(rows[i] = mi_l2_normalize(r, 0.0))) return -1;
    }
    w[0] = mi_concat(rows, (int)dk, 0);
    return w[0] ? 0 : -1;
}

/* φ(S) as rows, [N, n_w, m, d]. */
static mi_tensor *slots_read(const mi_miras_config *c, mi_tensor *s)
{
    return c->slot_norm ? mi_l2_normalize(s, 0.0) : s;
}

/* y = φ(S) x = Σ_i x_i φ_i: [N, n_w, m, d]ᵀ · [N, n, m, 1] → [N, n, d] */
static mi_tensor *lattice_forward(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x)
{
    return mi_squeeze(mi_matmul_t(slots_read(c, w[0]), mi_unsqueeze(x, -1), true, false), -1);
}

/* z = φ(S)ᵀ v = (⟨φ_i, v⟩)_i: [N, n_w, m, d] · [N, n, d, 1] → [N, n, m] */
static mi_tensor *lattice_encode(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *v)
{
    return mi_squeeze(mi_matmul(slots_read(c, w[0]), mi_unsqueeze(v, -1)), -1);
}

/* g_i = c_i/‖s_i‖ · (h − φ_i⟨φ_i, h⟩), c [N, n, m], h [N, n, d] → [N, n, m, d];
 * without φ, g_i = c_i h. */
static mi_tensor *orthogonal_step(const mi_miras_config *cf, mi_tensor *s, mi_tensor *c,
                                  mi_tensor *h)
{
    if (!cf->slot_norm) return mi_outer(c, h);
    mi_tensor *inv_norm = mi_rsqrt(mi_sum(mi_square(s), -1, true));     /* 1/‖s_i‖ [.., m, 1] */
    mi_tensor *phi = mi_mul(s, inv_norm);
    mi_tensor *along = mi_matmul(phi, mi_unsqueeze(h, -1));              /* ⟨φ_i, h⟩ [.., m, 1] */
    mi_tensor *h_perp = mi_sub(mi_unsqueeze(h, -2), mi_mul(along, phi)); /* P(s_i) h */
    return mi_mul(mi_mul(mi_unsqueeze(c, -1), inv_norm), h_perp);
}

/* read: (h, c) = (e, x) — Eq. 4 */
static int lattice_grad(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *x, mi_tensor *e,
                        mi_tensor **g)
{
    g[0] = orthogonal_step(c, w[0], x, e);
    return g[0] ? 0 : -1;
}

/* encoding: (h, c) = (v, e) — Eq. 7 and 9 */
static int lattice_encode_grad(const mi_miras_config *c, mi_tensor *const *w, mi_tensor *v,
                               mi_tensor *e, mi_tensor **g)
{
    g[0] = orthogonal_step(c, w[0], e, v);
    return g[0] ? 0 : -1;
}

const mi_memory_kind mi_memory_lattice = {
    .name = "lattice", .formula = "M(x) = phi(S) x, E(v) = phi(S)^T v, phi: each slot / its norm",
    .shapes = lattice_shapes, .init = lattice_init, .forward = lattice_forward,
    .grad = lattice_grad, .channel_gates = false,
    .encode = lattice_encode, .encode_grad = lattice_encode_grad, .keys_are_slots = true,
};
