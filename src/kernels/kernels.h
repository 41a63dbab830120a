/* The native kernels' C interface: one set of functions per instruction set (see matmul_nbits.c's
 * KERNEL), and the dispatcher's choice among them (dispatch.c). */
#ifndef TRANSMUTER_KERNELS_H
#define TRANSMUTER_KERNELS_H
#include <stdint.h>

#define NBITS_DECLARE(suffix)                                                                  \
    void tm_nbits_prepare_int8##suffix(const float *a, int64_t k, int64_t block, int bits,      \
                                       int8_t *xq, float *scale, float *blksum);               \
    void tm_nbits_prepare_f32##suffix(const float *a, int64_t k, int bits, float *xp);          \
    void tm_nbits_columns_int8##suffix(const int8_t *xq, const float *ascale,                   \
                                       const float *blksum, int64_t xq_stride, int64_t m,       \
                                       const uint8_t *b, const float *scales, const float *zp,  \
                                       float *y, int64_t n, int64_t k, int64_t block, int bits, \
                                       int64_t n0, int64_t n1);                                 \
    void tm_nbits_columns_f32##suffix(const float *xp, int64_t xp_stride, int64_t m,            \
                                      const uint8_t *b, const float *scales, const float *zp,   \
                                      float *y, int64_t n, int64_t k, int64_t block, int bits,  \
                                      int64_t n0, int64_t n1);

#define INT8_DECLARE(suffix)                                                                   \
    void tm_int8_prepare##suffix(const int32_t *a, int64_t k, uint32_t *pairs);                 \
    void tm_int8_columns##suffix(const uint32_t *pairs, int64_t stride, int64_t m,              \
                                 const uint8_t *b, int b_signed, const int32_t *zb, int32_t *y, \
                                 int64_t n, int64_t k, int64_t n0, int64_t n1);

#define W8_DECLARE(suffix)                                                                     \
    void tm_w8_columns##suffix(const float *a, int64_t m, const uint8_t *b, int b_signed,       \
                               const int32_t *zb, const float *scale, float *y, int64_t n,      \
                               int64_t k, int64_t n0, int64_t n1);

NBITS_DECLARE(_avx2)
NBITS_DECLARE(_avxvnni)
NBITS_DECLARE(_avx512vnni)
INT8_DECLARE(_avx2)
INT8_DECLARE(_avxvnni)
INT8_DECLARE(_avx512vnni)
W8_DECLARE(_avx2)
W8_DECLARE(_avxvnni)
W8_DECLARE(_avx512vnni)

typedef struct {
    const char *name;
    void (*prepare_int8)(const float *, int64_t, int64_t, int, int8_t *, float *, float *);
    void (*prepare_f32)(const float *, int64_t, int, float *);
    void (*columns_int8)(const int8_t *, const float *, const float *, int64_t, int64_t,
                         const uint8_t *, const float *, const float *, float *, int64_t,
                         int64_t, int64_t, int, int64_t, int64_t);
    void (*columns_f32)(const float *, int64_t, int64_t, const uint8_t *, const float *,
                        const float *, float *, int64_t, int64_t, int64_t, int, int64_t,
                        int64_t);
    void (*int8_prepare)(const int32_t *, int64_t, uint32_t *);
    void (*int8_columns)(const uint32_t *, int64_t, int64_t, const uint8_t *, int,
                         const int32_t *, int32_t *, int64_t, int64_t, int64_t, int64_t);
    void (*w8_columns)(const float *, int64_t, const uint8_t *, int, const int32_t *,
                       const float *, float *, int64_t, int64_t, int64_t, int64_t);
} tm_kernels;

/* The best set this CPU runs, or NULL without AVX2 and FMA. */
const tm_kernels *tm_kernels_select(void);

#endif
