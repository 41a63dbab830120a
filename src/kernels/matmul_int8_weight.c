/* A float32 MatMul by an 8-bit weight that the graph dequantizes (weight-only int8: the
 * Cast(q) * scale or DequantizeLinear(q, scale, zp) a quantizer writes before a MatMul), at few
 * rows, on x86-64:
 *     Y[m, n] = sum_k A[m, k] * W[k, n],   W[k, n] = (float)(B[k, n] - zb[n]) * scale[n].
 * W is rounded exactly as the graph computes it (onnxruntime folds that Cast and Mul into a
 * float32 initializer at load: the same values), and the products are float32 FMAs summed in k
 * order; only the order of the sum differs from onnxruntime's MLAS SGEMM.
 *
 * The algorithm is MLAS's SGEMM with B packed per call instead of at load (core/mlas/lib/
 * sgemm.cpp: MlasSgemmCopyPackB, then a kernel that broadcasts A and streams B's packed panel):
 * DEPTH rows x 16 columns of B are dequantized into a float32 panel on the stack (4 KB, in L1),
 * and every group of ROWS rows of A runs over that panel with 2 x ROWS accumulators (up to ROWS
 * rows, the weights go from registers to the products with no panel). B is read once per call, as
 * bytes, in the file's [K, N] layout (nothing packed at load, no second copy).
 *
 * Why a kernel: XLA's CPU backend dequantizes the whole weight into memory on every call before
 * its product (all-MiniLM-L6-v2 in weight-only int8, one sentence of 16 tokens: 17 ms, against
 * 5.8 ms with the weights folded to float32 in the file; onnxruntime 2.9 ms). With this kernel:
 * 4.4 ms (python bench/engine.py --model FILE, 2 cores; docs/kernels.md).
 *
 * Compiled once per instruction set like matmul_nbits.c (the code is AVX2 + FMA). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define KERNEL(name) CAT(name, KERNEL_SUFFIX)

#define TILE 16  /* columns per panel: one row16 */
#define DEPTH 64 /* rows of B per panel (and per pass over the columns, as matmul_integer.c) */

/* 16 float32 columns: one zmm where the copy has AVX-512 (ROWS 8: 8 accumulators, the weights,
 * A's broadcast folded into each FMA), else two ymm (ROWS 4: 8 accumulators, 2 weights, A's
 * broadcast). The AVX-512 form took 384 x 1536 at 16 rows from 244 to 191 us (one thread). */
#if defined(__AVX512F__)
#define ROWS 8
typedef struct { __m512 v; } row16;
static inline row16 row16_zero(void) { return (row16){_mm512_setzero_ps()}; }
static inline row16 row16_load(const float *p) { return (row16){_mm512_loadu_ps(p)}; }
static inline void row16_store(float *p, row16 x) { _mm512_storeu_ps(p, x.v); }
static inline row16 row16_fma(const float *a, row16 w, row16 acc) {
    return (row16){_mm512_fmadd_ps(_mm512_set1_ps(*a), w.v, acc.v)};
}
/* (B - zb) * scale of the 16 bytes at row; zb and scale as int32 / float32 rows of 16. */
static inline row16 row16_weights(const uint8_t *row, int b_signed, const int32_t *zb,
                                  row16 scale) {
    __m128i raw = _mm_loadu_si128((const __m128i *)row);
    __m512i q = b_signed ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw);
    __m512i z = _mm512_loadu_si512((const void *)zb);
    return (row16){_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, z)), scale.v)};
}
#else
#define ROWS 4
typedef struct { __m256 lo, hi; } row16;
static inline row16 row16_zero(void) { return (row16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline row16 row16_load(const float *p) {
    return (row16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
static inline void row16_store(float *p, row16 x) {
    _mm256_storeu_ps(p, x.lo);
    _mm256_storeu_ps(p + 8, x.hi);
}
static inline row16 row16_fma(const float *a, row16 w, row16 acc) {
    __m256 x = _mm256_broadcast_ss(a);
    return (row16){_mm256_fmadd_ps(x, w.lo, acc.lo), _mm256_fmadd_ps(x, w.hi, acc.hi)};
}
static inline row16 row16_weights(const uint8_t *row, int b_signed, const int32_t *zb,
                                  row16 scale) {
    __m128i raw = _mm_loadu_si128((const __m128i *)row);
    __m128i high = _mm_unpackhi_epi64(raw, raw);
    __m256i lo = b_signed ? _mm256_cvtepi8_epi32(raw) : _mm256_cvtepu8_epi32(raw);
    __m256i hi = b_signed ? _mm256_cvtepi8_epi32(high) : _mm256_cvtepu8_epi32(high);
    lo = _mm256_sub_epi32(lo, _mm256_loadu_si256((const __m256i *)zb));
    hi = _mm256_sub_epi32(hi, _mm256_loadu_si256((const __m256i *)(zb + 8)));
    return (row16){_mm256_mul_ps(_mm256_cvtepi32_ps(lo), scale.lo),
                   _mm256_mul_ps(_mm256_cvtepi32_ps(hi), scale.hi)};
}
#endif

/* W[k0 .. k1 - 1, c .. c + 15] into panel (row-major, 16 floats a row). */
static inline void dequantize(const uint8_t *b, int b_signed, const int32_t *zb,
                              const float *scale, int64_t n, int64_t k0, int64_t k1, int64_t c,
                              float *panel) {
    row16 s = row16_load(scale + c);
    for (int64_t j = k0; j < k1; j++) {
        row16_store(panel + (j - k0) * TILE, row16_weights(b + j * n + c, b_signed, zb + c, s));
    }
}

/* Y[r0 .. r0 + rows - 1, c .. c + 15] += A[those rows, k0 .. k1 - 1] @ W[k0 .. k1 - 1, c ..]
 * (from zero when k0 is 0), W read from the panel, or (panel NULL: at most ROWS rows in all)
 * dequantized in registers and used at once: a panel's store and reload cost more than they
 * save there (384 x 1536 at one row, 80 -> 52 us, one thread). Inlined with `rows` a constant,
 * so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void block(const float *a, int rows, int64_t r0,
                                                        const float *panel, const uint8_t *b,
                                                        int b_signed, const int32_t *zb,
                                                        const float *scale, float *y, int64_t n,
                                                        int64_t k, int64_t k0, int64_t k1,
                                                        int64_t c) {
    row16 acc[ROWS];
    row16 s = row16_load(scale + c);
    for (int r = 0; r < rows; r++) {
        acc[r] = k0 > 0 ? row16_load(y + (r0 + r) * n + c) : row16_zero();
    }
    for (int64_t j = k0; j < k1; j++) {
        row16 w = panel ? row16_load(panel + (j - k0) * TILE)
                        : row16_weights(b + j * n + c, b_signed, zb + c, s);
        for (int r = 0; r < rows; r++) acc[r] = row16_fma(a + (r0 + r) * k + j, w, acc[r]);
    }
    for (int r = 0; r < rows; r++) row16_store(y + (r0 + r) * n + c, acc[r]);
}

/* block() with `rows` (1 .. ROWS) made a constant. */
static void rows_block(const float *a, int64_t rows, int64_t r0, const float *panel,
                       const uint8_t *b, int b_signed, const int32_t *zb, const float *scale,
                       float *y, int64_t n, int64_t k, int64_t k0, int64_t k1, int64_t c) {
#define CASE(R)                                                                    \
    case R:                                                                        \
        block(a, R, r0, panel, b, b_signed, zb, scale, y, n, k, k0, k1, c);        \
        break;
    switch (rows) {
        CASE(1) CASE(2) CASE(3) CASE(4)
#if ROWS == 8
        CASE(5) CASE(6) CASE(7) CASE(8)
#endif
    }
#undef CASE
}

/* Columns past the last whole panel, one product at a time, summed as the panels are (FMA in k
 * order), so that every column of Y is computed the same way. */
static void tail(const float *a, int64_t m, const uint8_t *b, int b_signed, const int32_t *zb,
                 const float *scale, float *y, int64_t n, int64_t k, int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = c0; c < c1; c++) {
            float sum = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                int32_t q = b_signed ? (int8_t)b[j * n + c] : b[j * n + c];
                sum = fmaf(a[r * k + j], (float)(q - zb[c]) * scale[c], sum);
            }
            y[r * n + c] = sum;
        }
    }
}

/* Y[:, n0:n1] of A [m, k] @ W. B's rows are taken DEPTH at a time across all the columns, so that
 * the DEPTH rows' pages stay in the TLB (matmul_integer.c). */
void KERNEL(tm_w8_columns)(const float *a, int64_t m, const uint8_t *b, int b_signed,
                           const int32_t *zb, const float *scale, float *y, int64_t n, int64_t k,
                           int64_t n0, int64_t n1) {
    float panel[DEPTH * TILE] __attribute__((aligned(64)));
    int64_t whole = n0 + (n1 - n0) / TILE * TILE;
    for (int64_t k0 = 0; k0 < k; k0 += DEPTH) {
        int64_t k1 = k0 + DEPTH < k ? k0 + DEPTH : k;
        for (int64_t c = n0; c < whole; c += TILE) {
            if (m <= ROWS) { /* one group of rows: no panel */
                rows_block(a, m, 0, NULL, b, b_signed, zb, scale, y, n, k, k0, k1, c);
                continue;
            }
            dequantize(b, b_signed, zb, scale, n, k0, k1, c, panel);
            for (int64_t r0 = 0; r0 < m; r0 += ROWS) {
                int64_t rows = m - r0 < ROWS ? m - r0 : ROWS;
                rows_block(a, rows, r0, panel, b, b_signed, zb, scale, y, n, k, k0, k1, c);
            }
        }
    }
    if (whole < n1) tail(a, m, b, b_signed, zb, scale, y, n, k, whole, n1);
}
