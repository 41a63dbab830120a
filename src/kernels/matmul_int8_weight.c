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
 * 5.8 ms with the weights folded to float32 in the file; onnxruntime 3.2 ms). With this kernel:
 * 4.9 ms (python bench/engine.py --model FILE, 2 cores; docs/kernels.md).
 *
 * Compiled once per instruction set like matmul_nbits.c (the code is AVX2 + FMA). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define KERNEL(name) CAT(name, KERNEL_SUFFIX)

#define TILE 16  /* columns per panel: two ymm of float32 */
#define ROWS 4   /* rows of A per pass over a panel: 8 accumulators, 2 weights, A's broadcast */
#define DEPTH 64 /* rows of B per panel (and per pass over the columns, as matmul_integer.c) */

/* W[j, c .. c + 15] from the 16 bytes of B at row: (B - zb) * scale, in two registers. */
static inline void weights(const uint8_t *row, int b_signed, __m256i z0, __m256i z1, __m256 s0,
                           __m256 s1, __m256 *w0, __m256 *w1) {
    __m128i raw = _mm_loadu_si128((const __m128i *)row);
    __m128i high = _mm_unpackhi_epi64(raw, raw);
    __m256i lo = b_signed ? _mm256_cvtepi8_epi32(raw) : _mm256_cvtepu8_epi32(raw);
    __m256i hi = b_signed ? _mm256_cvtepi8_epi32(high) : _mm256_cvtepu8_epi32(high);
    *w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(lo, z0)), s0);
    *w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(hi, z1)), s1);
}

/* W[k0 .. k1 - 1, c .. c + 15] into panel (row-major, 16 floats a row). */
static inline void dequantize(const uint8_t *b, int b_signed, const int32_t *zb,
                              const float *scale, int64_t n, int64_t k0, int64_t k1, int64_t c,
                              float *panel) {
    __m256 s0 = _mm256_loadu_ps(scale + c), s1 = _mm256_loadu_ps(scale + c + 8);
    __m256i z0 = _mm256_loadu_si256((const __m256i *)(zb + c));
    __m256i z1 = _mm256_loadu_si256((const __m256i *)(zb + c + 8));
    for (int64_t j = k0; j < k1; j++) {
        __m256 w0, w1;
        weights(b + j * n + c, b_signed, z0, z1, s0, s1, &w0, &w1);
        _mm256_store_ps(panel + (j - k0) * TILE, w0);
        _mm256_store_ps(panel + (j - k0) * TILE + 8, w1);
    }
}

/* At most ROWS rows: each weight dequantized in registers and used at once (a panel's store
 * and reload cost more than they save: 384 x 1536 at one row, 80 -> 52 us, one thread). */
static inline __attribute__((always_inline)) void direct(const float *a, int rows,
                                                         const uint8_t *b, int b_signed,
                                                         const int32_t *zb, const float *scale,
                                                         float *y, int64_t n, int64_t k,
                                                         int64_t k0, int64_t k1, int64_t c) {
    __m256 s0 = _mm256_loadu_ps(scale + c), s1 = _mm256_loadu_ps(scale + c + 8);
    __m256i z0 = _mm256_loadu_si256((const __m256i *)(zb + c));
    __m256i z1 = _mm256_loadu_si256((const __m256i *)(zb + c + 8));
    __m256 lo[ROWS], hi[ROWS];
    for (int r = 0; r < rows; r++) {
        float *out = y + r * n + c;
        lo[r] = k0 > 0 ? _mm256_loadu_ps(out) : _mm256_setzero_ps();
        hi[r] = k0 > 0 ? _mm256_loadu_ps(out + 8) : _mm256_setzero_ps();
    }
    for (int64_t j = k0; j < k1; j++) {
        __m256 w0, w1;
        weights(b + j * n + c, b_signed, z0, z1, s0, s1, &w0, &w1);
        for (int r = 0; r < rows; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * k + j);
            lo[r] = _mm256_fmadd_ps(x, w0, lo[r]);
            hi[r] = _mm256_fmadd_ps(x, w1, hi[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float *out = y + r * n + c;
        _mm256_storeu_ps(out, lo[r]);
        _mm256_storeu_ps(out + 8, hi[r]);
    }
}

/* Y[r0 .. r0 + rows - 1, c .. c + 15] += A[those rows, k0 .. k1 - 1] @ panel (from zero when k0
 * is 0). Inlined with `rows` a constant (ROWS or 1), so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void block(const float *a, int rows, int64_t r0,
                                                        const float *panel, float *y, int64_t n,
                                                        int64_t k, int64_t k0, int64_t k1,
                                                        int64_t c) {
    __m256 lo[ROWS], hi[ROWS];
    for (int r = 0; r < rows; r++) {
        float *out = y + (r0 + r) * n + c;
        lo[r] = k0 > 0 ? _mm256_loadu_ps(out) : _mm256_setzero_ps();
        hi[r] = k0 > 0 ? _mm256_loadu_ps(out + 8) : _mm256_setzero_ps();
    }
    for (int64_t j = k0; j < k1; j++) {
        __m256 w0 = _mm256_load_ps(panel + (j - k0) * TILE);
        __m256 w1 = _mm256_load_ps(panel + (j - k0) * TILE + 8);
        for (int r = 0; r < rows; r++) {
            __m256 x = _mm256_broadcast_ss(a + (r0 + r) * k + j);
            lo[r] = _mm256_fmadd_ps(x, w0, lo[r]);
            hi[r] = _mm256_fmadd_ps(x, w1, hi[r]);
        }
    }
    for (int r = 0; r < rows; r++) {
        float *out = y + (r0 + r) * n + c;
        _mm256_storeu_ps(out, lo[r]);
        _mm256_storeu_ps(out + 8, hi[r]);
    }
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
    float panel[DEPTH * TILE] __attribute__((aligned(32)));
    int64_t whole = n0 + (n1 - n0) / TILE * TILE;
    for (int64_t k0 = 0; k0 < k; k0 += DEPTH) {
        int64_t k1 = k0 + DEPTH < k ? k0 + DEPTH : k;
        for (int64_t c = n0; c < whole; c += TILE) {
            if (m <= ROWS) { /* one group of rows: no panel */
                if (m == 1) direct(a, 1, b, b_signed, zb, scale, y, n, k, k0, k1, c);
                if (m == 2) direct(a, 2, b, b_signed, zb, scale, y, n, k, k0, k1, c);
                if (m == 3) direct(a, 3, b, b_signed, zb, scale, y, n, k, k0, k1, c);
                if (m == 4) direct(a, 4, b, b_signed, zb, scale, y, n, k, k0, k1, c);
                continue;
            }
            dequantize(b, b_signed, zb, scale, n, k0, k1, c, panel);
            int64_t r0 = 0;
            for (; r0 + ROWS <= m; r0 += ROWS) block(a, ROWS, r0, panel, y, n, k, k0, k1, c);
            for (; r0 < m; r0++) block(a, 1, r0, panel, y, n, k, k0, k1, c);
        }
    }
    if (whole < n1) tail(a, m, b, b_signed, zb, scale, y, n, k, whole, n1);
}
