/* Field tables: defaults, KEY=VALUE parsing with its messages, ranges,
 * formatting that reads back to the same value, the check of a struct
 * filled in by code, and the description. */
#include "harness.h"

typedef struct inner {
    double rate;
} inner;

typedef struct sample {
    int depth;
    int64_t count;
    double p, eps;
    bool flag;
    int form;
    const char *kind;
    char label[8];
    double gate;     /* CUSTOM: "half:x" stores x/2 */
    uint64_t seed;
    inner nested;
} sample;

static const char *const forms[] = {"exact", "minibatch|mini", "auto", NULL};

static const char *kind_at(int i)
{
    static const char *const kinds[] = {"matrix", "mlp"};
    return i >= 0 && i < 2 ? kinds[i] : NULL;
}

static int gate_parse(const mi_field *f, void *obj, const char *text)
{
    if (strncmp(text, "half:", 5)) return mi_error_set("'%s' does not start with half:", text), -1;
    *(double *)((char *)obj + f->offset) = atof(text + 5) / 2;
    return 0;
}

static int gate_format(const mi_field *f, const void *obj, char *buf, size_t n)
{
    int k = snprintf(buf, n, "half:%.17g", *(const double *)((const char *)obj + f->offset) * 2);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static const mi_field fields[] = {
    MI_FIELD_INT_AT(sample, "depth", depth, "2", 1, 64, "layers"),
    MI_FIELD_I64_AT(sample, "count", count, "-5", -1e12, 1e12, "a count"),
    MI_FIELD_REAL_AT(sample, "p", p, "3", 1, INFINITY, 0, "the exponent, >= 1"),
    MI_FIELD_REAL_AT(sample, "eps", eps, "1e-6", 0, 1, MI_FIELD_LO_OPEN, "in (0, 1]"),
    MI_FIELD_BOOL_AT(sample, "flag", flag, "true", "a switch"),
    MI_FIELD_CHOICE_AT(sample, "form", form, "auto", forms, "exact, minibatch or auto"),
    MI_FIELD_NAME_AT(sample, "kind", kind, "matrix", kind_at, "matrix or mlp"),
    MI_FIELD_TEXT_AT(sample, "label", label, "abc", "a short text"),
    MI_FIELD_CUSTOM_AT(sample, "gate", gate, "half:1", gate_parse, gate_format, "half:x"),
    MI_FIELD_REAL_AT(sample, "nested.rate", nested.rate, "0.5", 0, 1, MI_FIELD_HI_OPEN, "[0, 1)"),
    MI_FIELD_U64_AT(sample, "seed", seed, "7", 0, 2e19, "a seed"),
};
#define N MI_FIELDS_COUNT(fields)

/* A group: a nested struct with its own table, keys "in.KEY". */
typedef struct outer {
    int n;
    inner in;
} outer;
static const mi_field inner_fields[] = {
    MI_FIELD_REAL_AT(inner, "rate", rate, "0.25", 0, 1, 0, "a rate"),
};
static const mi_field *inner_table(int *count)
{
    *count = MI_FIELDS_COUNT(inner_fields);
    return inner_fields;
}
static const mi_field outer_fields[] = {
    MI_FIELD_INT_AT(outer, "n", n, "3", 0, 10, "n"),
    MI_FIELD_GROUP_AT(outer, "in", in, inner_table, "the inner struct"),
};
#define NO MI_FIELDS_COUNT(outer_fields)

static sample defaults(void)
{
    sample s;
    memset(&s, 0x5a, sizeof s);
    ck_assert_int_eq(mi_fields_defaults(fields, N, &s), 0);
    return s;
}

START_TEST(defaults_come_from_the_table)
{
    sample s = defaults();
    ck_assert_int_eq(s.depth, 2);
    ck_assert(s.count == -5);
    ck_assert(s.p == 3 && s.eps == 1e-6 && s.flag && s.form == 2);
    ck_assert_str_eq(s.kind, "matrix");
    ck_assert_str_eq(s.label, "abc");
    ck_assert(s.gate == 0.5 && s.nested.rate == 0.5);
    ck_assert_int_eq(mi_fields_check(fields, N, &s, "sample"), 0);
}
END_TEST

START_TEST(assignments_set_each_type)
{
    sample s = defaults();
    static char kind_text[] = "mlp";
    const char *ok[] = {"depth=64", "count=-1000000", "p=1", "eps=1", "flag=0", "form=exact",
                        "kind=mlp", "label=seven77", "gate=half:3", "nested.rate=0"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        ck_assert_msg(mi_fields_set(fields, N, &s, "sample", ok[i]) == 0, "%s: %s", ok[i],
                      mi_error());
    ck_assert(s.depth == 64 && s.count == -1000000 && s.p == 1 && s.eps == 1 && !s.flag);
    ck_assert_int_eq(s.form, 0);
    ck_assert_str_eq(s.label, "seven77");
    ck_assert(s.gate == 1.5 && s.nested.rate == 0);
    /* a NAME field keeps the table's string, not the caller's text */
    ck_assert_int_eq(mi_field_parse(mi_fields_find(fields, N, "kind"), &s, "sample", kind_text), 0);
    ck_assert(s.kind != kind_text);
    /* a CHOICE's alias reads as its name, which is what is written */
    ck_assert_int_eq(mi_fields_set(fields, N, &s, "sample", "form=mini"), 0);
    ck_assert_int_eq(s.form, 1);
    char text[16];
    ck_assert_int_eq(mi_field_format(mi_fields_find(fields, N, "form"), &s, text, sizeof text), 0);
    ck_assert_str_eq(text, "minibatch");
    kind_text[0] = 'X';
    ck_assert_str_eq(s.kind, "mlp");
}
END_TEST

/* Each bad value leaves the struct as it was and says what was wrong. */
START_TEST(bad_values_are_refused_with_the_key)
{
    static const struct { const char *assignment, *message; } bad[] = {
        {"depth=0", "sample: depth must be in [1, 64], got 0"},
        {"depth=2.5", "sample: depth: '2.5' is not a whole number"},
        {"depth=1e30", "sample: depth: '1e30' is not a whole number"},
        {"count=x", "sample: count: 'x' is not a whole number"},
        {"p=0.5", "sample: p must be >= 1, got 0.5"},
        {"p=nan", "sample: p must be >= 1, got nan"},
        {"p=", "sample: p: '' is not a number"},
        {"p=3x", "sample: p: '3x' is not a number"},
        {"eps=0", "sample: eps must be in (0, 1], got 0"},
        {"nested.rate=1", "sample: nested.rate must be in [0, 1), got 1"},
        {"flag=yes", "sample: flag: 'yes' is not true or false"},
        {"form=fast", "sample: form must be 'exact', 'minibatch' or 'auto', got 'fast'"},
        {"form=minibatch|mini", "sample: form must be 'exact', 'minibatch' or 'auto', got "
                                "'minibatch|mini'"},
        {"form=min", "sample: form must be 'exact', 'minibatch' or 'auto', got 'min'"},
        {"kind=tree", "sample: unknown kind 'tree'"},
        {"label=eightchr", "sample: label: 'eightchr' is longer than 7 characters"},
        {"gate=2", "sample: gate: '2' does not start with half:"},
        {"nope=1", "sample: unknown key 'nope' (depth, count, p, eps, flag, form, kind, label, "
                   "gate, nested.rate, seed)"},
        {"seed=-1", "sample: seed: '-1' is not a whole number"},
        {"seed=18446744073709551616", "sample: seed: '18446744073709551616' is not a whole number"},
        {"=1", "sample: expected KEY=VALUE, got '=1'"},
        {"p", "sample: expected KEY=VALUE, got 'p'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sample s = defaults(), before;
        memcpy(&before, &s, sizeof s);
        mi_error_clear();
        ck_assert_msg(mi_fields_set(fields, N, &s, "sample", bad[i].assignment) == -1, "%s",
                      bad[i].assignment);
        ck_assert_str_eq(mi_error(), bad[i].message);
        ck_assert_msg(!memcmp(&s, &before, sizeof s), "%s changed the struct", bad[i].assignment);
    }
}
END_TEST

/* The text of every field parses back to the same bytes. */
START_TEST(format_round_trips)
{
    sample s = defaults();
    const char *set[] = {"p=1.1", "eps=3.3333333333333335e-07", "count=-123456789012",
                         "gate=half:0.7", "form=minibatch", "flag=false"};
    for (size_t i = 0; i < sizeof set / sizeof *set; i++)
        ck_assert_int_eq(mi_fields_set(fields, N, &s, "sample", set[i]), 0);
    sample t = defaults();
    for (int i = 0; i < N; i++) {
        char text[64];
        ck_assert_int_eq(mi_field_format(&fields[i], &s, text, sizeof text), 0);
        ck_assert_msg(mi_field_parse(&fields[i], &t, "sample", text) == 0, "%s=%s: %s",
                      fields[i].key, text, mi_error());
    }
    ck_assert(s.p == t.p && s.eps == t.eps && s.count == t.count && s.gate == t.gate);
    ck_assert(s.form == t.form && s.flag == t.flag && s.kind == t.kind);
    char small[3];
    ck_assert_int_eq(mi_field_format(mi_fields_find(fields, N, "p"), &s, small, sizeof small), -1);
}
END_TEST

/* Whole numbers are read exactly, beyond a double's 53 bits; "1e3" is whole too. */
START_TEST(whole_numbers_are_exact)
{
    sample s = defaults();
    ck_assert_int_eq(mi_fields_set(fields, N, &s, "sample", "seed=18446744073709551615"), 0);
    ck_assert(s.seed == UINT64_MAX);
    ck_assert_int_eq(mi_fields_set(fields, N, &s, "sample", "count=-999999999999"), 0);
    ck_assert(s.count == -999999999999LL);
    ck_assert_int_eq(mi_fields_set(fields, N, &s, "sample", "depth=1e1"), 0);
    ck_assert_int_eq(s.depth, 10);
    char text[32];
    ck_assert_int_eq(mi_field_format(mi_fields_find(fields, N, "seed"), &s, text, sizeof text), 0);
    ck_assert_str_eq(text, "18446744073709551615");
    /* without a WHAT the message starts with the key */
    mi_error_clear();
    ck_assert_int_eq(mi_field_parse(mi_fields_find(fields, N, "depth"), &s, NULL, "x"), -1);
    ck_assert_str_eq(mi_error(), "depth: 'x' is not a whole number");
    mi_error_clear();
}
END_TEST

START_TEST(groups_nest_a_table)
{
    outer o;
    memset(&o, 0x5a, sizeof o);
    ck_assert_int_eq(mi_fields_defaults(outer_fields, NO, &o), 0);
    ck_assert(o.n == 3 && o.in.rate == 0.25);
    ck_assert_int_eq(mi_fields_set(outer_fields, NO, &o, "outer", "in.rate=0.5"), 0);
    ck_assert(o.in.rate == 0.5);
    ck_assert(mi_fields_has_key(outer_fields, NO, "in.rate=1"));
    ck_assert(!mi_fields_has_key(outer_fields, NO, "in=1") &&
              !mi_fields_has_key(outer_fields, NO, "rate=1"));
    const char *bad[][2] = {
        {"in.rate=2", "outer: in.rate must be in [0, 1], got 2"},
        {"in.x=1", "outer: unknown key 'in.x' (n, in.KEY)"},
        {"in=1", "outer: unknown key 'in' (n, in.KEY)"},
    };
    for (int i = 0; i < 3; i++) {
        mi_error_clear();
        ck_assert_int_eq(mi_fields_set(outer_fields, NO, &o, "outer", bad[i][0]), -1);
        ck_assert_str_eq(mi_error(), bad[i][1]);
    }
    ck_assert(o.in.rate == 0.5);
    char text[256];
    mi_fields_describe(outer_fields, NO, text, sizeof text);
    ck_assert_str_eq(text, "  n=3  (in [0, 10])  n\n  in.rate=0.25  (in [0, 1])  a rate\n");
    o.in.rate = 5;
    mi_error_clear();
    ck_assert_int_eq(mi_fields_check(outer_fields, NO, &o, "outer"), -1);
    ck_assert_str_eq(mi_error(), "outer: in: rate must be in [0, 1], got 5");
    mi_error_clear();
}
END_TEST

START_TEST(check_finds_a_value_set_by_code)
{
    sample s = defaults();
    s.eps = 0;
    mi_error_clear();
    ck_assert_int_eq(mi_fields_check(fields, N, &s, "sample"), -1);
    ck_assert_str_eq(mi_error(), "sample: eps must be in (0, 1], got 0");
    s = defaults();
    s.form = 3;
    ck_assert_int_eq(mi_fields_check(fields, N, &s, "sample"), -1);
    s = defaults();
    s.kind = NULL;
    mi_error_clear();
    ck_assert_int_eq(mi_fields_check(fields, N, &s, "sample"), -1);
    ck_assert_str_eq(mi_error(), "sample: kind is not set");
}
END_TEST

START_TEST(describe_lists_every_key)
{
    size_t need = mi_fields_describe(fields, N, NULL, 0);
    char *text = malloc(need + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(mi_fields_describe(fields, N, text, need + 1), need);
    ck_assert_uint_eq(strlen(text), need);
    ck_assert_ptr_nonnull(strstr(text, "  eps=1e-6  (in (0, 1])  in (0, 1]\n"));
    ck_assert_ptr_nonnull(strstr(text, "  form=auto  exact, minibatch or auto: exact, minibatch, auto\n"));
    for (int i = 0; i < N; i++) ck_assert_ptr_nonnull(strstr(text, fields[i].key));
    char cut[16];
    ck_assert_uint_eq(mi_fields_describe(fields, N, cut, sizeof cut), need);
    ck_assert_uint_eq(strlen(cut), sizeof cut - 1);
    free(text);
    ck_assert(mi_fields_has_key(fields, N, "nested.rate=0.1"));
    ck_assert(!mi_fields_has_key(fields, N, "nested=0.1") && !mi_fields_has_key(fields, N, "p"));
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("fields");
    TCase *tc = tcase_slow("fields");
    tcase_add_test(tc, defaults_come_from_the_table);
    tcase_add_test(tc, assignments_set_each_type);
    tcase_add_test(tc, bad_values_are_refused_with_the_key);
    tcase_add_test(tc, format_round_trips);
    tcase_add_test(tc, whole_numbers_are_exact);
    tcase_add_test(tc, groups_nest_a_table);
    tcase_add_test(tc, check_finds_a_value_set_by_code);
    tcase_add_test(tc, describe_lists_every_key);
    suite_add_tcase(s, tc);
    return s;
}
