/* Outer optimizers, part 3: state save → load → continue (bit-identical
 * trajectories, state names, the file round trip), gradient accumulation and
 * the messages bad arguments give. */
#include <stdio.h>
#include <unistd.h>

#include "harness.h"
#include "optim/optim.h"

/* ---------------------------------------------------------------- save → load → continue */
/* A small MLP y = W2 tanh(W1 x + b1) on fixed data; every kind of optimizer
 * with settings under which all its state exists. */
typedef struct mlp_task {
    mi_tensor *x, *y;
} mlp_task;

static mi_tensor *mlp_loss(mi_tensor *const *p, const mlp_task *t, mi_tensor **hidden)
{
    mi_tensor *h = mi_tanh(mi_add(mi_matmul_t(t->x, p[0], false, true), p[1]));
    if (hidden) *hidden = h;
    mi_tensor *d = mi_sub(mi_matmul_t(h, p[2], false, true), t->y);
    return mi_mean(mi_square(d), MI_ALL, false);
}

static mi_optim_hparams resume_hp(mi_optim_kind kind)
{
    mi_optim_hparams h = mi_optim_defaults(kind);
    if (kind == MI_OPT_SGD) h.momentum = 0.9;
    if (kind == MI_OPT_DELTA_MOMENTUM) h.precond = true;
    if (kind == MI_OPT_DEEP_MOMENTUM) {
        h.mem_hidden = 4;
        h.output = MI_NL_OUT_NEWTON_SCHULZ;
    }
    if (kind == MI_OPT_L2_GD) h.delta = 0.1;
    return h;
}

/* Steps [from, to) of training, fresh gradients each step. */
static void train_steps(mi_optim *o, mi_tensor *const *p, const mlp_task *t, int from, int to)
{
    for (int s = from; s < to; s++) {
        mi_scope *step = mi_scope_new("step");
        mi_scope_enter(step);
        mi_optim_zero_grad(o);
        mi_tensor *h;
        ck_assert_int_eq(mi_backward(mlp_loss(p, t, &h)), 0);
        if (mi_optim_kind_of(o) == MI_OPT_L2_GD) {
            ck_assert_int_eq(mi_optim_set_inputs(o, 0, t->x), 0);
            ck_assert_int_eq(mi_optim_set_inputs(o, 2, mi_detach(h)), 0);
        }
        ck_assert_msg(mi_optim_step(o) == 0, "%s", mi_error());
        mi_scope_leave();
        mi_scope_free(step);
    }
}

static void make_params(uint64_t seed, mi_dtype dt, mi_tensor **p)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    p[0] = mi_requires_grad(mi_randn(&r, dt, MI_SHAPE(6, 3), 0, 0.5), true);
    p[1] = mi_requires_grad(mi_randn(&r, dt, MI_SHAPE(6), 0, 0.5), true);
    p[2] = mi_requires_grad(mi_randn(&r, dt, MI_SHAPE(2, 6), 0, 0.5), true);
}

START_TEST(save_load_continue_is_bit_identical)
{
    mi_rng r;
    mi_rng_seed(&r, 60);
    for (int dti = 0; dti < 2; dti++) {
        mi_dtype dt = dti ? MI_F64 : MI_F32;
        mlp_task t = {.x = mi_randn(&r, dt, MI_SHAPE(8, 3), 0, 1),
                      .y = mi_randn(&r, dt, MI_SHAPE(8, 2), 0, 1)};
        for (int kind = 0; kind < MI_OPT_KIND_COUNT; kind++) {
            mi_optim_hparams h = resume_hp(kind);
            mi_schedule sched = {.kind = MI_SCHED_WARMUP_COSINE, .lr = h.lr, .min_lr = h.lr / 10,
                                 .warmup = 3, .total = 10};
            /* uninterrupted: 10 steps */
            mi_tensor *a[3];
            make_params(7, dt, a);
            mi_optim *oa = mi_optim_new_simple(kind, a, 3, &h);
            for (int s = 0; s < 10; s++) {
                ck_assert_int_eq(mi_optim_apply_schedule(oa, &sched), 0);
                train_steps(oa, a, &t, s, s + 1);
            }
            /* interrupted: 5 steps, checkpoint (model + optimizer in one file) */
            mi_tensor *b[3];
            make_params(7, dt, b);
            mi_optim *ob = mi_optim_new_simple(kind, b, 3, &h);
            for (int s = 0; s < 5; s++) {
                ck_assert_int_eq(mi_optim_apply_schedule(ob, &sched), 0);
                train_steps(ob, b, &t, s, s + 1);
            }
            mi_optim_state_list l;
            ck_assert_int_eq(mi_optim_state_export(ob, &l), 0);
            mi_named_tensor all[16];
            int n = 0;
            all[n++] = (mi_named_tensor){"model.w1", b[0]};
            all[n++] = (mi_named_tensor){"model.b1", b[1]};
            all[n++] = (mi_named_tensor){"model.w2", b[2]};
            for (int i = 0; i < l.count; i++) all[n++] = l.tensors[i];
            ck_assert_int_eq(mi_safetensors_save(tmp_path("ckpt.safetensors"), all, n, &l.metadata), 0);
            mi_optim_free(ob);
            /* resume into fresh parameters and a fresh optimizer */
            mi_tensor *c[3];
            make_params(99, dt, c);
            mi_optim *oc = mi_optim_new_simple(kind, c, 3, &h);
            mi_safetensors *st = mi_safetensors_load(tmp_path("ckpt.safetensors"));
            ck_assert_ptr_nonnull(st);
            const char *names[3] = {"model.w1", "model.b1", "model.w2"};
            for (int i = 0; i < 3; i++)
                ck_assert_int_eq(mi_tensor_copy_into(c[i], mi_safetensors_get(st, names[i])), 0);
            ck_assert_msg(mi_optim_state_import(oc, st) == 0, "%s", mi_error());
            ck_assert_int_eq(mi_optim_steps(oc), 5);
            ck_assert_str_eq(mi_safetensors_meta(st, "opt.step"), "5");
            for (int s = 5; s < 10; s++) {
                ck_assert_int_eq(mi_optim_apply_schedule(oc, &sched), 0);
                train_steps(oc, c, &t, s, s + 1);
            }
            for (int i = 0; i < 3; i++)
                ck_assert_msg(!memcmp(a[i]->data, c[i]->data, (size_t)a[i]->numel * mi_dtype_size(dt)),
                              "%s (%s): parameter %d differs after resuming",
                              mi_optim_kind_name(kind), mi_dtype_name(dt), i);
            /* the state is bit-identical too */
            mi_optim_state_list la, lc;
            ck_assert_int_eq(mi_optim_state_export(oa, &la), 0);
            ck_assert_int_eq(mi_optim_state_export(oc, &lc), 0);
            ck_assert_int_eq(la.count, lc.count);
            for (int i = 0; i < la.count; i++) {
                ck_assert_str_eq(la.tensors[i].name, lc.tensors[i].name);
                ck_assert(!memcmp(la.tensors[i].tensor->data, lc.tensors[i].tensor->data,
                                  (size_t)la.tensors[i].tensor->numel * mi_dtype_size(dt)));
            }
            mi_optim_free(oa);
            mi_optim_free(oc);
        }
    }
}
END_TEST

START_TEST(state_names_and_file_round_trip)
{
    mi_rng r;
    mi_rng_seed(&r, 61);
    mi_tensor *p[2] = {mi_randn(&r, MI_F32, MI_SHAPE(4, 3), 0, 1), mi_randn(&r, MI_F32, MI_SHAPE(3), 0, 1)};
    p[0]->grad = mi_randn(&r, MI_F32, MI_SHAPE(4, 3), 0, 1);
    p[1]->grad = mi_randn(&r, MI_F32, MI_SHAPE(3), 0, 1);
    mi_optim *o = mi_optim_new_simple(MI_OPT_MUON, p, 2, NULL);
    ck_assert_int_eq(mi_optim_step(o), 0);
    mi_optim_state_list l;
    ck_assert_int_eq(mi_optim_state_export(o, &l), 0);
    ck_assert_int_eq(l.count, 3);
    ck_assert_str_eq(l.tensors[0].name, "opt.0.momentum_buffer"); /* matrix: Muon */
    ck_assert_str_eq(l.tensors[1].name, "opt.1.exp_avg");         /* vector: AdamW fallback */
    ck_assert_str_eq(l.tensors[2].name, "opt.1.exp_avg_sq");
    ck_assert_ptr_eq(l.tensors[0].tensor, mi_optim_state(o, 0, "momentum_buffer"));
    ck_assert_int_eq(mi_optim_save(o, tmp_path("opt.safetensors")), 0);
    mi_tensor *q[2] = {mi_zeros(MI_F32, MI_SHAPE(4, 3)), mi_zeros(MI_F32, MI_SHAPE(3))};
    mi_optim *o2 = mi_optim_new_simple(MI_OPT_MUON, q, 2, NULL);
    ck_assert_int_eq(mi_optim_load(o2, tmp_path("opt.safetensors")), 0);
    ck_assert_int_eq(mi_optim_param_steps(o2, 1), 1);
    mi_tensor *s1 = mi_optim_state(o, 1, "exp_avg_sq"), *s2 = mi_optim_state(o2, 1, "exp_avg_sq");
    ck_assert(!memcmp(s1->data, s2->data, 3 * sizeof(float)));
    mi_optim_free(o);
    mi_optim_free(o2);
    /* a stateless optimizer saves metadata only */
    mi_optim *l2 = mi_optim_new_simple(MI_OPT_L2_GD, p, 2, NULL);
    ck_assert_int_eq(mi_optim_step(l2), 0);
    ck_assert_int_eq(mi_optim_save(l2, tmp_path("opt.safetensors")), 0);
    mi_optim *l2b = mi_optim_new_simple(MI_OPT_L2_GD, q, 2, NULL);
    ck_assert_msg(mi_optim_load(l2b, tmp_path("opt.safetensors")) == 0, "%s", mi_error());
    ck_assert_int_eq(mi_optim_steps(l2b), 1);
    mi_optim_free(l2);
    mi_optim_free(l2b);
}
END_TEST

/* ---------------------------------------------------------------- accumulation */
/* k micro-batches with backward each, then scale by 1/k: the gradient of
 * the whole batch's mean loss, and the same step. */
START_TEST(gradient_accumulation_equals_the_full_batch)
{
    mi_rng r;
    mi_rng_seed(&r, 70);
    mlp_task full = {.x = mi_randn(&r, MI_F64, MI_SHAPE(8, 3), 0, 1),
                     .y = mi_randn(&r, MI_F64, MI_SHAPE(8, 2), 0, 1)};
    mi_tensor *a[3], *b[3];
    make_params(3, MI_F64, a);
    make_params(3, MI_F64, b);
    ck_assert_int_eq(mi_backward(mlp_loss(a, &full, NULL)), 0);
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_ADAMW);
    mi_optim *ob = mi_optim_new_simple(MI_OPT_ADAMW, b, 3, &h);
    for (int k = 0; k < 4; k++) {
        mlp_task mb = {.x = mi_slice(full.x, 0, 2 * k, 2 * k + 2), .y = mi_slice(full.y, 0, 2 * k, 2 * k + 2)};
        ck_assert_int_eq(mi_backward(mlp_loss(b, &mb, NULL)), 0);
    }
    ck_assert_int_eq(mi_optim_accumulated(ob, 4), 0);
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < a[i]->numel; j++)
            ck_assert_close(mi_get(b[i]->grad, j), mi_get(a[i]->grad, j), 1e-15);
    mi_optim *oa = mi_optim_new_simple(MI_OPT_ADAMW, a, 3, &h);
    ck_assert_int_eq(mi_optim_step(oa), 0);
    ck_assert_int_eq(mi_optim_step(ob), 0);
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < a[i]->numel; j++) ck_assert_close(mi_get(b[i], j), mi_get(a[i], j), 1e-12);
    mi_optim_free(oa);
    mi_optim_free(ob);
}
END_TEST

/* ---------------------------------------------------------------- errors */
START_TEST(bad_arguments_give_clear_messages)
{
    mi_tensor *p = mi_zeros(MI_F32, MI_SHAPE(2, 2)), *v = mi_zeros(MI_F32, MI_SHAPE(2));
    mi_tensor *ps[2] = {p, v};
    mi_optim_hparams h = mi_optim_defaults(MI_OPT_ADAMW);
    h.lr = -0.1;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_ADAMW, ps, 2, &h));
    ck_assert_error_has("adamw: lr must be ≥ 0, got -0.1 (group 0)");
    mi_error_clear();
    h = mi_optim_defaults(MI_OPT_ADAM);
    h.beta1 = 1.0;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_ADAM, ps, 2, &h));
    ck_assert_error_has("beta1 must be in [0, 1), got 1");
    mi_error_clear();
    h.beta1 = 0.9;
    h.beta2 = 1.5;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_ADAM, ps, 2, &h));
    ck_assert_error_has("beta2");
    mi_error_clear();
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, NULL, 2, NULL));
    ck_assert_error_has("params is NULL");
    mi_error_clear();
    mi_tensor *withnull[2] = {p, NULL};
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, withnull, 2, NULL));
    ck_assert_error_has("parameter 1 is NULL");
    mi_error_clear();
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, ps, 0, NULL));
    ck_assert_error_has("empty parameter list");
    mi_error_clear();
    mi_tensor *twice[2] = {p, p};
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, twice, 2, NULL));
    ck_assert_error_has("appears twice");
    mi_error_clear();
    mi_tensor *idx = mi_tensor_new(MI_I32, MI_SHAPE(2));
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, &idx, 1, NULL));
    ck_assert_error_has("must be f32 or f64");
    mi_error_clear();
    h = mi_optim_defaults(MI_OPT_SGD);
    h.nesterov = true;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_SGD, ps, 2, &h));
    ck_assert_error_has("Nesterov momentum requires");
    mi_error_clear();
    h = mi_optim_defaults(MI_OPT_MUON);
    h.momentum = 1;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_MUON, ps, 2, &h));
    ck_assert_error_has("muon: momentum must be in [0, 1)");
    mi_error_clear();
    h = mi_optim_defaults(MI_OPT_DEEP_MOMENTUM);
    h.mem_hidden = -3;
    ck_assert_ptr_null(mi_optim_new_simple(MI_OPT_DEEP_MOMENTUM, ps, 2, &h));
    ck_assert_error_has("mem_hidden");
    mi_error_clear();
    ck_assert_ptr_null(mi_optim_new(MI_OPT_SGD, NULL, 1));
    ck_assert_error_has("no parameter groups");
    mi_error_clear();
    ck_assert_ptr_null(mi_optim_new((mi_optim_kind)42, NULL, 1));
    ck_assert_error_has("unknown kind 42");
    mi_error_clear();
    ck_assert_int_eq(mi_optim_step(NULL), -1);
    ck_assert_error_has("NULL optimizer");
    mi_error_clear();
    mi_optim_free(NULL);

    /* hyperparameters broken between steps: the step refuses, p unchanged */
    mi_optim *o = mi_optim_new_simple(MI_OPT_ADAMW, ps, 2, NULL);
    p->grad = mi_ones(MI_F32, MI_SHAPE(2, 2));
    mi_optim_group_hparams(o, 0)->beta2 = 1;
    ck_assert_int_eq(mi_optim_step(o), -1);
    ck_assert_error_has("beta2");
    ck_assert(mi_get(p, 0) == 0);
    mi_error_clear();
    mi_optim_group_hparams(o, 0)->beta2 = 0.999;
    ck_assert_ptr_null(mi_optim_group_hparams(o, 3));
    mi_error_clear();
    ck_assert_int_eq(mi_optim_set_lr_scale(o, -1), -1);
    ck_assert_error_has("lr scale");
    mi_error_clear();
    /* a gradient of the wrong shape */
    v->grad = mi_ones(MI_F32, MI_SHAPE(3));
    ck_assert_int_eq(mi_optim_step(o), -1);
    ck_assert_error_has("parameter 1: gradient f32 [3] does not match the parameter f32 [2]");
    mi_error_clear();
    v->grad = NULL;
    /* inputs for ℓ2-GD of the wrong shape */
    ck_assert_int_eq(mi_optim_set_inputs(o, 0, mi_zeros(MI_F32, MI_SHAPE(5, 3))), -1);
    ck_assert_error_has("set_inputs");
    mi_error_clear();
    ck_assert_int_eq(mi_optim_set_inputs(o, 7, NULL), -1);
    mi_error_clear();

    /* mismatched state on load: kind, count, shape, unknown names, missing file */
    ck_assert_int_eq(mi_optim_step(o), 0);
    ck_assert_int_eq(mi_optim_save(o, tmp_path("opt.safetensors")), 0);
    mi_tensor *before = mi_detach(mi_optim_state(o, 0, "exp_avg"));
    mi_optim *sgd = mi_optim_new_simple(MI_OPT_SGD, ps, 2, NULL);
    ck_assert_int_eq(mi_optim_load(sgd, tmp_path("opt.safetensors")), -1);
    ck_assert_error_has("the state is for optimizer 'adamw'");
    mi_error_clear();
    mi_optim *one = mi_optim_new_simple(MI_OPT_ADAMW, ps, 1, NULL);
    ck_assert_int_eq(mi_optim_load(one, tmp_path("opt.safetensors")), -1);
    ck_assert_error_has("the state is for 2 parameters, the optimizer has 1");
    mi_error_clear();
    mi_tensor *other[2] = {mi_zeros(MI_F32, MI_SHAPE(2, 3)), mi_zeros(MI_F32, MI_SHAPE(2))};
    mi_optim *wrong = mi_optim_new_simple(MI_OPT_ADAMW, other, 2, NULL);
    ck_assert_int_eq(mi_optim_load(wrong, tmp_path("opt.safetensors")), -1);
    ck_assert_error_has("state 'opt.0.exp_avg' is f32 [2,2], expected f32 [2,3]");
    ck_assert_ptr_null(mi_optim_state(wrong, 0, "exp_avg")); /* nothing changed */
    mi_error_clear();
    mi_tensor *dbl[2] = {mi_zeros(MI_F64, MI_SHAPE(2, 2)), mi_zeros(MI_F64, MI_SHAPE(2))};
    mi_optim *f64 = mi_optim_new_simple(MI_OPT_ADAMW, dbl, 2, NULL);
    ck_assert_int_eq(mi_optim_load(f64, tmp_path("opt.safetensors")), -1);
    ck_assert_error_has("expected f64");
    mi_error_clear();
    ck_assert_int_eq(mi_optim_load(o, tmp_path("missing.safetensors")), -1);
    ck_assert(strlen(mi_error()) > 0);
    mi_error_clear();
    /* an SGD momentum file into a momentum-free SGD */
    mi_optim_hparams hm = mi_optim_defaults(MI_OPT_SGD);
    hm.momentum = 0.9;
    mi_optim *mom = mi_optim_new_simple(MI_OPT_SGD, ps, 2, &hm);
    ck_assert_int_eq(mi_optim_step(mom), 0);
    ck_assert_int_eq(mi_optim_save(mom, tmp_path("other.safetensors")), 0);
    ck_assert_int_eq(mi_optim_load(sgd, tmp_path("other.safetensors")), -1);
    ck_assert_error_has("parameter 0 has no state 'momentum_buffer'");
    mi_error_clear();
    /* a model-only file is not an optimizer state */
    mi_named_tensor only = {"w", p};
    ck_assert_int_eq(mi_safetensors_save(tmp_path("other.safetensors"), &only, 1, NULL), 0);
    ck_assert_int_eq(mi_optim_load(o, tmp_path("other.safetensors")), -1);
    ck_assert_error_has("not an optimizer state");
    mi_error_clear();
    /* the good state still loads, and the failed loads changed nothing */
    ck_assert_int_eq(mi_optim_load(o, tmp_path("opt.safetensors")), 0);
    ck_assert(!memcmp(before->data, mi_optim_state(o, 0, "exp_avg")->data, 4 * sizeof(float)));
    ck_assert_int_eq(mi_optim_state_import(o, NULL), -1);
    mi_error_clear();

    /* schedules */
    mi_schedule bad = {.kind = MI_SCHED_WARMUP_COSINE, .lr = 1, .min_lr = 2, .warmup = 1, .total = 5};
    ck_assert(isnan(mi_schedule_lr(&bad, 0)));
    ck_assert_error_has("min_lr");
    mi_error_clear();
    bad.min_lr = 0;
    bad.total = 1;
    ck_assert(isnan(mi_schedule_lr(&bad, 0)));
    ck_assert_error_has("warmup < total");
    mi_error_clear();
    ck_assert(mi_clip_grad_norm(NULL, 2, 1) < 0);
    ck_assert_error_has("params is NULL");
    mi_error_clear();
    ck_assert_ptr_null(mi_newton_schulz(v, 5));
    ck_assert_error_has("rank ≥ 2");
    mi_error_clear();
    mi_optim_free(o);
    mi_optim_free(sgd);
    mi_optim_free(one);
    mi_optim_free(wrong);
    mi_optim_free(f64);
    mi_optim_free(mom);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("optim_state");
    TCase *io = tcase_slow("state-io");
    tcase_add_checked_fixture(io, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(io, save_load_continue_is_bit_identical);
    tcase_add_test(io, state_names_and_file_round_trip);
    tcase_add_test(io, gradient_accumulation_equals_the_full_batch);
    tcase_add_test(io, bad_arguments_give_clear_messages);
    suite_add_tcase(s, io);
    return s;
}
