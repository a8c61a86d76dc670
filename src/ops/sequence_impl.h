/* sequence.c's REF kernels other than attention's (attention_impl.h): the
 * causal depthwise conv1d and its weight gradient, rope, and the attention
 * mask, written once and included by sequence.c per dtype, with SEQ_T the
 * element type and SEQ_NAME(x) the name x with the dtype's suffix. Each
 * op's vjp and attributes are stated at the op in sequence.c. Not a header
 * of its own: no guard. */

/* x [B, T, C], w [C, K]:
 *   y[b,t,c] = Σ_j w[c,j]·x[b, t−K+1+j, c]   (x = 0 before t = 0) */
static void SEQ_NAME(conv1d_causal)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    int64_t nb = in[0]->shape[0], nt = in[0]->shape[1], nc = in[0]->shape[2];
    int64_t k = in[1]->shape[1];
    const SEQ_T *X = in[0]->data, *W = in[1]->data;
    SEQ_T *Y = o->data;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t t = 0; t < nt; t++)
            for (int64_t c = 0; c < nc; c++) {
                SEQ_T s = 0;
                for (int64_t j = 0; j < k; j++) {
                    int64_t u = t - k + 1 + j;
                    if (u >= 0) s += W[c * k + j] * X[(b * nt + u) * nc + c];
                }
                Y[(b * nt + t) * nc + c] = s;
            }
}

/* g, x [B, T, C], attrs.index = K → [C, K]:
 *   dw[c,j] = Σ_{b,t} g[b,t,c]·x[b, t−K+1+j, c] */
static void SEQ_NAME(conv1d_causal_wgrad)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int64_t nb = in[0]->shape[0], nt = in[0]->shape[1], nc = in[0]->shape[2];
    int64_t k = a->index;
    const SEQ_T *G = in[0]->data, *X = in[1]->data;
    SEQ_T *D = o->data;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t j = 0; j < k; j++) {
            SEQ_T s = 0;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t t = k - 1 - j > 0 ? k - 1 - j : 0; t < nt; t++)
                    s += G[(b * nt + t) * nc + c] * X[(b * nt + t - k + 1 + j) * nc + c];
            D[c * k + j] = s;
        }
}

/* x [..., T, D] (or [..., T, H, D] with attrs.axis = −3: nh = H rows a
 * position), h = D/2, attrs.p = base, attrs.reverse = inverse. For
 * position t and pair (i, i + h), θ = ±t·base^(−2i/D):
 *   y_i     = x_i cos θ − x_{i+h} sin θ
 *   y_{i+h} = x_i sin θ + x_{i+h} cos θ
 * The angles in double for both dtypes (t·freq loses digits in float at
 * long T). */
static void SEQ_NAME(rope)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    int rk = in[0]->rank;
    int64_t nt = in[0]->shape[a->axis == -3 ? rk - 3 : rk - 2], d = in[0]->shape[rk - 1];
    int64_t h = d / 2, nh = a->axis == -3 ? in[0]->shape[rk - 2] : 1;
    int64_t lead = o->numel / (nt * d);
    const SEQ_T *X = in[0]->data;
    SEQ_T *Y = o->data;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t i = 0; i < h; i++) {
            double th = (double)t * pow(a->p, -2.0 * (double)i / (double)d);
            SEQ_T cs = (SEQ_T)cos(th), sn = (SEQ_T)(a->reverse ? -sin(th) : sin(th));
            for (int64_t l = 0; l < lead; l++) {
                int64_t row = ((l / nh) * nt + t) * nh + l % nh;
                const SEQ_T *x = X + row * d;
                SEQ_T *y = Y + row * d;
                SEQ_T x0 = x[i], x1 = x[i + h];
                y[i] = x0 * cs - x1 * sn;
                y[i + h] = x0 * sn + x1 * cs;
            }
        }
}

/* out [T, S] (the input gives only dtype and shape), p = attrs.start + t
 * the position of query row t: out[t,s] = −inf when (causal and s > p) or
 * (window > 0 and s ≤ p − window), else 0. */
static void SEQ_NAME(attention_mask)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)in;
    int64_t nt = o->shape[0], ns = o->shape[1];
    SEQ_T *Y = o->data;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t s = 0, p = a->start + t; s < ns; s++) {
            bool masked = (a->causal && s > p) || (a->window > 0 && s <= p - a->window);
            Y[t * ns + s] = masked ? (SEQ_T)-INFINITY : 0;
        }
}
