/* libFuzzer target: the strict JSON parser of the safetensors header on
 * arbitrary bytes. A document is parsed or refused with a position; a parsed
 * tree is walked to every leaf. */
#include <stdint.h>

#include "json.h"

static size_t walk(const json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH + 1) __builtin_trap(); /* the depth limit holds */
    size_t n = 1;
    if (v->type == JSON_ARRAY)
        for (size_t i = 0; i < v->len; i++) n += walk(&v->u.items[i], depth + 1);
    else if (v->type == JSON_OBJECT)
        for (size_t i = 0; i < v->len; i++) n += walk(&v->u.members[i].value, depth + 1);
    else if (v->type == JSON_STRING)
        for (size_t i = 0; i < v->len; i++) n += (unsigned char)v->u.s[i] & 1u;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_doc doc;
    json_error err;
    if (mi_json_parse(&doc, (const char *)data, size, &err) == 0) {
        volatile size_t n = walk(&doc.root, 0);
        (void)n;
    } else if (err.pos > size || !err.msg[0]) {
        __builtin_trap(); /* an error says what, at a place inside the text */
    }
    mi_json_doc_free(&doc);
    return 0;
}
