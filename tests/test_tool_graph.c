/* miras-graph, run as a program: its output is a well-formed DOT digraph
 * (checked structurally here, and by Graphviz's dot when it is installed)
 * holding the ops the variant is made of; misuse gets the right status. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "tool_run.h"

#define RUN(...) tool_run(MIRAS_TOOL, (const char *const[]){__VA_ARGS__, NULL})

typedef struct dot_shape {
    int nodes, edges, ops, leaves;
} dot_shape;

/* Checks the DOT text line by line: a `digraph NAME {` header, then only
 * statements `ID [attrs];`, `ID -> ID;`, `ID -> ID [attrs];` (and the two
 * defaults lines), each with balanced quotes, then `}`. Every edge's ends
 * must be declared somewhere. Returns counts. */
static dot_shape parse_dot(const char *text)
{
    dot_shape s = {0};
    char *copy = strdup(text), *save = NULL;
    char(*ids)[32] = calloc(4096, sizeof *ids);
    char(*ends)[32] = calloc(8192, sizeof *ends);
    int n_ids = 0, n_ends = 0;
    ck_assert_msg(strncmp(text, "digraph miras {\n", 16) == 0, "header: %.40s", text);
    ck_assert_msg(strlen(text) > 2 && !strcmp(text + strlen(text) - 2, "}\n"), "no closing brace");
    int line_no = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line_no++ == 0 || !strcmp(line, "}")) continue;
        int quotes = 0;
        for (const char *c = line; *c; c++) quotes += *c == '"';
        ck_assert_msg(quotes % 2 == 0, "unbalanced quotes: %s", line);
        size_t len = strlen(line);
        ck_assert_msg(len > 3 && !strncmp(line, "  ", 2) && line[len - 1] == ';', "bad line: %s",
                      line);
        if (!strcmp(line, "  rankdir=BT;") || !strncmp(line, "  node [", 8)) continue;
        char a[32], b[32];
        if (sscanf(line, "  %31[A-Za-z0-9_] -> %31[A-Za-z0-9_]", a, b) == 2) {
            s.edges++;
            ck_assert(n_ends + 2 <= 8192);
            strcpy(ends[n_ends++], a);
            strcpy(ends[n_ends++], b);
        } else {
            ck_assert_msg(sscanf(line, "  %31[A-Za-z0-9_] [", a) == 1 && strchr(line, '['),
                          "neither a node nor an edge: %s", line);
            ck_assert(n_ids < 4096);
            strcpy(ids[n_ids++], a);
            s.nodes++;
            s.ops += strstr(line, "shape=box") != NULL;
            s.leaves += strstr(line, "shape=ellipse") != NULL;
        }
    }
    for (int e = 0; e < n_ends; e++) {
        bool found = false;
        for (int i = 0; i < n_ids && !found; i++) found = !strcmp(ids[i], ends[e]);
        ck_assert_msg(found, "edge end %s is not declared", ends[e]);
    }
    free(ids);
    free(ends);
    free(copy);
    return s;
}

static bool has_op(const char *dot, const char *op)
{
    char needle[64];
    snprintf(needle, sizeof needle, "label=\"%s\"", op);
    return strstr(dot, needle) != NULL;
}

START_TEST(one_inner_step_of_deltanet)
{
    /* by default one token is one fused delta_scan op; materialize=true
     * shows the composed ops */
    const tool_result *r = RUN("--model", "deltanet");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(has_op(r->out, "delta_scan"));
    r = RUN("--model", "deltanet", "--set", "materialize=true");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    dot_shape s = parse_dot(r->out);
    ck_assert_int_gt(s.ops, 5);
    ck_assert_int_eq(s.leaves, 5); /* q, k, v, eta, w0.0 */
    ck_assert(has_op(r->out, "matmul") && has_op(r->out, "outer") && has_op(r->out, "sub"));
    ck_assert_ptr_nonnull(strstr(r->out, "label=\"w0.0 f32 [4,4]\",style=bold"));
    ck_assert_ptr_nonnull(strstr(r->out, "label=\"y f32 [1,1,4]\""));
}
END_TEST

/* A chunked momentum model: by default its chunks are the fused op's
 * mini-batch rule (one mlp_scan node); recorded (scan=composed) the momentum
 * and the decay run as scans from the state the previous chunk left
 * (linear_scan_from); with scan=mi_scan the chunks are one mi_scan node. */
START_TEST(titans_layer_at_four_tokens)
{
    const tool_result *r = RUN("--model", "titans", "--chunk", "2", "--tokens", "4", "--dim",
                               "3", "--set", "scan=mi_scan");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(has_op(r->out, "mi_scan") && !has_op(r->out, "linear_scan_from"));
    r = RUN("--model", "titans", "--chunk", "2", "--tokens", "4", "--dim", "3");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(has_op(r->out, "mlp_scan") && !has_op(r->out, "linear_scan_from"));
    r = RUN("--model", "titans", "--chunk", "2", "--tokens", "4", "--dim", "3", "--set",
            "scan=composed");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(has_op(r->out, "linear_scan_from") && has_op(r->out, "gelu") &&
              has_op(r->out, "layer_norm") && has_op(r->out, "matmul"));
    for (int i = 0; i < 6; i++) {
        const char *names[] = {"q f32 [1,4,3]", "k f32", "v f32", "eta f32 [1,4]",
                               "mu f32 [1,4]", "w0.1 f32 [12,3]"};
        ck_assert_msg(strstr(r->out, names[i]), "no input '%s'", names[i]);
    }
    /* the closed-form chunk reads from the gradients' rank-one factors, no
     * outer product; materialised (one W per token) it builds dℓ/dW with
     * outer products; the same gradient by mi_grad(create_graph) is made of
     * the forward's vjps (recorded with scan=composed: a chunk with a state
     * per token runs through mi_scan by default) */
    ck_assert(!has_op(r->out, "outer") && !has_op(r->out, "mi_scan"));
    r = RUN("--model", "titans", "--chunk", "2", "--tokens", "4", "--dim", "3", "--set",
            "materialize=true");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(has_op(r->out, "outer") && has_op(r->out, "linear_scan_from"));
    r = RUN("--model", "titans", "--chunk", "2", "--tokens", "4", "--dim", "3", "--set",
            "closed_form=false", "--set", "scan=composed");
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    parse_dot(r->out);
    ck_assert(!has_op(r->out, "outer") && has_op(r->out, "linear_scan_from"));
}
END_TEST

/* --out writes the file atomically; Graphviz accepts it when installed. */
START_TEST(out_file_and_graphviz)
{
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("memora.dot"));
    const tool_result *r = RUN("--model", "memora", "--chunk", "2", "--tokens", "3", "--out",
                               path);
    ck_assert_msg(r->status == 0, "status %d: %s", r->status, r->err);
    ck_assert_ptr_nonnull(strstr(r->out, "miras-graph: wrote "));
    ck_assert_str_eq(tool_tmp_listing(), "memora.dot");
    FILE *f = fopen(path, "r");
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    parse_dot(text);
    ck_assert(has_op(text, "softmax") || has_op(text, "log_softmax"));
    if (system("command -v dot >/dev/null 2>&1") != 0) {
        printf("tool_graph: Graphviz's dot is not installed; skipping dot -Tsvg\n");
        return;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s.svg'", path, path);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(help_version_and_errors)
{
    const tool_result *r = RUN("--help");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "usage: miras-graph"));
    r = RUN("--version");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "miras-graph 0."));
    struct {
        const char *args[5];
        int status;
        const char *says;
    } cases[] = {
        {{"--bogus"}, 2, "unknown option --bogus"},
        {{"--tokens", "0"}, 2, "--tokens must be a whole number"},
        {{"--dim", "4x"}, 2, "--dim must be a whole number"},
        {{"--model", "nosuch"}, 2, "no preset named 'nosuch'"},
        {{"--set", "bias=nosuch"}, 2, "unknown bias 'nosuch'"},
        {{"--model"}, 2, "missing value after --model"},
        /* lattice: keys have one entry per slot, so slots must equal --dim */
        {{"--model", "lattice-dec", "--set", "memory.slots=3"}, 1, "slots = 3"},
        {{"--out", "/nonexistent-dir/g.dot"}, 1, "cannot write '/nonexistent-dir/g.dot'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = tool_run(MIRAS_TOOL, cases[i].args);
        ck_assert_msg(r->status == cases[i].status, "case %zu: status %d: %s", i, r->status,
                      r->err);
        ck_assert_msg(strstr(r->err, cases[i].says), "case %zu: \"%s\" lacks \"%s\"", i, r->err,
                      cases[i].says);
    }
    /* a failed run to --out leaves nothing */
    r = RUN("--model", "lattice-dec", "--set", "memory.slots=3", "--out", tmp_path("g.dot"));
    ck_assert_int_eq(r->status, 1);
    ck_assert_str_eq(tool_tmp_listing(), "");
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("tool_graph");
    TCase *tc = tcase_slow("tool_graph");
    tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
    tcase_add_test(tc, one_inner_step_of_deltanet);
    tcase_add_test(tc, titans_layer_at_four_tokens);
    tcase_add_test(tc, out_file_and_graphviz);
    tcase_add_test(tc, help_version_and_errors);
    suite_add_tcase(s, tc);
    return s;
}
