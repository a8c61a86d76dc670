/* One broadcasting binary op of own_kernels.c, written once and included
 * there per op, with BIN_OP the op's name (add: own_add_f32, with add_run
 * and add_range) and BIN_EXPR(x, y) its element expression in float, the
 * expression of binary.c. This file #undefs both at its end, so that the
 * next op can define them. ewalk, erun_all, eplan_build and ectx come from
 * own_kernels.c. Not a header of its own: no guard. */
#define BIN_CAT_(a, b) a##b
#define BIN_CAT(a, b) BIN_CAT_(a, b)

/* A run y[i] = BIN_EXPR(a[i·sa], b[i·sb]), sa and sb 0 or 1: one of three
 * vectorised loops, both contiguous or one side repeated (scalar operand,
 * row or column broadcast), or one value when both are repeated. */
static inline void BIN_CAT(BIN_OP, _run)(float *restrict Y, const float *restrict A,
                                         const float *restrict B, const float *C, int64_t sa,
                                         int64_t sb, int64_t sc, int64_t n)
{
    (void)C, (void)sc;
    if (sa && sb) {
        for (int64_t i = 0; i < n; i++) {
            float x = A[i], y = B[i];
            Y[i] = (float)(BIN_EXPR(x, y));
        }
    } else if (sa) {
        const float y = B[0];
        for (int64_t i = 0; i < n; i++) {
            float x = A[i];
            Y[i] = (float)(BIN_EXPR(x, y));
        }
    } else if (sb) {
        const float x = A[0];
        for (int64_t i = 0; i < n; i++) {
            float y = B[i];
            Y[i] = (float)(BIN_EXPR(x, y));
        }
    } else {
        const float x = A[0], y = B[0], v = (float)(BIN_EXPR(x, y));
        for (int64_t i = 0; i < n; i++) Y[i] = v;
    }
}

static void BIN_CAT(BIN_OP, _range)(const void *c, int64_t e0, int64_t e1)
{
    ewalk(c, e0, e1, BIN_CAT(BIN_OP, _run));
}

/* Y = BIN_EXPR(x, y) of x = input 0 and y = input 1, broadcasting. */
void BIN_CAT(BIN_CAT(own_, BIN_OP), _f32)(mi_tensor *o, mi_tensor *const *in, const mi_attrs *a)
{
    (void)a;
    eplan p;
    eplan_build(&p, o, in, 2);
    ectx k = {.p = &p, .y = o->data, .x = {in[0]->data, in[1]->data}};
    erun_all(&k, o->numel, BIN_CAT(BIN_OP, _range));
}

#undef BIN_CAT
#undef BIN_CAT_
#undef BIN_OP
#undef BIN_EXPR
