/* Installed as miras/tensor/fields.h, for users: included by miras.h (through
 * tensor/tensor.h). */
/* Field tables: a configuration struct's parameters declared once, each
 * with its name, type, place in the struct, default, range and a line of
 * documentation. From the table come the defaults, "KEY=VALUE" parsing
 * (the value read with the same code whether it comes from a command line,
 * a preset or a checkpoint's metadata), range checks with messages that name
 * the key, the text of a value (for checkpoints) and the list of keys for a
 * --help or the docs.
 *
 *   static const mi_field fields[] = {
 *       MI_FIELD_REAL_AT(my_config, "p", p, "3", 1, INFINITY, 0, "the exponent of the ℓp bias"),
 *       MI_FIELD_BOOL_AT(my_config, "decay_first", decay_first, "false", "decay, then step"),
 *   };
 *   mi_fields_set(fields, MI_FIELDS_COUNT(fields), &config, "config", "p=2");
 *
 * A nested struct's fields are listed with their dotted key and the
 * member's path ("cms.eta", offsetof(mi_hope_config, cms.eta)). */
#ifndef MIRAS_FIELDS_H
#define MIRAS_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mi_field_type {
    MI_FIELD_INT,    /* int; whole numbers in the range */
    MI_FIELD_I64,    /* int64_t (read exactly, all 64 bits) */
    MI_FIELD_U64,    /* uint64_t (read exactly; no sign) */
    MI_FIELD_REAL,   /* double */
    MI_FIELD_BOOL,   /* bool: true, false, 1 or 0 */
    MI_FIELD_CHOICE, /* int: the index of the value's name in choices (an enum's names) */
    MI_FIELD_NAME,   /* const char *: one of the names name_at(0), name_at(1), … (a
                        component table's), stored as that name, never the caller's text */
    MI_FIELD_TEXT,   /* char[size]: the text itself, copied */
    MI_FIELD_CUSTOM, /* parse() and format() of its own (e.g. "head:0.5") */
    MI_FIELD_GROUP,  /* a nested struct with its own table: its keys are "KEY.sub"
                        (the CMS inside HOPE: "cms.eta") */
} mi_field_type;

/* flags */
#define MI_FIELD_RANGED  1u /* checked against [lo, hi] (INT, I64, REAL) */
#define MI_FIELD_LO_OPEN 2u /* lo itself is out of range: (lo, hi] */
#define MI_FIELD_HI_OPEN 4u /* [lo, hi) */
#define MI_FIELD_FINITE  8u /* REAL: no inf or NaN (a range implies no NaN) */

typedef struct mi_field mi_field;
struct mi_field {
    const char *key;
    mi_field_type type;
    size_t offset, size;        /* the member in the struct */
    const char *def;            /* the default as text, parsed like any value; NULL: zero */
    double lo, hi;              /* the range, with MI_FIELD_RANGED */
    unsigned flags;
    const char *const *choices; /* CHOICE: NULL-terminated names, index = value */
    const char *(*name_at)(int i);                           /* NAME: NULL past the last */
    /* CUSTOM: the text into the field's member of obj (it may set a neighbour too,
     * e.g. a flag with a variant); -1 with a message; and the reverse */
    int (*parse)(const mi_field *f, void *obj, const char *text);
    int (*format)(const mi_field *f, const void *obj, char *buf, size_t n);
    const char *doc;            /* one line; for CHOICE and NAME it lists the values */
    const mi_field *(*group)(int *count);  /* GROUP: the nested struct's table */
};

#define MI_FIELDS_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))
#define MI_FIELD_AT_(T, member) offsetof(T, member), sizeof(((T *)0)->member)

#define MI_FIELD_INT_AT(T, key, member, def, lo, hi, doc) \
    {key, MI_FIELD_INT, MI_FIELD_AT_(T, member), def, lo, hi, MI_FIELD_RANGED, NULL, NULL, \
     NULL, NULL, doc, NULL}
#define MI_FIELD_I64_AT(T, key, member, def, lo, hi, doc) \
    {key, MI_FIELD_I64, MI_FIELD_AT_(T, member), def, lo, hi, MI_FIELD_RANGED, NULL, NULL, \
     NULL, NULL, doc, NULL}
#define MI_FIELD_U64_AT(T, key, member, def, lo, hi, doc) \
    {key, MI_FIELD_U64, MI_FIELD_AT_(T, member), def, lo, hi, MI_FIELD_RANGED, NULL, NULL, \
     NULL, NULL, doc, NULL}
/* flags: MI_FIELD_LO_OPEN, MI_FIELD_HI_OPEN (RANGED is implied) */
#define MI_FIELD_REAL_AT(T, key, member, def, lo, hi, flags, doc) \
    {key, MI_FIELD_REAL, MI_FIELD_AT_(T, member), def, lo, hi, MI_FIELD_RANGED | (flags), \
     NULL, NULL, NULL, NULL, doc, NULL}
#define MI_FIELD_BOOL_AT(T, key, member, def, doc) \
    {key, MI_FIELD_BOOL, MI_FIELD_AT_(T, member), def, 0, 0, 0, NULL, NULL, NULL, NULL, doc, NULL}
#define MI_FIELD_CHOICE_AT(T, key, member, def, names, doc) \
    {key, MI_FIELD_CHOICE, MI_FIELD_AT_(T, member), def, 0, 0, 0, names, NULL, NULL, NULL, doc, NULL}
#define MI_FIELD_NAME_AT(T, key, member, def, name_at, doc) \
    {key, MI_FIELD_NAME, MI_FIELD_AT_(T, member), def, 0, 0, 0, NULL, name_at, NULL, NULL, doc, NULL}
#define MI_FIELD_TEXT_AT(T, key, member, def, doc) \
    {key, MI_FIELD_TEXT, MI_FIELD_AT_(T, member), def, 0, 0, 0, NULL, NULL, NULL, NULL, doc, NULL}
#define MI_FIELD_CUSTOM_AT(T, key, member, def, parse, format, doc) \
    {key, MI_FIELD_CUSTOM, MI_FIELD_AT_(T, member), def, 0, 0, 0, NULL, NULL, parse, format, doc, NULL}
#define MI_FIELD_GROUP_AT(T, key, member, fields_fn, doc) \
    {key, MI_FIELD_GROUP, MI_FIELD_AT_(T, member), NULL, 0, 0, 0, NULL, NULL, NULL, NULL, doc, \
     fields_fn}

/* The entry for key, or NULL (a group's own keys are not searched). */
const mi_field *mi_fields_find(const mi_field *table, int n, const char *key);

/* Every field of obj to its default (zero where def is NULL). 0, or -1 with
 * a message (a table whose default does not parse: a programming error). */
int mi_fields_defaults(const mi_field *table, int n, void *obj);

/* One value: text into the member, then its range. On an error (-1) the
 * member keeps its value and the message is "WHAT: KEY: 'TEXT' is not …" or
 * "WHAT: KEY must be >= lo, got TEXT"; what names the configuration (NULL or
 * "": the message starts with the key). */
int mi_field_parse(const mi_field *f, void *obj, const char *what, const char *text);

/* "KEY=VALUE": the field named KEY (an unknown key: -1, the message listing
 * the table's keys). */
int mi_fields_set(const mi_field *table, int n, void *obj, const char *what,
                  const char *assignment);

/* KEY of "KEY=VALUE" is in the table (false for text without a '='). */
bool mi_fields_has_key(const mi_field *table, int n, const char *assignment);

/* The member's value as text that mi_field_parse reads back to the same
 * value (reals as %.17g). 0, or -1 when buf is too small. */
int mi_field_format(const mi_field *f, const void *obj, char *buf, size_t n);

/* For a CUSTOM field's format(): printf into buf, 0, or -1 with "KEY: its text
 * does not fit in N bytes" (the message mi_field_format gives). */
int mi_field_printf(const mi_field *f, char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Every ranged field of obj in its range (and every CHOICE an index of its
 * names, every NAME set): for a struct filled in by C code, not parsed.
 * -1 with "WHAT: KEY must be in …, got VALUE" at the first that is not. */
int mi_fields_check(const mi_field *table, int n, const void *obj, const char *what);

/* The table as text, a line per key: "  key=default  (range)  doc", for a
 * CHOICE or NAME the values' names after the doc. Writes
 * at most n bytes with a terminating NUL; returns the length the whole text
 * needs (as snprintf). */
size_t mi_fields_describe(const mi_field *table, int n, char *buf, size_t size);

#endif
