/* Private to safetensors_load.c and safetensors_save.c: what both halves of
 * the safetensors I/O share (the dtype names, the header size cap, the error
 * helper). Not installed. */
#ifndef MIRAS_TENSOR_SAFETENSORS_INTERNAL_H
#define MIRAS_TENSOR_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors I/O copies raw little-endian data: big-endian hosts need byte swapping"
#endif
_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE-754 binary32/64 expected");

#define HEADER_MAX ((uint64_t)100000000) /* 100 MB, as the reference implementation */
#define NAME_SHOWN 80                    /* bytes of a name quoted in a message */

/* Metadata key prefix of the per-tensor checksums: "crc32c.<tensor name>" =
 * 8 lowercase hex digits of mi_crc32c over the tensor's bytes. One string per
 * tensor because safetensors metadata is a map of strings to strings (the
 * Python library refuses anything else), and one key each needs no second
 * parser and no escaping beyond the JSON string the name already is. */
#define ST_CRC_PREFIX "crc32c."
#define ST_CRC_PREFIX_LEN (sizeof ST_CRC_PREFIX - 1)

/* Safetensors names of the dtypes miras reads and writes, by mi_dtype. */
extern const char *const st_dtype_names[MI_DTYPE_COUNT];

/* Sets the error message "safetensors: '<path>': <message>" (path may be NULL). */
void st_fail(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline int name_shown(size_t len) { return (int)(len < NAME_SHOWN ? len : NAME_SHOWN); }

#endif
