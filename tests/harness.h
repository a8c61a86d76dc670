/* Shared by the Check suites: each test file defines make_suite(). */
#ifndef MIRAS_TEST_HARNESS_H
#define MIRAS_TEST_HARNESS_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "extend.h"

Suite *make_suite(void);

/* A test case with a generous timeout (the sanitizer pass is slow). */
TCase *tcase_slow(const char *name);

/* Every test runs inside a fresh scope, freed afterwards. */
void scope_setup(void);
void scope_teardown(void);
extern mi_scope *test_scope;

#define ck_assert_close(a, b, tol)                                                     \
    do {                                                                               \
        double _a = (a), _b = (b);                                                     \
        ck_assert_msg(fabs(_a - _b) <= (tol), "%s = %.12g, expected %.12g (tol %g)", #a, \
                      _a, _b, (double)(tol));                                          \
    } while (0)

/* A fresh directory per test (tcase_add_checked_fixture(tc, tmpdir_setup,
 * tmpdir_teardown)), removed with everything in it afterwards; tmp_path(name)
 * is name inside it (the last four results stay valid). */
extern char test_tmpdir[256];
void tmpdir_setup(void);
void tmpdir_teardown(void);
const char *tmp_path(const char *name);

/* The bytes of a file, NUL-terminated (size excludes the NUL); free() them. */
unsigned char *read_file(const char *path, size_t *size);
/* Writes n bytes to path (creating or truncating it). */
void write_file(const char *path, const void *bytes, size_t n);

/* Gradcheck (f64 central differences) of f w.r.t. every parameter p[0..n),
 * MI_MAX_INPUTS at a time (f reads the parameters, which gradcheck perturbs
 * in place): with an input x, f's in[0] is x in every group (checked in the
 * first only) and the parameters follow; without (NULL), in[] holds only
 * parameters. A failure names `what` and the group's parameters. Returns
 * the entries checked. */
int64_t gradcheck_params(const char *what, mi_check_fn f, void *ctx, mi_tensor *x,
                         const mi_named_tensor *p, int n);

/* A MIRAS config key, as mi_miras_config_set takes it, failing the test with
 * the message when refused; and a real key's value (a bias's own
 * parameters are in its block, read by key). */
void config_set(mi_miras_config *c, const char *assignment);
void config_setf(mi_miras_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double config_real(const mi_miras_config *c, const char *key);
/* A preset's config (mi_preset_config), failing the test if it has none. */
mi_miras_config preset_config(const mi_preset *p);

/* For checks in long loops: Check writes a message for every passing
 * ck_assert (millions in the task tests); these record only failures, with
 * the file and line. */
#define require_msg(cond, ...)                    \
    do {                                          \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);   \
    } while (0)
#define require(cond) require_msg(cond, "Assertion '%s' failed", #cond)

/* Tiny Shakespeare, shipped in the checkout (data/). */
#ifndef MIRAS_SOURCE_DIR
#define MIRAS_SOURCE_DIR "."
#endif
#define SHAKESPEARE MIRAS_SOURCE_DIR "/data/tinyshakespeare.txt"

/* Asserts that the last error mentions `needle`. */
#define ck_assert_error_has(needle)                                                   \
    ck_assert_msg(strstr(mi_error(), needle) != NULL, "error \"%s\" lacks \"%s\"",    \
                  mi_error(), needle)

/* Asserts that differentiating Σ y² twice with respect to x (mi_grad with
 * create_graph) fails with a message naming second derivatives: the fused
 * ops that give first-order gradients only say so, not a wrong answer. */
void assert_no_second_derivative(mi_tensor *y, mi_tensor *x);

/* Whether the op named `name` is within `depth` recorded steps of t. */
bool computed_within(const mi_tensor *t, const char *name, int depth);
/* max |a − b| / (1 + |b|) over n pairs of results (a pair with a NULL side is
 * skipped; a NaN counts as the largest); *worst gets the index of the pair
 * and, when worst_ref is not NULL, *worst_ref b's value there. */
double max_rel_err(mi_tensor *const *a, mi_tensor *const *b, int n, int *worst,
                   double *worst_ref);
/* √(mean of ((a − b)/(1 + |b|))²) over every element of the n pairs (a pair
 * with a NULL side is skipped) */
double rms_rel_err(mi_tensor *const *a, mi_tensor *const *b, int n);

#endif
