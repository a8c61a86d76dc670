/* nn.c's REF kernels (softmax and log-softmax, cross entropy, one-hot, the
 * three last-axis normalisations, and the fused softmax and layer-norm
 * backward), written once and included by nn.c per dtype, with NN_T the
 * element type and NN_NAME(x) the name x with the dtype's suffix
 * (axis_split, index_at and the NORM_* kinds come from nn.c). Each op's
 * vjp and attributes are stated at the op in nn.c. Not a header of its
 * own: no guard. */

/* y = softmax(x) along attrs.axis: y_i = e^(x_i − m) / Σ_j e^(x_j − m),
 * m = max x; with want_log, y_i = x_i − m − log Σ_j e^(x_j − m). want_log is a
 * constant at each call (softmax, log_softmax below). */
static inline __attribute__((always_inline)) void
NN_NAME(softmax_rows)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, bool want_log)
{
    typedef NN_T scalar_t; /* for F(exp) */
    int64_t outer, n, inner;
    axis_split(in[0], a->axis < 0 ? a->axis + in[0]->rank : a->axis, &outer, &n, &inner);
    const NN_T *X = in[0]->data;
    NN_T *Y = o->data;
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            const NN_T *x = X + p * n * inner + q;
            NN_T *y = Y + p * n * inner + q;
            NN_T m = x[0], s = 0;
            for (int64_t i = 1; i < n; i++)
                if (x[i * inner] > m) m = x[i * inner];
            for (int64_t i = 0; i < n; i++) s += F(exp)(x[i * inner] - m);
            NN_T ls = F(log)(s), rs = 1 / s;
            for (int64_t i = 0; i < n; i++)
                y[i * inner] = want_log ? x[i * inner] - m - ls : F(exp)(x[i * inner] - m) * rs;
        }
}
static void NN_NAME(softmax)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(softmax_rows)(o, in, a, false);
}
static void NN_NAME(log_softmax)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(softmax_rows)(o, in, a, true);
}

/* logits [N, C], targets [N], attrs.index = ignore_index:
 *   L = (1/n) Σ_{r: t_r ≠ ignore} (logsumexp(x_r) − x_{r,t_r}),  n = #counted rows
 * (L = 0 when every row is ignored). */
static void NN_NAME(cross_entropy)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    typedef NN_T scalar_t; /* for F(exp) */
    const mi_tensor *t = in[1];
    int64_t nr = in[0]->shape[0], nc = in[0]->shape[1], count = 0;
    const NN_T *X = in[0]->data;
    NN_T total = 0;
    for (int64_t r = 0; r < nr; r++) {
        int64_t c = index_at(t, r);
        if (c == a->index) continue;
        const NN_T *x = X + r * nc;
        NN_T m = x[0], s = 0;
        for (int64_t j = 1; j < nc; j++)
            if (x[j] > m) m = x[j];
        for (int64_t j = 0; j < nc; j++) s += F(exp)(x[j] - m);
        total += m + F(log)(s) - x[c];
        count++;
    }
    ((NN_T *)o->data)[0] = count ? total / (NN_T)count : 0;
}

/* targets [...] → [..., C]: y[..., c] = [t = c], rows with t = ignore_index
 * all 0 (attrs.index = C, attrs.stop = ignore_index). */
static void NN_NAME(one_hot)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int64_t nc = a->index;
    NN_T *Y = o->data;
    memset(Y, 0, sizeof(NN_T) * (size_t)o->numel);
    for (int64_t r = 0; r < in[0]->numel; r++) {
        int64_t c = index_at(in[0], r);
        if (c != a->stop) Y[r * nc + c] = 1;
    }
}

/* Over the last axis (D entries), eps = attrs.eps; kind a constant at each
 * call (layer_norm, rms_norm, l2_normalize below):
 *   NORM_LAYER  y = (x − μ)·r,  r = 1/√(mean((x − μ)²) + eps)
 *   NORM_RMS    y = x·r,        r = 1/√(mean(x²) + eps)
 *   NORM_L2     y = x·r,        r = 1/√(Σx² + eps)
 * (μ stays 0 for the last two). */
static inline __attribute__((always_inline)) void
NN_NAME(norm_rows)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a, int kind)
{
    typedef NN_T scalar_t; /* for F(sqrt) */
    int64_t d = in[0]->shape[in[0]->rank - 1], rows = d ? o->numel / d : 0;
    const NN_T *X = in[0]->data;
    NN_T *Y = o->data;
    for (int64_t r = 0; r < rows; r++) {
        const NN_T *x = X + r * d;
        NN_T *y = Y + r * d;
        NN_T mu = 0, ss = 0;
        if (kind == NORM_LAYER) {
            for (int64_t j = 0; j < d; j++) mu += x[j];
            mu /= (NN_T)d;
        }
        for (int64_t j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);
        if (kind != NORM_L2) ss /= (NN_T)d;
        NN_T rs = 1 / F(sqrt)(ss + (NN_T)a->eps);
        for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mu) * rs;
    }
}
static void NN_NAME(layer_norm)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(norm_rows)(o, in, a, NORM_LAYER);
}
static void NN_NAME(rms_norm)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(norm_rows)(o, in, a, NORM_RMS);
}
static void NN_NAME(l2_normalize)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(norm_rows)(o, in, a, NORM_L2);
}
/* rms_norm's y times the gain w [D], entry by entry along the last axis */
static void NN_NAME(rms_norm_gain)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    NN_NAME(norm_rows)(o, in, a, NORM_RMS);
    int64_t d = in[0]->shape[in[0]->rank - 1], rows = d ? o->numel / d : 0;
    const NN_T *W = in[1]->data;
    NN_T *Y = o->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++) Y[r * d + j] *= W[j];
}

/* Over the last axis, y = rms_norm(x), r = 1/√(mean(x²) + eps):
 *   dx = r·(g − y·m),  m = mean(g ⊙ y) */
static void NN_NAME(rms_norm_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    typedef NN_T scalar_t; /* for F(sqrt) */
    int64_t d = in[0]->shape[in[0]->rank - 1], rows = d ? o->numel / d : 0;
    const NN_T *X = in[0]->data, *G = in[1]->data;
    NN_T *D = o->data;
    for (int64_t r = 0; r < rows; r++) {
        const NN_T *x = X + r * d, *g = G + r * d;
        NN_T ss = 0, sgy = 0;
        for (int64_t j = 0; j < d; j++) ss += x[j] * x[j];
        NN_T rs = 1 / F(sqrt)(ss / (NN_T)d + (NN_T)a->eps);
        for (int64_t j = 0; j < d; j++) sgy += g[j] * (x[j] * rs);
        NN_T mgy = sgy / (NN_T)d;
        for (int64_t j = 0; j < d; j++) D[r * d + j] = rs * (g[j] - x[j] * rs * mgy);
    }
}

/* y = softmax output, g its gradient, along attrs.axis:
 *   dx = y ⊙ (g − s),  s = Σ g ⊙ y */
static void NN_NAME(softmax_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int64_t outer, n, inner;
    axis_split(in[0], a->axis < 0 ? a->axis + in[0]->rank : a->axis, &outer, &n, &inner);
    const NN_T *Y = in[0]->data, *G = in[1]->data;
    NN_T *D = o->data;
    for (int64_t p = 0; p < outer; p++)
        for (int64_t q = 0; q < inner; q++) {
            int64_t base = p * n * inner + q;
            NN_T s = 0;
            for (int64_t i = 0; i < n; i++) s += G[base + i * inner] * Y[base + i * inner];
            for (int64_t i = 0; i < n; i++)
                D[base + i * inner] = Y[base + i * inner] * (G[base + i * inner] - s);
        }
}

/* Over the last axis, y = layer_norm(x), r = 1/√(var(x) + eps):
 *   dx = r·(g − mean(g) − y·m),  m = mean(g ⊙ y) */
static void NN_NAME(layer_norm_backward)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    typedef NN_T scalar_t; /* for F(sqrt) */
    int64_t d = in[0]->shape[in[0]->rank - 1], rows = d ? o->numel / d : 0;
    const NN_T *X = in[0]->data, *G = in[1]->data;
    NN_T *D = o->data;
    for (int64_t r = 0; r < rows; r++) {
        const NN_T *x = X + r * d, *g = G + r * d;
        NN_T mu = 0, ss = 0, sg = 0, sgy = 0;
        for (int64_t j = 0; j < d; j++) mu += x[j];
        mu /= (NN_T)d;
        for (int64_t j = 0; j < d; j++) ss += (x[j] - mu) * (x[j] - mu);
        NN_T rs = 1 / F(sqrt)(ss / (NN_T)d + (NN_T)a->eps);
        for (int64_t j = 0; j < d; j++) {
            sg += g[j];
            sgy += g[j] * ((x[j] - mu) * rs);
        }
        NN_T mg = sg / (NN_T)d, mgy = sgy / (NN_T)d;
        for (int64_t j = 0; j < d; j++) D[r * d + j] = rs * (g[j] - mg - (x[j] - mu) * rs * mgy);
    }
}
