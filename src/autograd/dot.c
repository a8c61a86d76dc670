/* Graphviz DOT export of a recorded computation: ops as boxes, tensors as
 * edges labelled with their shapes, leaves as ellipses. */
#include <stdlib.h>

#include "op.h"

static void tensor_label(char *buf, size_t n, const mi_tensor *t)
{
    char s[96];
    snprintf(buf, n, "%s%s%s %s", t->name ? t->name : "", t->name ? " " : "",
             mi_dtype_name(t->dtype), mi_shape_str(s, sizeof s, t->rank, t->shape));
}

int mi_graph_dot(FILE *f, mi_tensor *const *outputs, int n_out)
{
    if (!f || !outputs) {
        mi_error_set("graph_dot: NULL argument");
        return -1;
    }
    size_t cap = 64, n = 0, head = 0;
    mi_node **q = malloc(cap * sizeof *q);
    if (!q) return -1;
    fprintf(f, "digraph miras {\n  rankdir=BT;\n  node [fontname=\"Helvetica\"];\n");
    char lab[160];
    for (int i = 0; i < n_out; i++) {
        if (!outputs[i]) continue;
        tensor_label(lab, sizeof lab, outputs[i]);
        fprintf(f, "  out%d [shape=doubleoctagon,label=\"%s\"];\n", i, lab);
        if (outputs[i]->node) {
            fprintf(f, "  n%p -> out%d;\n", (void *)outputs[i]->node, i);
            bool seen = false;
            for (size_t k = 0; k < n; k++) seen |= q[k] == outputs[i]->node;
            if (!seen) q[n++] = outputs[i]->node;
        }
    }
    while (head < n) {
        mi_node *nd = q[head++];
        fprintf(f, "  n%p [shape=box,style=filled,fillcolor=\"#dde8f5\",label=\"%s\"];\n",
                (void *)nd, nd->op->name);
        for (int i = 0; i < nd->n_inputs; i++) {
            mi_tensor *t = nd->inputs[i];
            tensor_label(lab, sizeof lab, t);
            if (t->node) {
                fprintf(f, "  n%p -> n%p [label=\"%s\"];\n", (void *)t->node, (void *)nd, lab);
                bool seen = false;
                for (size_t k = 0; k < n; k++) seen |= q[k] == t->node;
                if (!seen) {
                    if (n == cap) {
                        mi_node **nq = realloc(q, 2 * cap * sizeof *nq);
                        if (!nq) {
                            free(q);
                            return -1;
                        }
                        q = nq;
                        cap *= 2;
                    }
                    q[n++] = t->node;
                }
            } else {
                fprintf(f, "  t%p [shape=ellipse,label=\"%s\"%s];\n  t%p -> n%p;\n", (void *)t,
                        lab, t->requires_grad ? ",style=bold" : "", (void *)t, (void *)nd);
            }
        }
    }
    fprintf(f, "}\n");
    free(q);
    return 0;
}
