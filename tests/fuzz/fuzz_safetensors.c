/* libFuzzer target: the safetensors loader (mi_safetensors_parse) on
 * arbitrary bytes. A file is either refused with a message or every tensor
 * it yields can be read to its end. */
#include <stdint.h>
#include <string.h>

#include "miras.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mi_scope *scope;
    if (!scope && !(scope = mi_scope_new("fuzz"))) return 0;
    mi_scope_enter(scope);
    mi_safetensors *st = mi_safetensors_parse(data, size);
    if (st) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < st->count; i++) {
            const mi_tensor *t = st->tensors[i].tensor;
            if (!t || !st->tensors[i].name || !mi_safetensors_get(st, st->tensors[i].name))
                __builtin_trap(); /* a loaded file lists only tensors it can hand out */
            const uint8_t *b = t->data;
            size_t n = (size_t)t->numel * mi_dtype_size(t->dtype);
            for (size_t k = 0; k < n; k++) sink ^= b[k];
        }
        (void)sink;
    } else if (!mi_error_pending() || !mi_error()[0]) {
        __builtin_trap(); /* a refusal always says why */
    }
    mi_error_clear();
    mi_scope_leave();
    mi_scope_reset(scope);
    return 0;
}
