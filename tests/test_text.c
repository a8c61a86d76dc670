/* Byte-level texts: the train/validation split, deterministic windows,
 * file errors, and Tiny Shakespeare (or its first 64 KiB). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static int64_t at(const mi_tensor *t, int64_t i) { return ((const int64_t *)t->data)[i]; }

/* ---------------------------------------------------------------- text */

/* name inside the test's temporary directory, holding n bytes (bytes NULL: none written) */
static const char *tmp_file(const char *name, const void *bytes, size_t n)
{
    const char *path = tmp_path(name);
    if (bytes) write_file(path, bytes, n);
    return path;
}

/* 1,000 random bytes: any 16 of them in a row occur once, so a window's
 * bytes tell where it starts. */
static const uint8_t *thousand_bytes(void)
{
    static uint8_t b[1000];
    mi_rng r;
    mi_rng_seed(&r, 1000);
    for (int i = 0; i < 1000; i++) b[i] = (uint8_t)mi_rng_below(&r, 256);
    return b;
}

static int64_t find_start(const uint8_t *data, int64_t n, const mi_tensor *x, const mi_tensor *y,
                          int64_t row, int64_t T)
{
    for (int64_t s = 0; s + T < n; s++) {
        bool ok = true;
        for (int64_t i = 0; i < T && ok; i++)
            ok = at(x, row * T + i) == data[s + i] && at(y, row * T + i) == data[s + i + 1];
        if (ok) return s;
    }
    return -1;
}

START_TEST(text_split_boundaries)
{
    const uint8_t *data = thousand_bytes();
    mi_text *t = mi_text_load(tmp_file("k.bin", data, 1000));
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->size, 1000);
    ck_assert_int_eq(t->valid_begin, 900);
    ck_assert_mem_eq(t->data, data, 1000);
    int64_t b, e;
    mi_text_split_range(t, MI_SPLIT_VALID, &b, &e);
    require(b == 900 && e == 1000);
    enum { T = 16, B = 10000 };
    mi_tensor *x, *y;
    ck_assert_int_eq(mi_text_batch(t, T, 3, MI_SPLIT_TRAIN, 0, B, &x, &y), 0);
    require(x->rank == 2 && x->shape[0] == B && x->shape[1] == T && x->dtype == MI_I64);
    int64_t lo = 1000, hi = -1;
    for (int64_t r = 0; r < B; r++) {
        int64_t s = find_start(data, 1000, x, y, r, T);
        ck_assert_int_ge(s, 0);
        require_msg(s + T <= 899, "train window at %lld reaches byte %lld", (long long)s,
                      (long long)(s + T));
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
    }
    ck_assert_int_eq(lo, 0);
    ck_assert_int_eq(hi, 899 - T); /* the last train window ends at byte 899 */
    ck_assert_int_eq(mi_text_batch(t, T, 3, MI_SPLIT_VALID, 0, 1000, &x, &y), 0);
    lo = 1000, hi = -1;
    for (int64_t r = 0; r < 1000; r++) {
        int64_t s = find_start(data, 1000, x, y, r, T);
        ck_assert_int_ge(s, 900);
        ck_assert_int_le(s + T, 999);
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
    }
    require(lo == 900 && hi == 999 - T);
    /* the validation split holds 100 bytes: T = 99 fits once, T = 100 not */
    ck_assert_int_eq(mi_text_batch(t, 99, 3, MI_SPLIT_VALID, 0, 2, &x, &y), 0);
    ck_assert_int_eq(mi_text_batch(t, 100, 3, MI_SPLIT_VALID, 0, 2, &x, &y), -1);
    ck_assert_error_has("validation split");
    ck_assert_error_has("100 bytes");
    mi_error_clear();
    ck_assert_int_eq(mi_text_batch(t, 0, 3, MI_SPLIT_TRAIN, 0, 2, &x, &y), -1);
    ck_assert_error_has("seq_len");
    mi_error_clear();
}
END_TEST

START_TEST(text_windows_are_deterministic)
{
    const uint8_t *data = thousand_bytes();
    mi_text *t = mi_text_from_bytes(data, 1000, "thousand");
    ck_assert_ptr_nonnull(t);
    mi_tensor *x1, *y1, *x2, *y2, *x3, *y3;
    ck_assert_int_eq(mi_text_batch(t, 32, 42, MI_SPLIT_TRAIN, 0, 8, &x1, &y1), 0);
    ck_assert_int_eq(mi_text_batch(t, 32, 42, MI_SPLIT_TRAIN, 0, 8, &x2, &y2), 0);
    ck_assert_mem_eq(x1->data, x2->data, 8 * 32 * 8);
    ck_assert_mem_eq(y1->data, y2->data, 8 * 32 * 8);
    for (int64_t i = 0; i < x1->numel - 1; i++)
        if ((i + 1) % 32) require(at(x1, i + 1) == at(y1, i)); /* targets are the next byte */
    ck_assert_int_eq(mi_text_batch(t, 32, 42, MI_SPLIT_TRAIN, 5, 2, &x3, &y3), 0);
    ck_assert_mem_eq(x3->data, (int64_t *)x1->data + 5 * 32, 2 * 32 * 8);
    ck_assert_int_eq(mi_text_batch(t, 32, 43, MI_SPLIT_TRAIN, 0, 8, &x3, &y3), 0);
    require(memcmp(x1->data, x3->data, 8 * 32 * 8) != 0);

    /* consecutive windows: validation has 100 bytes → (100 − 1) / 32 = 3 */
    ck_assert_int_eq(mi_text_window_count(t, 32, MI_SPLIT_VALID), 3);
    ck_assert_int_eq(mi_text_window_count(t, 32, MI_SPLIT_TRAIN), 899 / 32);
    ck_assert_int_eq(mi_text_windows(t, 32, MI_SPLIT_VALID, 0, 3, &x3, &y3), 0);
    for (int64_t i = 0; i < 96; i++) {
        require(at(x3, i) == data[900 + i]);
        require(at(y3, i) == data[901 + i]);
    }
    ck_assert_int_eq(mi_text_windows(t, 32, MI_SPLIT_VALID, 1, 3, &x3, &y3), -1);
    ck_assert_error_has("it has 3 windows");
    mi_error_clear();
}
END_TEST

START_TEST(text_file_errors)
{
    ck_assert_ptr_null(mi_text_load(tmp_file("missing.txt", NULL, 0)));
    ck_assert_error_has("missing.txt");
    ck_assert_error_has("No such file or directory");
    mi_error_clear();
    ck_assert_ptr_null(mi_text_load(tmp_file("empty.txt", "", 0)));
    ck_assert_error_has("empty.txt' is empty");
    mi_error_clear();
    ck_assert_ptr_null(mi_text_load(test_tmpdir));
    ck_assert_error_has("not a regular file");
    mi_error_clear();
    /* a FIFO with no writer: refused at once, where fopen would wait */
    const char *fifo = tmp_file("fifo.txt", NULL, 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_ptr_null(mi_text_load(fifo));
    ck_assert_error_has("not a regular file (a FIFO)");
    mi_error_clear();
    unlink(fifo);
    ck_assert_ptr_null(mi_text_load(NULL));
    ck_assert_error_has("NULL path");
    mi_error_clear();
    /* larger than the limit: a sparse file, nothing is read */
    const char *big = tmp_file("big.txt", "x", 1);
    ck_assert_int_eq(truncate(big, MI_TEXT_MAX_BYTES + 1), 0);
    ck_assert_ptr_null(mi_text_load(big));
    ck_assert_error_has("more than the limit");
    mi_error_clear();
    /* unreadable: root reads anything, so only as another user */
    const char *locked = tmp_file("locked.txt", "abc", 3);
    ck_assert_int_eq(chmod(locked, 0), 0);
    if (geteuid() != 0) {
        ck_assert_ptr_null(mi_text_load(locked));
        ck_assert_error_has("Permission denied");
        mi_error_clear();
    } else {
        printf("text_file_errors: running as root; the permission-denied case is skipped\n");
    }
    ck_assert_ptr_null(mi_text_from_bytes("abc", 0, "zero"));
    ck_assert_error_has("'zero' has 0 bytes");
    mi_error_clear();
}
END_TEST

/* Tiny Shakespeare (data/), split as nanoGPT's shakespeare_char:
 * "train has 1,003,854 tokens, val has 111,540". */
START_TEST(text_tinyshakespeare)
{
    mi_text *t = mi_text_load(SHAKESPEARE);
    ck_assert_msg(t != NULL, "%s", mi_error());
    int64_t size = 1115394, valid_begin = 1003854;
    ck_assert_int_eq(t->size, size);
    ck_assert_int_eq(t->valid_begin, valid_begin);
    require(memcmp(t->data, "First Citizen:", 14) == 0);
    mi_tensor *x, *y;
    ck_assert_int_eq(mi_text_batch(t, 64, 1, MI_SPLIT_TRAIN, 0, 12, &x, &y), 0);
    for (int64_t i = 0; i < x->numel; i++) require(at(x, i) > 0 && at(x, i) < 128);
    ck_assert_int_eq(mi_text_window_count(t, 64, MI_SPLIT_VALID), (size - valid_begin - 1) / 64);
    ck_assert_int_eq(mi_text_windows(t, 64, MI_SPLIT_VALID, 0, 4, &x, &y), 0);
    require(at(x, 0) == t->data[valid_begin]);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_slow("text");
    tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(tc, text_split_boundaries);
    tcase_add_test(tc, text_windows_are_deterministic);
    tcase_add_test(tc, text_file_errors);
    tcase_add_test(tc, text_tinyshakespeare);
    suite_add_tcase(s, tc);
    return s;
}
