#include <stdarg.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

mi_scope *test_scope;

void scope_setup(void)
{
    mi_error_clear();
    mi_set_grad_enabled(true);
    test_scope = mi_scope_new("test");
    mi_scope_enter(test_scope);
}

void scope_teardown(void)
{
    mi_scope_leave();
    mi_scope_free(test_scope);
    test_scope = NULL;
}

char test_tmpdir[256];

void tmpdir_setup(void)
{
    snprintf(test_tmpdir, sizeof test_tmpdir, "/tmp/miras-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(test_tmpdir));
}

/* Removes path and, for a directory, everything under it (read-only ones too). */
static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[512];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub);
        }
        closedir(d);
        chmod(path, 0700);
        rmdir(path);
    } else {
        unlink(path);
    }
}

void tmpdir_teardown(void) { rm_tree(test_tmpdir); }

const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", test_tmpdir, name);
    return buf[k];
}

TCase *tcase_slow(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, scope_setup, scope_teardown);
    return tc;
}

unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_int_ge(n, 0);
    unsigned char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = 0;
    *size = (size_t)n;
    return b;
}

void write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

int main(void)
{
    SRunner *sr = srunner_create(make_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int64_t gradcheck_params(const char *what, mi_check_fn f, void *ctx, mi_tensor *x,
                         const mi_named_tensor *p, int n)
{
    int first = x ? 1 : 0, per_group = MI_MAX_INPUTS - first;
    int64_t entries = 0;
    if (x) mi_requires_grad(x, true);
    for (int g = 0; g < n; g += per_group) {
        mi_tensor *in[MI_MAX_INPUTS] = {x};
        int m = first;
        for (int i = g; i < n && m < MI_MAX_INPUTS; i++) in[m++] = p[i].tensor;
        mi_gradcheck_result r = mi_gradcheck(f, ctx, in, m, NULL);
        ck_assert_msg(r.ok, "%s, parameters %s..%s: %s", what, p[g].name,
                      p[g + m - first - 1].name, r.message);
        ck_assert(r.entries > 0);
        entries += r.entries;
        if (x) x->requires_grad = false;  /* checked once */
    }
    return entries;
}

void config_set(mi_miras_config *c, const char *assignment)
{
    ck_assert_msg(mi_miras_config_set(c, assignment) == 0, "%s: %s", assignment, mi_error());
}

void config_setf(mi_miras_config *c, const char *fmt, ...)
{
    char kv[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv, sizeof kv, fmt, ap);
    va_end(ap);
    config_set(c, kv);
}

double config_real(const mi_miras_config *c, const char *key)
{
    char text[64];
    ck_assert_msg(mi_miras_config_get(c, key, text, sizeof text) == 0, "%s", mi_error());
    return strtod(text, NULL);
}

mi_miras_config preset_config(const mi_preset *p)
{
    mi_miras_config c;
    ck_assert_msg(p != NULL, "no such preset");
    ck_assert_msg(mi_preset_config(p, &c) == 0, "preset %s: %s", p->name, mi_error());
    return c;
}

void assert_no_second_derivative(mi_tensor *y, mi_tensor *x)
{
    ck_assert_msg(y != NULL, "%s", mi_error());
    mi_error_clear();
    mi_tensor *loss = mi_sum(mi_square(y), MI_ALL, false), *g = NULL;
    ck_assert_int_ne(mi_grad(&loss, NULL, 1, &x, 1, true, &g), 0);
    ck_assert_error_has("second derivatives");
    mi_error_clear();
}

double max_rel_err(mi_tensor *const *a, mi_tensor *const *b, int n, int *worst,
                   double *worst_ref)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        if (!a[i] || !b[i]) continue;
        ck_assert_int_eq(a[i]->numel, b[i]->numel);
        for (int64_t j = 0; j < a[i]->numel; j++) {
            double d = fabs(mi_get(a[i], j) - mi_get(b[i], j)) / (1 + fabs(mi_get(b[i], j)));
            if (!(d <= e)) {
                e = d, *worst = i;
                if (worst_ref) *worst_ref = mi_get(b[i], j);
            }
        }
    }
    return e;
}

double rms_rel_err(mi_tensor *const *a, mi_tensor *const *b, int n)
{
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; a[i] && b[i] && j < a[i]->numel; j++, count++) {
            double d = (mi_get(a[i], j) - mi_get(b[i], j)) / (1 + fabs(mi_get(b[i], j)));
            sum += d * d;
        }
    return count ? sqrt(sum / (double)count) : 0;
}

/* Whether the op named `name` is within `depth` recorded steps of t. */
bool computed_within(const mi_tensor *t, const char *name, int depth)
{
    if (!t || !t->node || depth < 0) return false;
    if (!strcmp(t->node->op->name, name)) return true;
    for (int i = 0; i < t->node->n_inputs; i++)
        if (computed_within(t->node->inputs[i], name, depth - 1)) return true;
    return false;
}
