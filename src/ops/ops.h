/* Installed as miras/ops/ops.h, for users: included by miras.h. */
/* miras ops: the registry and the catalogue. Every op returns a new tensor in
 * the current scope (reshape and leading-axis slices return views), records
 * itself for autograd when an input requires grad, and returns NULL with a
 * message (mi_error()) on bad input; a NULL input gives a NULL result.
 *
 * Axes may be negative (counted from the end). Binary ops broadcast by
 * NumPy's rules. Index tensors are i32 or i64.
 *
 * The fused ops' packed entry points, their vjps and the fused backward ops
 * are for op and component authors, in ops/fused.h (miras/extend.h). */
#ifndef MIRAS_OPS_H
#define MIRAS_OPS_H

#include "autograd/autograd.h"

/* ---------------------------------------------------------------- registry */
int mi_op_count(void);
const mi_op *mi_op_at(int id);          /* NULL if listed but not defined */
const char *mi_op_listed_name(int id);  /* the name op_list.h gives id */
const mi_op *mi_op_find(const char *name);
/* Calls op by descriptor (what the registry-driven tests and tools use). */
mi_tensor *mi_op_call(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a);

/* Checks one op on every example its descriptor provides: gradcheck and
 * gradgradcheck in f64 (differentiable ops), and the f32 kernel against the
 * f64 one (all ops). */
typedef struct mi_op_check_result {
    int variants;        /* examples run */
    int gradchecks;      /* gradcheck + gradgradcheck calls that ran */
    bool ok;
    double f32_rel_err;  /* worst max|y32 − y64| / (1 + max|y64|) */
    char message[320];   /* the first failure */
} mi_op_check_result;
mi_op_check_result mi_op_check(const mi_op *op, unsigned seed);

/* The instruction set backend b runs here: oneDNN's effective ISA
 * ("avx512_core", "avx2", ...; ONEDNN_MAX_CPU_ISA caps it), OpenBLAS's core
 * ("SkylakeX", "Haswell", ...; OPENBLAS_CORETYPE sets it), the own kernels'
 * compiled target ("avx512f", "avx2+fma"), "c" for the reference loops. */
const char *mi_backend_isa(mi_backend b);
/* The f32 arithmetic peak here, GFLOP/s on `threads` threads (≤ 0: 1):
 * measured by independent fused multiply-add chains in the vector registers
 * of the own kernels' instruction set (the widest FMA they can use), each
 * thread its own: the best of five runs of ≥ 50 ms. What a benchmark's
 * GFLOP/s is a fraction of. */
double mi_fma_peak(int threads);

/* Floating-point operations of the matrix products the ops have computed
 * since the process started, all threads (a reader takes differences):
 * 2·M·N·K per product of matmul and matmul_acc (times the batch), M·N per
 * outer product, and the products of the fused ops (attention's q kᵀ and P v,
 * the scans' per-token matrix–vector and rank-1 products) from their shapes.
 * Elementwise ops, reductions, softmax, norms and tri_solve are not counted. */
uint64_t mi_flops(void);

/* ---------------------------------------------------------------- elementwise */
mi_tensor *mi_neg(mi_tensor *x);
mi_tensor *mi_abs(mi_tensor *x);
mi_tensor *mi_sign(mi_tensor *x);             /* gradient 0 */
mi_tensor *mi_exp(mi_tensor *x);
mi_tensor *mi_log(mi_tensor *x);
mi_tensor *mi_sqrt(mi_tensor *x);
mi_tensor *mi_rsqrt(mi_tensor *x);
mi_tensor *mi_square(mi_tensor *x);
mi_tensor *mi_reciprocal(mi_tensor *x);
mi_tensor *mi_pow_scalar(mi_tensor *x, double p);  /* x^p */
mi_tensor *mi_tanh(mi_tensor *x);
mi_tensor *mi_sigmoid(mi_tensor *x);
mi_tensor *mi_silu(mi_tensor *x);             /* x·σ(x) */
mi_tensor *mi_swiglu(mi_tensor *a, mi_tensor *b); /* silu(a)·b, one shape: a SwiGLU gate */
mi_tensor *mi_gelu(mi_tensor *x);             /* x·Φ(x), exact (erf) form */
mi_tensor *mi_erf(mi_tensor *x);
mi_tensor *mi_relu(mi_tensor *x);
mi_tensor *mi_softplus(mi_tensor *x);         /* log(1 + e^x) */
mi_tensor *mi_log_sigmoid(mi_tensor *x);      /* −softplus(−x) */
mi_tensor *mi_clamp(mi_tensor *x, double lo, double hi);
mi_tensor *mi_add_scalar(mi_tensor *x, double s);
mi_tensor *mi_mul_scalar(mi_tensor *x, double s);

mi_tensor *mi_add(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_sub(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_mul(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_div(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_maximum(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_minimum(mi_tensor *a, mi_tensor *b);
/* cond ≠ 0 ? a : b; cond carries no gradient. */
mi_tensor *mi_where(mi_tensor *cond, mi_tensor *a, mi_tensor *b);
/* Comparisons give 1.0 / 0.0 in a's dtype; no gradient. */
mi_tensor *mi_gt(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_ge(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_lt(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_le(mi_tensor *a, mi_tensor *b);
mi_tensor *mi_eq(mi_tensor *a, mi_tensor *b);

/* ---------------------------------------------------------------- reductions */
#define MI_ALL (-100) /* as an axis: reduce over every axis */
mi_tensor *mi_sum(mi_tensor *x, int axis, bool keepdim);
mi_tensor *mi_sum_axes(mi_tensor *x, uint32_t axes_mask, bool keepdim); /* bit i = axis i */
mi_tensor *mi_mean(mi_tensor *x, int axis, bool keepdim);
mi_tensor *mi_max(mi_tensor *x, int axis, bool keepdim);
mi_tensor *mi_logsumexp(mi_tensor *x, int axis, bool keepdim);
mi_tensor *mi_norm(mi_tensor *x, double p, int axis, bool keepdim); /* (Σ|x|^p)^(1/p) */
/* Sums a broadcast tensor back to `shape` (the adjoint of broadcast_to). */
mi_tensor *mi_sum_to(mi_tensor *x, int rank, const int64_t *shape);

/* ---------------------------------------------------------------- linear algebra */
/* [..., m, k] · [..., k, n] → [..., m, n]; batch dims broadcast. */
mi_tensor *mi_matmul(mi_tensor *a, mi_tensor *b);
/* The same with either operand's last two axes transposed first. */
mi_tensor *mi_matmul_t(mi_tensor *a, mi_tensor *b, bool trans_a, bool trans_b);
/* c + s · op(a) op(b) with c broadcast to the product's shape, as one GEMM
 * into a copy of c (a memory's step W − η Gᵀ U without the product as a
 * tensor of its own). */
mi_tensor *mi_matmul_acc(mi_tensor *c, mi_tensor *a, mi_tensor *b, bool trans_a, bool trans_b,
                         double s);
/* gate ⊙ c + s · op(a) op(b), gate broadcast to the product's shape with its
 * last axis 1 (a gate per row: a memory's retention α_t ⊙ W + …), in one
 * pass over the state where mi_scale_add after a product takes three. */
mi_tensor *mi_matmul_acc_gated(mi_tensor *c, mi_tensor *gate, mi_tensor *a, mi_tensor *b,
                               bool trans_a, bool trans_b, double s);
/* [..., m] ⊗ [..., n] → [..., m, n]. */
mi_tensor *mi_outer(mi_tensor *a, mi_tensor *b);
/* X = L⁻¹ B with L = I + StrictLower(l) unit lower-triangular (only l's
 * strictly lower part is read); trans: X = L⁻ᵀ B. l [..., n, n], B [..., n, m],
 * batch dims broadcast. */
mi_tensor *mi_tri_solve(mi_tensor *l, mi_tensor *b, bool trans);

/* ---------------------------------------------------------------- delta_scan
 * The matrix memory's per-token recurrence over a sequence, read after write:
 *   S_t = α_t S_{t−1} + (ω_t v_t − β_t ρ_t S_{t−1} k_t) k_tᵀ,   y_t = S_t q_t
 * with ρ_t = 1 (the delta rule), α_t (decay_first: α S (I − β k kᵀ) + β v kᵀ)
 * or 0 (Hebbian), and ω_t = β_t, or 1 with MI_DELTA_RULE_UNIT_WRITE or'd into
 * the rule (the write v kᵀ unscaled: α S (I − β k kᵀ) + v kᵀ). s0 [N, dv, dk], q, k [N, T, dk], v [N, T, dv], beta and
 * alpha [N, T] or [N, T, dv] (per value row: Diag(α_t) S_{t−1}). Returns y [N, T, dv] and *state = S_T [N, dv, dk] (state may
 * be NULL). First-order gradients only (a fused reverse scan). */
typedef enum mi_delta_rule {
    MI_DELTA_RULE_DELTA = 0,
    MI_DELTA_RULE_DECAY_FIRST = 1,
    MI_DELTA_RULE_HEBBIAN = 2,
    /* a flag on one of the above: alpha [N, T, dk] decays the key axis,
     * S_{t−1} Diag(α_t) (decay_first: S_{t−1} Diag(α_t)(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ) */
    MI_DELTA_RULE_ALPHA_KEYS = 4,
    MI_DELTA_RULE_UNIT_WRITE = 8, /* a flag, or'd with one of the three (not with ALPHA_KEYS) */
} mi_delta_rule;
mi_tensor *mi_delta_scan(mi_tensor *s0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                         mi_tensor *beta, mi_tensor *alpha, mi_delta_rule rule,
                         mi_tensor **state);

/* ---------------------------------------------------------------- cms_scan
 * One continuum-memory level (Nested Learning Eq. 30–31) over a sequence:
 * y_t = W1 gelu(W2 u_t) with the weights of t's chunk of `chunk` tokens, and
 * after each full chunk that ends before T, W1 −= Σ c1_t e_t s_tᵀ,
 * W2 −= Σ c2_t δ_t u_tᵀ (e_t = y_t − v_t, s_t = gelu(W2 u_t),
 * δ_t = gelu'(W2 u_t) ⊙ W1ᵀ e_t; c1 = η/(‖s‖² + hidden_eps), c2 = η/(‖u‖² + eps)
 * with lms, else c = η). u, v [B, T, d], eta [B, T], w1 [d, h], w2 [h, d]
 * (θ_0, shared by the batch) → y [B, T, d]. First-order gradients only. */
mi_tensor *mi_cms_scan(mi_tensor *u, mi_tensor *v, mi_tensor *eta, mi_tensor *w1, mi_tensor *w2,
                       int64_t chunk, bool lms, double eps, double hidden_eps);

/* ---------------------------------------------------------------- mlp_scan
 * The MLP memory's per-token recurrence over a sequence (depth 2, d = dk =
 * dv, read after write), M_W(x) = x + LN(W1 gelu(W2 x)):
 *   g_t = ∇_W ℓ(M_W(k_t); v_t) at W = R(A_{t−1}) or, decay_first, at
 *         R(α_t A_{t−1}) (ℓ2: ½‖y − v‖²; yaad: the ℓ2/ℓ1 switch at δ_t with
 *         Sign ≈ tanh(a·), a = sign_sharpness, ∞: the exact sign; lp:
 *         Σ_j √(e_j² + ε)^p)
 *   gd:  A_t = α_t A_{t−1} − η_t g_t;  momentum: S_t = μ_t S_{t−1} − η_t g_t,
 *        A_t = α_t A_{t−1} + S_t
 *   y_t = M_{R(A_t)}(q_t)
 * with the read R the identity (the state is W), or per weight matrix
 * lq: R(A) = A / (‖A‖_F² + ε)^((q−2)/(2q)), or kl: R(L) = c·softmax(L) per row
 * with L ← log c + log_softmax(L) after each write (gd only for both).
 * With chunk b > 1 the mini-batch rule: the tokens of a chunk (with
 * lag_token: its first token, then the rest) take g_t at R(A) of the state
 * before the chunk (the segment), and kl's projection applies at its end.
 * state0: W1 [N, d, h], W2 [N, h, d] (then S1, S2 of the same shapes with
 * momentum; any shape [N, ...] with those elements); q, k, v [N, T, d];
 * gates [N, T, 4] = (η, α, μ, δ) (α ≡ 1: no retention; μ and δ ignored
 * where unused). Returns y [N, T, d] and the final state in state (2 or 4
 * tensors shaped as state0; state may be NULL). First-order gradients only
 * (a fused reverse scan). */
typedef enum mi_mlp_scan_read {
    MI_MLP_READ_STATE = 0, /* W = A */
    MI_MLP_READ_LQ,        /* W = A / (‖A‖_F² + lq_eps)^((lq_q−2)/(2 lq_q)) per matrix */
    MI_MLP_READ_KL,        /* W = kl_scale · softmax(L) per row, L projected after each write */
} mi_mlp_scan_read;
typedef struct mi_mlp_scan_rule {
    bool momentum;    /* else gd */
    bool yaad;        /* the yaad bias */
    bool lp;          /* the ℓp bias (neither: ℓ2) */
    bool decay_first; /* g_t at α_t W_{t−1} (gated DeltaNet's order), else at W_{t−1} */
    double sign_sharpness;
    double lp_p, lp_eps;
    mi_mlp_scan_read read;
    double lq_q, lq_eps, kl_scale;
    int64_t chunk;    /* > 1: the mini-batch rule, g_t at the state before t's segment
                         (no decay_first, no lq read); 0 or 1: per token */
    bool lag_token;   /* with chunk > 1 each chunk's first token is a segment of its own */
} mi_mlp_scan_rule;
mi_tensor *mi_mlp_scan(mi_tensor *const *state0, mi_tensor *q, mi_tensor *k, mi_tensor *v,
                       mi_tensor *gates, const mi_mlp_scan_rule *rule, mi_tensor **state);

/* ---------------------------------------------------------------- checkpoint
 * y = fn(ctx, in, n_in) without keeping fn's activations for the backward
 * (activation checkpointing, torch.utils.checkpoint): the forward runs fn
 * with recording off and gives back the storage of everything it made but
 * y; the backward runs fn again, recording, and differentiates that run. So
 * a training step keeps y and the inputs, not what fn computed, and runs fn
 * twice. The leaves fn uses that require grad (its parameters) get their
 * gradients as inputs do. fn must compute the same thing both times (no
 * random draws, no state it changes), must not keep the tensors it makes,
 * and ctx must live until the backward. Up to MI_MAX_INPUTS − 1 inputs; a
 * tensor with autograd history that fn uses must be one of them (else
 * NULL with a message). With recording off it is fn(ctx, in, n_in). First-
 * order gradients only: its vjp under create_graph fails with a message. */
typedef mi_tensor *(*mi_checkpoint_fn)(void *ctx, mi_tensor *const *in, int n_in);
mi_tensor *mi_checkpoint(mi_checkpoint_fn fn, void *ctx, mi_tensor *const *in, int n_in);

/* ---------------------------------------------------------------- scan of a body
 * A differentiable scan of a body written with ordinary ops (JAX's
 * lax.scan): for t = 1..T, (c_t, y_t) = body(c_{t−1}, x_t), c_0 = carry0;
 * carry_out = c_T and ys[j] = the y_t[j] stacked on axis 1. xs[j] are
 * [N, T, …] (token axis 1; every xs has the same N and T ≥ 1) and the body
 * gets x_t[j] = xs[j][:, t] of shape [N, …]; each y_t[j] must be [N, …],
 * the same at every token, ys[j] is then [N, T, …]; carry_out[i] must keep
 * carry0[i]'s shape. One float dtype for all. The body fills carry_out[]
 * and y[] with ops on its arguments, and returns 0 (or -1 with a message).
 *
 * No autograd record per token: the forward runs the body with recording
 * off and keeps the carry at the start of every segment of `segment` tokens
 * (0: segments of K, K − 1, …, 1 tokens, K (K + 1) / 2 ≥ T); the backward
 * runs each segment again to have the carry before each token, then each
 * token once more, recording, and differentiates it in a nested pass.
 * Memory: ≈ √(2T) carries by default and one token's record, besides
 * inputs, outputs and their gradients; the body runs three times a token.
 * Gradients reach carry0, xs and the tensors from outside that the body
 * reads (from ctx) and that require grad: its parameters, leaves or views
 * and functions of them, found as mi_checkpoint finds its leaves. The body
 * must compute the same thing each time it runs, must not keep the tensors
 * it makes (they live for one token), and ctx must live until the backward.
 * At most 32 carries, per-token inputs and outputs each. First-order
 * gradients only: its vjp under create_graph fails with a message. 0, or -1
 * with a message naming mi_scan. */
/* segment = MI_SCAN_RECORD: the forward runs the body once a token,
 * recording, and keeps the record for the backward, which differentiates it
 * with no second run: the body runs once instead of three times, for the
 * memory of every token's record (an unrolled tape's), held until the
 * current scope is reset or freed. With mi_scan_rows each thread records
 * its rows and differentiates them on its thread. With recording off, or
 * inside a backward pass (a checkpoint's function run again, where the node
 * lives for a nested pass only), it is segment 0. */
#define MI_SCAN_RECORD (-1)
typedef int (*mi_scan_fn)(void *ctx, mi_tensor *const *carry, mi_tensor *const *x,
                          mi_tensor **carry_out, mi_tensor **y);
int mi_scan(mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0, int n_xs,
            mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out, mi_tensor **ys);
/* mi_scan for a body whose rows are independent: row n of what it returns
 * depends on row n of its carries and of x_t alone (no op of the body mixes
 * axis 0, as for per-sequence or per-head memories), and every carry is [N,
 * …]. Then the N rows are split into one consecutive range a thread
 * (mi_threads()), and each range runs as a scan of its own on its thread,
 * forward and backward: one parallel region a pass, however small its ops
 * (a body of small ops otherwise runs on one thread, each op below the size
 * that pays a fork). The results are mi_scan's up to rounding (a kernel's
 * arithmetic on a row may depend on how many rows it sees). Parameters
 * (tensors from outside that require grad) stand as each thread's own leaves
 * in its backward, their gradients summed over the ranges. Inside a parallel
 * region it is mi_scan. */
int mi_scan_rows(mi_scan_fn body, void *ctx, int n_carry, mi_tensor *const *carry0, int n_xs,
                 mi_tensor *const *xs, int n_ys, int segment, mi_tensor **carry_out,
                 mi_tensor **ys);
/* Inside a body: whether mi_scan reads this call's y's. False while it runs a
 * token again for its carry alone (the backward's recomputation): the body
 * may then skip its outputs' work and leave y[j] NULL. */
bool mi_scan_wants_ys(void);
/* mi_scan keeps the two scratch scopes its tokens alternate between per
 * thread for the next call (two per nesting level, each at most a token and
 * its record); this frees them (a thread done with mi_scan). */
void mi_scan_release(void);

/* ---------------------------------------------------------------- shape */
mi_tensor *mi_reshape(mi_tensor *x, int rank, const int64_t *shape); /* a view; one dim may be -1 */
mi_tensor *mi_transpose(mi_tensor *x, int axis0, int axis1);
mi_tensor *mi_permute(mi_tensor *x, const int *perm);
/* x[..., start:stop, ...] along axis (a copy; negative start/stop count from the end). */
mi_tensor *mi_slice(mi_tensor *x, int axis, int64_t start, int64_t stop);
/* Zeros before and after along axis (the adjoint of slice). */
mi_tensor *mi_pad(mi_tensor *x, int axis, int64_t before, int64_t after);
mi_tensor *mi_concat(mi_tensor *const *xs, int n, int axis);
mi_tensor *mi_stack(mi_tensor *const *xs, int n, int axis);
mi_tensor *mi_broadcast_to(mi_tensor *x, int rank, const int64_t *shape);
mi_tensor *mi_flip(mi_tensor *x, int axis);
/* out = x taken at idx along axis: out.shape[axis] = len(idx); idx is 1-D. */
mi_tensor *mi_index_select(mi_tensor *x, int axis, mi_tensor *idx);
/* The adjoint: out.shape[axis] = size, out[idx[i]] += src[i] along axis. */
mi_tensor *mi_index_add(mi_tensor *src, int axis, mi_tensor *idx, int64_t size);
/* out[..i..] = x[..idx[..i..]..] along axis; idx has out's shape (torch.gather). */
mi_tensor *mi_gather(mi_tensor *x, int axis, mi_tensor *idx);
/* The adjoint: out.shape[axis] = size, out[..idx[..i..]..] += src[..i..]. */
mi_tensor *mi_scatter_add(mi_tensor *src, int axis, mi_tensor *idx, int64_t size);
/* Convenience views built on reshape. */
mi_tensor *mi_unsqueeze(mi_tensor *x, int axis);
mi_tensor *mi_squeeze(mi_tensor *x, int axis);

/* ---------------------------------------------------------------- nn */
mi_tensor *mi_softmax(mi_tensor *x, int axis);
mi_tensor *mi_log_softmax(mi_tensor *x, int axis);
/* logits [N, C], targets [N] (i32/i64): mean over targets ≠ ignore_index of
 * −log softmax(logits)[target]. All-ignored gives 0. */
mi_tensor *mi_cross_entropy(mi_tensor *logits, mi_tensor *targets, int64_t ignore_index);
/* [N] targets → [N, C] float one-hot in dtype dt; ignored rows are 0. No gradient. */
mi_tensor *mi_one_hot(mi_tensor *targets, int64_t classes, int64_t ignore_index, mi_dtype dt);
/* Normalisations over the last axis, without affine parameters. */
mi_tensor *mi_layer_norm(mi_tensor *x, double eps);   /* (x − μ) / √(σ² + eps) */
mi_tensor *mi_rms_norm(mi_tensor *x, double eps);     /* x / √(mean(x²) + eps) */
/* rms_norm(x) ⊙ w, w [D] the gain (RMSNorm with its weight), as one op */
mi_tensor *mi_rms_norm_gain(mi_tensor *x, mi_tensor *w, double eps);
mi_tensor *mi_l2_normalize(mi_tensor *x, double eps); /* x / √(Σx² + eps) */
/* table [V, D], idx (any shape, i32/i64) → [idx..., D]. */
mi_tensor *mi_embedding(mi_tensor *table, mi_tensor *idx);
/* x [B, T, C], w [C, K]: y[b,t,c] = Σ_j w[c,j]·x[b, t−K+1+j, c], zeros before t = 0. */
mi_tensor *mi_conv1d_causal(mi_tensor *x, mi_tensor *w);
/* The same one stretch at a time (a recurrent step): x [B, n, C] continues the
 * rows *tail [B, K − 1, C] that came before it (zeros before the first); the
 * conv at x's n rows, and *tail moves on to the last K − 1 rows. NULL tail or
 * *tail: mi_conv1d_causal(x, w). */
mi_tensor *mi_conv1d_causal_tail(mi_tensor *x, mi_tensor *w, mi_tensor **tail);
/* Rotary embedding on x [..., T, D] (D even; pairs (i, i + D/2)); position t,
 * frequency base^(−2i/D). `inverse` rotates by −angle. */
mi_tensor *mi_rope(mi_tensor *x, double base, bool inverse);
/* The same on x [..., T, H, D], every head rotated by its position t. */
mi_tensor *mi_rope_bthd(mi_tensor *x, double base, bool inverse);
/* q [..., T, D], k [..., S, D], v [..., S, Dv] → [..., T, Dv]:
 * softmax(q kᵀ / √D + mask) v; causal masks s > t; window w > 0 also masks
 * s ≤ t − w. */
mi_tensor *mi_attention(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal, int64_t window);
/* The same with query row t at key position p = first + t (first >= 0): the
 * masks read p for t (causal masks s > p; the window s ≤ p − w). A KV cache
 * holds the keys so far in rows 0 … n − 1 of k (later rows are never read
 * when causal); one new query is mi_attention_at(q, k, v, true, 0, n − 1). */
mi_tensor *mi_attention_at(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal, int64_t window,
                           int64_t first);
/* The same on q [..., T, H, D], k [..., S, H, D], v [..., S, H, Dv] →
 * [..., T, H, Dv]: each head apart, in the layout a projection [..., T, H·D]
 * reshapes to, so no transposes to [..., H, T, D] and back. */
mi_tensor *mi_attention_bthd(mi_tensor *q, mi_tensor *k, mi_tensor *v, bool causal,
                             int64_t window);
/* The additive mask alone, [T, S] with 0 or −inf (no gradient). */
mi_tensor *mi_attention_mask(mi_dtype dt, int64_t t, int64_t s, bool causal, int64_t window);

/* ---------------------------------------------------------------- fused optimizer step
 * One Adam (or AdamW) step in place, recorded nowhere: the fused form of the
 * outer optimizers' Adam and AdamW (mi_optim_step takes it). For every
 * element, with L2 decay g ← g + wd·p, or decoupled p ← p·(1 − lr·wd):
 *   m ← β1 m + (1 − β1) g,  v ← β2 v + (1 − β2) g²,
 *   p ← p − (lr / (1 − β1^step)) · m / (√v / √(1 − β2^step) + eps)
 * in p's dtype, in the order of those ops; warm false: m and v hold no value
 * yet (read as 0). p, m, v, g one float dtype and shape. 0, or -1 with a message. */
typedef struct mi_adam_step {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step; /* from 1 */
    bool decoupled, warm;
} mi_adam_step;
int mi_adam_update(mi_tensor *p, mi_tensor *m, mi_tensor *v, const mi_tensor *g,
                   const mi_adam_step *s);

/* ---------------------------------------------------------------- scans */
mi_tensor *mi_cumsum(mi_tensor *x, int axis, bool reverse);
mi_tensor *mi_cumprod(mi_tensor *x, int axis, bool reverse);
/* h_t = a_t ⊙ h_{t−1} + x_t along axis, h_{−1} = 0 (reverse: t runs backwards);
 * a broadcasts against x. */
mi_tensor *mi_linear_scan(mi_tensor *a, mi_tensor *x, int axis, bool reverse);
/* The same recurrence from a given state: h_{−1} = h0 (reverse: h_len = h0),
 * h0 broadcasting to x's shape with the scan axis of size 1. A NULL h0 is an
 * error like any NULL input (pass zeros, or call mi_linear_scan). */
mi_tensor *mi_linear_scan_from(mi_tensor *a, mi_tensor *x, mi_tensor *h0, int axis, bool reverse);

/* ---------------------------------------------------------------- MIRAS helpers */
mi_tensor *mi_soft_threshold(mi_tensor *x, double lambda); /* sign(x)·max(|x| − λ, 0) */
mi_tensor *mi_smooth_sign(mi_tensor *x, double a);         /* tanh(a·x) */
mi_tensor *mi_smooth_abs(mi_tensor *x, double eps);        /* √(x² + eps) */
/* Moneta's ℓq step on the last two axes (a matrix per leading index):
 * MI_LQ_FROBENIUS  A / (‖A‖_F² + eps)^((q−2)/(2q))   (default; docs/models.md says why)
 * MI_LQ_PAPER      A / (‖A‖_q^q + eps)^((q−2)/q)     (MIRAS, eq:q-norm: entrywise q-norm)
 * eps ≥ 0 (0: the exact norms). */
enum { MI_LQ_FROBENIUS = 0, MI_LQ_PAPER = 1 };
mi_tensor *mi_lq_normalize(mi_tensor *A, double q, int form, double eps);
/* (s + d) / ‖s + d‖₂ along the last axis: a step retracted onto the sphere. */
mi_tensor *mi_sphere_retract(mi_tensor *s, mi_tensor *d);

/* ---------------------------------------------------------------- fused state updates
 * One pass over a state where the composed ops take one per product and sum.
 * a ⊙ X + b ⊙ (d xᵀ): X [..., out, in], d [..., out], x [..., in]; a broadcasts
 * to X (NULL: 1), b to [..., out, 1]. A momentum or retention step with a
 * rank-one gradient (S ← μ S − η δ xᵀ) without the outer product's tensor. */
mi_tensor *mi_outer_update(mi_tensor *X, mi_tensor *a, mi_tensor *b, mi_tensor *d, mi_tensor *x);
/* a ⊙ X + Z, Z of X's shape, a broadcasting to it (A ← α A + S). */
mi_tensor *mi_scale_add(mi_tensor *X, mi_tensor *a, mi_tensor *Z);

#endif
