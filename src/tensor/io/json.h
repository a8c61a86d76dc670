/* A small strict JSON parser (RFC 8259) for the safetensors header.
 *
 * Private to the tensor layer. It builds a read-only tree in an arena owned
 * by the document; mi_json_doc_free releases all of it at once. Strict means:
 * no comments, no trailing commas, no leading zeros or '+', no unescaped
 * control characters or invalid UTF-8 in strings, no unpaired surrogates in
 * \uXXXX escapes, nothing but whitespace after the value, and nesting at most
 * JSON_MAX_DEPTH deep (so hostile input cannot exhaust the stack). */
#ifndef MIRAS_TENSOR_JSON_H
#define MIRAS_TENSOR_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

typedef enum json_type {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
typedef struct json_member json_member;

struct json_value {
    json_type type;
    bool is_int;  /* numbers: an integer literal (no fraction or exponent) that fits int64 */
    size_t pos;   /* byte offset of the value's first character in the text */
    size_t len;   /* numbers: literal length in the text; strings: decoded bytes;
                     arrays and objects: element count */
    union {
        int64_t i;            /* numbers with is_int */
        char *s;              /* strings: decoded UTF-8, NUL-terminated (may hold \0) */
        json_value *items;    /* arrays */
        json_member *members; /* objects, in text order (duplicate keys kept) */
    } u;
};

struct json_member {
    char *key; /* decoded UTF-8, NUL-terminated (may hold \0) */
    size_t key_len;
    size_t pos; /* byte offset of the key's opening quote */
    json_value value;
};

typedef struct json_doc {
    json_value root;
    struct json_block *blocks; /* the arena */
} json_doc;

typedef struct json_error {
    size_t pos;    /* byte offset where parsing stopped */
    char msg[128]; /* e.g. "expected ',' or '}' in object" */
} json_error;

/* Parses text[0..len). 0 on success (doc->root is the value), -1 with err
 * filled on malformed input or out of memory; doc is left freeable either way. */
int mi_json_parse(json_doc *doc, const char *text, size_t len, json_error *err);
void mi_json_doc_free(json_doc *doc);

/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, at
 * most U+10FFFF). On false, *bad (if not NULL) is the offending byte offset. */
bool json_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
