/* CRC-32C (Castagnoli), the checksum safetensors_save.c stores per tensor and
 * safetensors_load.c verifies. Reflected polynomial 0x82F63B78, initial value
 * and final xor 0xFFFFFFFF (the iSCSI / ext4 / Snappy variant, check value
 * crc32c("123456789") = 0xE3069283).
 *
 * Slice-by-8: eight 256-entry tables let the loop fold 8 input bytes per
 * step instead of 1 (several times faster than the byte-wise table, which
 * matters for checkpoints of hundreds of MB). Table t[k][b] is the CRC of
 * byte b followed by k zero bytes. The tables are built once, on first use,
 * under pthread_once so concurrent loads cannot race on them. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "tensor.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_tables_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++) c = c & 1 ? c >> 1 ^ CRC32C_POLY : c >> 1;
        crc_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) {
            uint32_t c = crc_table[k - 1][b];
            crc_table[k][b] = c >> 8 ^ crc_table[0][c & 0xff];
        }
}

uint32_t mi_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_tables_init);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        /* little-endian load of the first 4 bytes, xor'ed into the CRC; the
         * byte-wise loads keep this correct on any alignment and byte order */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][lo >> 8 & 0xff] ^
            crc_table[5][lo >> 16 & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    }
    while (n--) c = c >> 8 ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}
