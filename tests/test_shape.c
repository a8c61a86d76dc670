/* Shape ops: forward values against naive loops written here, views, the
 * composed wrappers (transpose, stack, unsqueeze, squeeze), the adjoint pairs
 * through mi_grad, and every error path. */
#include "harness.h"

/* x with values 0, 1, 2, … (f64), optionally requiring grad. */
static mi_tensor *iota(int rank, const int64_t *shape, bool grad)
{
    mi_tensor *t = mi_tensor_new(MI_F64, rank, shape);
    for (int64_t i = 0; i < t->numel; i++) mi_set(t, i, (double)i);
    return grad ? mi_requires_grad(t, true) : t;
}

static mi_tensor *idx64(int64_t n, const int64_t *v)
{
    return mi_from_buffer(MI_I64, 1, (const int64_t[]){n}, v);
}

static void assert_shape(const mi_tensor *t, int rank, const int64_t *shape)
{
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->rank, rank);
    for (int d = 0; d < rank; d++) ck_assert_int_eq(t->shape[d], shape[d]);
}

/* ---------------------------------------------------------------- reshape */
START_TEST(reshape_is_a_view)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3, 4), false);
    mi_tensor *y = mi_reshape(x, MI_SHAPE(4, -1));
    assert_shape(y, MI_SHAPE(4, 6));
    char *base = x->data, *p = y->data;
    ck_assert(p >= base && p < base + x->numel * sizeof(double));
    for (int64_t i = 0; i < 24; i++) ck_assert(mi_get(y, i) == (double)i);
    mi_set(x, 5, 100.0); /* shares storage */
    ck_assert(mi_get(y, 5) == 100.0);
    mi_tensor *z = mi_reshape(mi_scalar(MI_F64, 2.5), MI_SHAPE(1, 1, 1));
    assert_shape(z, MI_SHAPE(1, 1, 1));
    ck_assert(mi_item(z) == 2.5);
    mi_tensor *w = mi_reshape(z, 0, NULL);
    ck_assert_int_eq(w->rank, 0);
    /* index tensors reshape too (a view needs no kernel) */
    mi_tensor *i = mi_reshape(mi_arange(MI_I64, 6), MI_SHAPE(3, 2));
    assert_shape(i, MI_SHAPE(3, 2));
    ck_assert(i->dtype == MI_I64 && mi_get(i, 5) == 5.0);
}
END_TEST

START_TEST(reshape_errors)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3), false);
    ck_assert_ptr_null(mi_reshape(x, MI_SHAPE(4, 2)));
    ck_assert_str_eq(mi_error(), "reshape: cannot view [2,3] as [4,2]");
    mi_error_clear();
    ck_assert_ptr_null(mi_reshape(x, MI_SHAPE(4, -1)));
    ck_assert_error_has("reshape: cannot view [2,3] as [4,-1]");
    mi_error_clear();
    ck_assert_ptr_null(mi_reshape(x, MI_SHAPE(-1, -1)));
    ck_assert_error_has("reshape: bad target shape [-1,-1]");
    mi_error_clear();
    ck_assert_ptr_null(mi_reshape(x, MI_SHAPE(-2, -3)));
    ck_assert_error_has("reshape: bad target shape [-2,-3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_reshape(x, 9, (const int64_t[9]){0}));
    ck_assert_error_has("reshape: target rank 9");
    mi_error_clear();
    ck_assert_ptr_null(mi_reshape(NULL, MI_SHAPE(6)));
    ck_assert_error_has("reshape: input 0 is NULL");
    mi_error_clear();
}
END_TEST

START_TEST(unsqueeze_squeeze)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3), false);
    assert_shape(mi_unsqueeze(x, 0), MI_SHAPE(1, 2, 3));
    assert_shape(mi_unsqueeze(x, 1), MI_SHAPE(2, 1, 3));
    assert_shape(mi_unsqueeze(x, -1), MI_SHAPE(2, 3, 1));
    assert_shape(mi_squeeze(mi_unsqueeze(x, 1), 1), MI_SHAPE(2, 3));
    assert_shape(mi_squeeze(mi_unsqueeze(x, 2), -1), MI_SHAPE(2, 3));
    ck_assert(mi_unsqueeze(x, 1)->data == x->data);
    ck_assert_ptr_null(mi_unsqueeze(x, 3));
    ck_assert_error_has("unsqueeze: axis 3 out of range for rank 3");
    mi_error_clear();
    ck_assert_ptr_null(mi_squeeze(x, 1));
    ck_assert_error_has("squeeze: axis 1 has size 3, not 1: [2,3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_squeeze(x, 2));
    ck_assert_error_has("squeeze: axis 2 out of range for rank 2");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- broadcast_to */
START_TEST(broadcast_to_values)
{
    mi_tensor *x = iota(MI_SHAPE(3, 1), false);
    mi_tensor *y = mi_broadcast_to(x, MI_SHAPE(2, 3, 4));
    assert_shape(y, MI_SHAPE(2, 3, 4));
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++) ck_assert(mi_get(y, (a * 3 + b) * 4 + c) == (double)b);
    mi_tensor *s = mi_broadcast_to(mi_scalar(MI_F32, 1.5), MI_SHAPE(5));
    ck_assert(s->dtype == MI_F32);
    for (int i = 0; i < 5; i++) ck_assert(mi_get(s, i) == 1.5);
    /* gradient: summed over the broadcast axes */
    mi_tensor *xg = iota(MI_SHAPE(3, 1), true), *g;
    mi_tensor *yg = mi_broadcast_to(xg, MI_SHAPE(2, 3, 4));
    mi_tensor *go = iota(MI_SHAPE(2, 3, 4), false);
    ck_assert_int_eq(mi_grad(&yg, &go, 1, &xg, 1, false, &g), 0);
    assert_shape(g, MI_SHAPE(3, 1));
    for (int b = 0; b < 3; b++) {
        double want = 0;
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 4; c++) want += mi_get(go, (a * 3 + b) * 4 + c);
        ck_assert(mi_get(g, b) == want);
    }
    ck_assert_ptr_null(mi_broadcast_to(iota(MI_SHAPE(2, 3), false), MI_SHAPE(4, 2)));
    ck_assert_str_eq(mi_error(), "broadcast_to: cannot broadcast [2,3] to [4,2]");
    mi_error_clear();
    ck_assert_ptr_null(mi_broadcast_to(iota(MI_SHAPE(2, 3), false), MI_SHAPE(3)));
    ck_assert_error_has("broadcast_to: cannot broadcast [2,3] to [3]");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- permute */
START_TEST(permute_rank4)
{
    const int64_t s[4] = {2, 3, 4, 5};
    const int perm[4] = {2, 0, 3, 1};
    mi_tensor *x = iota(4, s, false);
    mi_tensor *y = mi_permute(x, perm);
    assert_shape(y, MI_SHAPE(4, 2, 5, 3));
    int64_t i[4];
    for (i[0] = 0; i[0] < 2; i[0]++)
        for (i[1] = 0; i[1] < 3; i[1]++)
            for (i[2] = 0; i[2] < 4; i[2]++)
                for (i[3] = 0; i[3] < 5; i[3]++) {
                    int64_t xo = ((i[0] * 3 + i[1]) * 4 + i[2]) * 5 + i[3];
                    /* y[j0,j1,j2,j3] with j_d = i[perm[d]] */
                    int64_t yo = ((i[2] * 2 + i[0]) * 5 + i[3]) * 3 + i[1];
                    ck_assert(mi_get(y, yo) == mi_get(x, xo));
                }
    mi_tensor *t = mi_transpose(iota(MI_SHAPE(2, 3), false), 0, -1);
    assert_shape(t, MI_SHAPE(3, 2));
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) ck_assert(mi_get(t, c * 2 + r) == (double)(r * 3 + c));
}
END_TEST

/* Permutations that keep trailing axes in place (copied in runs) and ones
 * that do not, against the index formula y[j] = x[i], j_d = i_{perm[d]}. */
START_TEST(permute_runs_and_elements)
{
    const int64_t s[4] = {2, 3, 4, 5};
    static const int perms[][4] = {{0, 1, 2, 3}, {1, 0, 2, 3}, {0, 2, 1, 3}, {2, 1, 0, 3},
                                   {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 2, 0, 3}};
    mi_tensor *x = iota(4, s, false);
    for (size_t p = 0; p < sizeof perms / sizeof perms[0]; p++) {
        mi_tensor *y = mi_permute(x, perms[p]);
        ck_assert_ptr_nonnull(y);
        int64_t i[4], ys[4];
        for (int d = 0; d < 4; d++) ys[d] = s[perms[p][d]];
        for (int64_t xo = 0; xo < x->numel; xo++) {
            int64_t rem = xo;
            for (int d = 3; d >= 0; d--) i[d] = rem % s[d], rem /= s[d];
            int64_t yo = 0;
            for (int d = 0; d < 4; d++) yo = yo * ys[d] + i[perms[p][d]];
            ck_assert_msg(mi_get(y, yo) == mi_get(x, xo), "perm %zu: y[%lld] != x[%lld]", p,
                          (long long)yo, (long long)xo);
        }
    }
}
END_TEST

START_TEST(permute_errors)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3, 4), false);
    ck_assert_ptr_null(mi_permute(x, (const int[]){0, 0, 1}));
    ck_assert_error_has("permute: [0,0,1] is not a permutation of the axes of [2,3,4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_permute(x, (const int[]){0, 3, 1}));
    ck_assert_error_has("permute: [0,3,1] is not a permutation");
    mi_error_clear();
    mi_attrs a = {.rank = 2, .shape = {1, 0}};
    ck_assert_ptr_null(mi_op_call(mi_op_find("permute"), &x, 1, &a));
    ck_assert_error_has("permute: permutation has 2 axes, input [2,3,4] has 3");
    mi_error_clear();
    ck_assert_ptr_null(mi_transpose(x, 0, 3));
    ck_assert_error_has("transpose: axis 3 out of range for rank 3");
    mi_error_clear();
    ck_assert_ptr_null(mi_permute(mi_arange(MI_I32, 3), (const int[]){0}));
    ck_assert_error_has("permute: input 0 must be f32 or f64, got i32");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- slice, pad */
START_TEST(slice_values)
{
    mi_tensor *x = iota(MI_SHAPE(3, 5, 2), false);
    mi_tensor *y = mi_slice(x, 1, 1, 4);
    assert_shape(y, MI_SHAPE(3, 3, 2));
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++)
                ck_assert(mi_get(y, (a * 3 + b) * 2 + c) == mi_get(x, (a * 5 + b + 1) * 2 + c));
    /* negative bounds count from the end, like Python */
    mi_tensor *z = mi_slice(x, -2, -3, -1);
    assert_shape(z, MI_SHAPE(3, 2, 2));
    ck_assert(mi_get(z, 0) == mi_get(x, 2 * 2));
    /* leading axis, empty slice */
    mi_tensor *l = mi_slice(x, 0, 2, 3);
    assert_shape(l, MI_SHAPE(1, 5, 2));
    for (int i = 0; i < 10; i++) ck_assert(mi_get(l, i) == (double)(20 + i));
    assert_shape(mi_slice(x, 0, 1, 1), MI_SHAPE(0, 5, 2));
}
END_TEST

/* A slice whose leading axes have size 1 is a free view (narrow); any other
 * slice copies. Gradients flow through both. */
START_TEST(leading_slice_is_a_view)
{
    mi_tensor *x = mi_requires_grad(iota(MI_SHAPE(4, 3), false), true);
    mi_tensor *v = mi_slice(x, 0, 1, 3);
    ck_assert_ptr_eq(v->data, (char *)x->data + 3 * sizeof(double));
    ck_assert_ptr_eq(v->node->op, mi_op_find("narrow"));
    mi_tensor *c = mi_slice(x, 1, 0, 2);
    ck_assert(c->data < x->data || c->data >= (void *)((char *)x->data + 12 * sizeof(double)));
    mi_tensor *y = mi_slice(mi_reshape(x, MI_SHAPE(1, 12)), 1, 4, 8);
    ck_assert_ptr_eq(y->data, (char *)x->data + 4 * sizeof(double));
    mi_tensor *loss = mi_sum(mi_add(mi_sum(v, MI_ALL, false), mi_sum(y, MI_ALL, false)), MI_ALL, false), *g;
    ck_assert_int_eq(mi_grad(&loss, NULL, 1, &x, 1, false, &g), 0);
    for (int i = 0; i < 12; i++)
        ck_assert(mi_get(g, i) == (double)((i >= 3 && i < 9) + (i >= 4 && i < 8)));
    ck_assert_ptr_null(mi_op_call(mi_op_find("narrow"), &x, 1, &(mi_attrs){.axis = 1, .stop = 1}));
    ck_assert_error_has("not a leading axis");
    mi_error_clear();
}
END_TEST

START_TEST(slice_errors)
{
    mi_tensor *x = iota(MI_SHAPE(3, 5), false);
    ck_assert_ptr_null(mi_slice(x, 1, 2, 6));
    ck_assert_error_has("slice: [2:6] out of range for axis 1 of [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_slice(x, 1, 4, 2));
    ck_assert_error_has("slice: [4:2] out of range for axis 1 of [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_slice(x, 0, -7, 2));
    ck_assert_error_has("slice: [-4:2] out of range for axis 0 of [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_slice(x, 2, 0, 1));
    ck_assert_error_has("slice: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_slice(NULL, 0, 0, 1));
    ck_assert_error_has("slice: input 0 is NULL");
    mi_error_clear();
}
END_TEST

START_TEST(pad_values_and_errors)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3), false);
    mi_tensor *y = mi_pad(x, 1, 2, 1);
    assert_shape(y, MI_SHAPE(2, 6));
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 6; c++) {
            double want = c >= 2 && c < 5 ? mi_get(x, r * 3 + c - 2) : 0.0;
            ck_assert(mi_get(y, r * 6 + c) == want);
        }
    mi_tensor *z = mi_pad(x, 0, 0, 1);
    assert_shape(z, MI_SHAPE(3, 3));
    ck_assert(mi_get(z, 5) == 5.0 && mi_get(z, 6) == 0.0);
    ck_assert_ptr_null(mi_pad(x, 1, -1, 0));
    ck_assert_error_has("pad: widths must be ≥ 0, got before -1, after 0 for [2,3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_pad(x, -3, 1, 1));
    ck_assert_error_has("pad: axis -3 out of range for rank 2");
    mi_error_clear();
}
END_TEST

/* slice and pad are each other's adjoints: check the gradients directly. */
START_TEST(slice_pad_gradients)
{
    mi_tensor *x = iota(MI_SHAPE(2, 4), true), *g;
    mi_tensor *y = mi_slice(x, 1, 1, 3);
    mi_tensor *go = iota(MI_SHAPE(2, 2), false);
    ck_assert_int_eq(mi_grad(&y, &go, 1, &x, 1, false, &g), 0);
    const double want[8] = {0, 0, 1, 0, 0, 2, 3, 0};
    for (int i = 0; i < 8; i++) ck_assert(mi_get(g, i) == want[i]);
    mi_tensor *p = mi_pad(x, 0, 1, 0);
    mi_tensor *gp = iota(MI_SHAPE(3, 4), false);
    ck_assert_int_eq(mi_grad(&p, &gp, 1, &x, 1, false, &g), 0);
    for (int i = 0; i < 8; i++) ck_assert(mi_get(g, i) == (double)(i + 4));
}
END_TEST

/* ---------------------------------------------------------------- concat, stack */
START_TEST(concat_three_middle_axis)
{
    const int64_t d[3] = {1, 3, 2};
    mi_tensor *xs[3];
    for (int i = 0; i < 3; i++) {
        xs[i] = iota(MI_SHAPE(2, d[i], 4), true);
        for (int64_t k = 0; k < xs[i]->numel; k++) mi_set(xs[i], k, 100.0 * i + (double)k);
    }
    mi_tensor *y = mi_concat(xs, 3, 1);
    assert_shape(y, MI_SHAPE(2, 6, 4));
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < 6; j++)
            for (int c = 0; c < 4; c++) {
                int i = j < 1 ? 0 : j < 4 ? 1 : 2;
                int64_t jj = j - (i == 0 ? 0 : i == 1 ? 1 : 4);
                ck_assert(mi_get(y, (a * 6 + j) * 4 + c) ==
                          mi_get(xs[i], (a * d[i] + jj) * 4 + c));
            }
    /* gradient of input i is g's slice */
    mi_tensor *go = iota(MI_SHAPE(2, 6, 4), false), *g[3];
    ck_assert_int_eq(mi_grad(&y, &go, 1, xs, 3, false, g), 0);
    assert_shape(g[2], MI_SHAPE(2, 2, 4));
    ck_assert(mi_get(g[2], 0) == 16.0 && mi_get(g[1], 8) == 12.0);
}
END_TEST

START_TEST(concat_many_and_errors)
{
    mi_tensor *xs[11];
    for (int i = 0; i < 11; i++) xs[i] = mi_full(MI_F32, MI_SHAPE(1, 2), (double)i);
    mi_tensor *y = mi_concat(xs, 11, 0); /* more than MI_MAX_INPUTS: groups */
    assert_shape(y, MI_SHAPE(11, 2));
    for (int i = 0; i < 22; i++) ck_assert(mi_get(y, i) == (double)(i / 2));
    mi_tensor *a = iota(MI_SHAPE(2, 3), false), *b = iota(MI_SHAPE(2, 4), false);
    ck_assert_ptr_null(mi_concat((mi_tensor *[]){a, b}, 2, 0));
    ck_assert_error_has("concat: input 1 has shape [2,4], input 0 has [2,3] (axis 0)");
    mi_error_clear();
    ck_assert_ptr_null(mi_concat((mi_tensor *[]){a, iota(MI_SHAPE(6), false)}, 2, 0));
    ck_assert_error_has("concat: input 1 has shape [6], input 0 has [2,3]");
    mi_error_clear();
    ck_assert_ptr_nonnull(mi_concat((mi_tensor *[]){a, b}, 2, 1));
    ck_assert_ptr_null(mi_concat((mi_tensor *[]){a, mi_arange(MI_I64, 3)}, 2, 0));
    ck_assert_error_has("concat: input 1 must be f32 or f64, got i64");
    mi_error_clear();
    ck_assert_ptr_null(mi_concat(&a, 1, 2));
    ck_assert_error_has("concat: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_concat(NULL, 0, 0));
    ck_assert_error_has("concat: takes 1 to 8 inputs, got 0");
    mi_error_clear();
}
END_TEST

START_TEST(stack_values)
{
    mi_tensor *xs[3];
    for (int i = 0; i < 3; i++) {
        xs[i] = iota(MI_SHAPE(2, 3), false);
        for (int k = 0; k < 6; k++) mi_set(xs[i], k, 10.0 * i + k);
    }
    mi_tensor *y0 = mi_stack(xs, 3, 0), *y1 = mi_stack(xs, 3, 1), *y2 = mi_stack(xs, 3, -1);
    assert_shape(y0, MI_SHAPE(3, 2, 3));
    assert_shape(y1, MI_SHAPE(2, 3, 3));
    assert_shape(y2, MI_SHAPE(2, 3, 3));
    for (int i = 0; i < 3; i++)
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) {
                double v = 10.0 * i + r * 3 + c;
                ck_assert(mi_get(y0, (i * 2 + r) * 3 + c) == v);
                ck_assert(mi_get(y1, (r * 3 + i) * 3 + c) == v);
                ck_assert(mi_get(y2, (r * 3 + c) * 3 + i) == v);
            }
    mi_tensor *many[20];
    for (int i = 0; i < 20; i++) many[i] = mi_full(MI_F64, MI_SHAPE(2), (double)i);
    mi_tensor *m = mi_stack(many, 20, 1);
    assert_shape(m, MI_SHAPE(2, 20));
    for (int i = 0; i < 40; i++) ck_assert(mi_get(m, i) == (double)(i % 20));
    ck_assert_ptr_null(mi_stack(xs, 3, 3));
    ck_assert_error_has("stack: axis 3 out of range for rank 3");
    mi_error_clear();
    ck_assert_ptr_null(mi_stack((mi_tensor *[]){xs[0], iota(MI_SHAPE(3, 2), false)}, 2, 0));
    ck_assert_error_has("concat: input 1 has shape [1,3,2], input 0 has [1,2,3]");
    mi_error_clear();
    ck_assert_ptr_null(mi_stack(xs, 0, 0));
    ck_assert_error_has("stack: takes at least 1 input");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- flip */
START_TEST(flip_values)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3, 2), false);
    mi_tensor *y = mi_flip(x, 1), *z = mi_flip(x, -1);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) {
                ck_assert(mi_get(y, (a * 3 + b) * 2 + c) == mi_get(x, (a * 3 + 2 - b) * 2 + c));
                ck_assert(mi_get(z, (a * 3 + b) * 2 + c) == mi_get(x, (a * 3 + b) * 2 + 1 - c));
            }
    ck_assert_ptr_null(mi_flip(x, 3));
    ck_assert_error_has("flip: axis 3 out of range for rank 3");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- index_select, index_add */
START_TEST(index_select_repeats_accumulate)
{
    mi_tensor *x = iota(MI_SHAPE(3, 4, 2), true);
    const int64_t iv[5] = {3, 0, 3, 3, 1};
    mi_tensor *idx = idx64(5, iv);
    mi_tensor *y = mi_index_select(x, 1, idx);
    assert_shape(y, MI_SHAPE(3, 5, 2));
    for (int a = 0; a < 3; a++)
        for (int j = 0; j < 5; j++)
            for (int c = 0; c < 2; c++)
                ck_assert(mi_get(y, (a * 5 + j) * 2 + c) == mi_get(x, (a * 4 + iv[j]) * 2 + c));
    /* index_add: the adjoint, with repeated indices adding up */
    mi_tensor *src = iota(MI_SHAPE(3, 5, 2), false);
    mi_tensor *s = mi_index_add(src, -2, idx, 4);
    assert_shape(s, MI_SHAPE(3, 4, 2));
    for (int a = 0; a < 3; a++)
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 2; c++) {
                double want = 0;
                for (int j = 0; j < 5; j++)
                    if (iv[j] == r) want += mi_get(src, (a * 5 + j) * 2 + c);
                ck_assert(mi_get(s, (a * 4 + r) * 2 + c) == want);
            }
    /* dL/dx for L = Σ y: how often each row was picked (1, 1, 0, 3) */
    mi_tensor *go = mi_ones(MI_F64, MI_SHAPE(3, 5, 2)), *g;
    ck_assert_int_eq(mi_grad(&y, &go, 1, &x, 1, false, &g), 0);
    const double count[4] = {1, 1, 0, 3};
    for (int64_t k = 0; k < 24; k++) ck_assert(mi_get(g, k) == count[(k / 2) % 4]);
    /* i32 indices work the same */
    mi_tensor *i32 = mi_tensor_to(idx, MI_I32);
    mi_tensor *y32 = mi_index_select(x, 1, i32);
    for (int64_t k = 0; k < y->numel; k++) ck_assert(mi_get(y32, k) == mi_get(y, k));
}
END_TEST

START_TEST(index_errors)
{
    mi_tensor *x = iota(MI_SHAPE(3, 5), false);
    ck_assert_ptr_null(mi_index_select(x, 1, idx64(3, (const int64_t[]){0, 5, 1})));
    ck_assert_error_has(
        "index_select: index 5 at position 1 out of range [0, 5) for axis 1 of [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_select(x, 0, idx64(2, (const int64_t[]){-1, 0})));
    ck_assert_error_has("index_select: index -1 at position 0 out of range [0, 3)");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_select(x, 0, mi_zeros(MI_F64, MI_SHAPE(2))));
    ck_assert_error_has("index_select: index must be i32 or i64, got f64");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_select(x, 0, mi_zeros(MI_I64, MI_SHAPE(2, 2))));
    ck_assert_error_has("index_select: index must be 1-D, got [2,2]");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_select(x, 2, idx64(1, (const int64_t[]){0})));
    ck_assert_error_has("index_select: axis 2 out of range for rank 2");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_add(x, 0, idx64(2, (const int64_t[]){0, 1}), 4));
    ck_assert_error_has("index_add: index must be 1-D with 3 entries (axis 0 of [3,5]), got [2]");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_add(x, 0, idx64(3, (const int64_t[]){0, 1, 4}), 4));
    ck_assert_error_has("index_add: index 4 at position 2 out of range [0, 4)");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_add(x, 0, idx64(3, (const int64_t[]){0, 1, 2}), -1));
    ck_assert_error_has("index_add: output size -1");
    mi_error_clear();
    mi_tensor *gi = mi_zeros(MI_I64, MI_SHAPE(3, 2));
    mi_set(gi, 3, 7.0);
    ck_assert_ptr_null(mi_gather(x, 1, gi));
    ck_assert_error_has("gather: index 7 at position 3 out of range [0, 5) for axis 1 of [3,5]");
    mi_error_clear();
    ck_assert_ptr_null(mi_gather(x, 1, mi_zeros(MI_I64, MI_SHAPE(2, 2))));
    ck_assert_error_has("gather: index shape [2,2] must match input [3,5] except along axis 1");
    mi_error_clear();
    ck_assert_ptr_null(mi_gather(x, 1, mi_zeros(MI_F64, MI_SHAPE(3, 2))));
    ck_assert_error_has("gather: index must be i32 or i64, got f64");
    mi_error_clear();
    ck_assert_ptr_null(mi_scatter_add(x, 1, mi_zeros(MI_I64, MI_SHAPE(3, 4)), 2));
    ck_assert_error_has("scatter_add: index shape [3,4] must equal source shape [3,5]");
    mi_error_clear();
    mi_tensor *si = mi_zeros(MI_I32, MI_SHAPE(3, 5));
    mi_set(si, 14, 2.0);
    ck_assert_ptr_null(mi_scatter_add(x, 1, si, 2));
    ck_assert_error_has("scatter_add: index 2 at position 14 out of range [0, 2)");
    mi_error_clear();
    ck_assert_ptr_null(mi_index_select(mi_arange(MI_I64, 3), 0, idx64(1, (const int64_t[]){0})));
    ck_assert_error_has("index_select: input 0 must be f32 or f64, got i64");
    mi_error_clear();
}
END_TEST

/* ---------------------------------------------------------------- gather, scatter_add */
START_TEST(gather_scatter_values)
{
    mi_tensor *x = iota(MI_SHAPE(2, 3, 4), false);
    mi_rng r;
    mi_rng_seed(&r, 7);
    /* along the middle axis: idx [2, 5, 4] with values in [0, 3) */
    mi_tensor *idx = mi_tensor_new(MI_I64, MI_SHAPE(2, 5, 4));
    for (int64_t k = 0; k < idx->numel; k++) mi_set(idx, k, (double)mi_rng_below(&r, 3));
    mi_tensor *y = mi_gather(x, 1, idx);
    assert_shape(y, MI_SHAPE(2, 5, 4));
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < 5; j++)
            for (int c = 0; c < 4; c++) {
                int64_t o = (a * 5 + j) * 4 + c, v = (int64_t)mi_get(idx, o);
                ck_assert(mi_get(y, o) == mi_get(x, (a * 3 + v) * 4 + c));
            }
    mi_tensor *src = iota(MI_SHAPE(2, 5, 4), false);
    mi_tensor *s = mi_scatter_add(src, 1, idx, 3);
    assert_shape(s, MI_SHAPE(2, 3, 4));
    double want[24] = {0};
    for (int a = 0; a < 2; a++)
        for (int j = 0; j < 5; j++)
            for (int c = 0; c < 4; c++) {
                int64_t o = (a * 5 + j) * 4 + c, v = (int64_t)mi_get(idx, o);
                want[(a * 3 + v) * 4 + c] += mi_get(src, o);
            }
    for (int k = 0; k < 24; k++) ck_assert(mi_get(s, k) == want[k]);
    /* first and last axes, f32 */
    mi_tensor *x32 = mi_tensor_to(x, MI_F32);
    mi_tensor *i0 = mi_zeros(MI_I32, MI_SHAPE(1, 3, 4));
    mi_set(i0, 5, 1.0);
    mi_tensor *y0 = mi_gather(x32, 0, i0);
    ck_assert(y0->dtype == MI_F32);
    for (int k = 0; k < 12; k++) ck_assert(mi_get(y0, k) == (k == 5 ? 17.0 : (double)k));
    mi_tensor *il = mi_from_buffer(MI_I64, 3, (const int64_t[]){2, 3, 1},
                                   (const int64_t[]){3, 0, 2, 1, 1, 0});
    mi_tensor *yl = mi_gather(x, -1, il);
    for (int k = 0; k < 6; k++) ck_assert(mi_get(yl, k) == 4.0 * k + mi_get(il, k));
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("shape");
    TCase *tc = tcase_slow("shape");
    tcase_add_test(tc, reshape_is_a_view);
    tcase_add_test(tc, reshape_errors);
    tcase_add_test(tc, unsqueeze_squeeze);
    tcase_add_test(tc, broadcast_to_values);
    tcase_add_test(tc, permute_rank4);
    tcase_add_test(tc, permute_runs_and_elements);
    tcase_add_test(tc, permute_errors);
    tcase_add_test(tc, slice_values);
    tcase_add_test(tc, leading_slice_is_a_view);
    tcase_add_test(tc, slice_errors);
    tcase_add_test(tc, pad_values_and_errors);
    tcase_add_test(tc, slice_pad_gradients);
    tcase_add_test(tc, concat_three_middle_axis);
    tcase_add_test(tc, concat_many_and_errors);
    tcase_add_test(tc, stack_values);
    tcase_add_test(tc, flip_values);
    tcase_add_test(tc, index_select_repeats_accumulate);
    tcase_add_test(tc, index_errors);
    tcase_add_test(tc, gather_scatter_values);
    suite_add_tcase(s, tc);
    return s;
}
