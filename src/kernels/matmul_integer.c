/* MatMulInteger with 8-bit weights at few rows, on x86-64:
 *     Y[m, n] = sum_k A[m, k] * (B[k, n] - zb[n]),   int32, exact,
 * where A is already less its zero point (|A| <= 255) and B is the file's int8 or uint8 weight,
 * in its own [K, N] layout (nothing packed at load, no second copy).
 *
 * The algorithm is MLAS's int16 fallback of its QGEMM (core/mlas/lib/qgemm_kernel_avx2.cpp,
 * "U8S8/U8U8 via vpmaddwd"): operands widened to int16, k taken in pairs, and vpmaddwd sums each
 * pair's two products into an int32 lane, which is exact (2 * 255 * 255 < 2^31). B's rows k and
 * k + 1 are widened and interleaved in registers (vpunpck[lh]wd), so a column tile reads B
 * straight from the file's layout, and each row of A is packed once per call into int32 words
 * holding (A[k], A[k+1]). Sums past 2^31 wrap, as onnxruntime's int32 accumulators do.
 *
 * Why a kernel: XLA's CPU backend has no fast integer product, and its float32 path (ops/
 * qlinear.py's exact digits) converts the whole weight to float32 on every call, 9 bytes of memory
 * traffic per weight byte at one row. Measured gain: see docs/kernels.md.
 *
 * Compiled once per instruction set like matmul_nbits.c (the code is AVX2; the AVX-512 copies may
 * use its wider registers where the compiler sees fit). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define KERNEL(name) CAT(name, KERNEL_SUFFIX)

#define TILE 16 /* columns per tile: one ymm of int16 */
#define ROWS 4  /* rows of A per pass over a tile: 8 accumulators, B's two registers, A's pair */
#define DEPTH 64 /* rows of B per pass over the columns (even) */

/* Row r of A (int32, |values| <= 255) as int32 words (A[2i] & 0xffff) | (A[2i + 1] << 16); an odd
 * K's last word pairs A[K - 1] with 0. */
void KERNEL(tm_int8_prepare)(const int32_t *a, int64_t k, uint32_t *pairs) {
    for (int64_t i = 0; 2 * i < k; i++) {
        uint32_t lo = (uint16_t)(int16_t)a[2 * i];
        uint32_t hi = 2 * i + 1 < k ? (uint16_t)(int16_t)a[2 * i + 1] : 0;
        pairs[i] = lo | hi << 16;
    }
}

/* 16 columns of B's row (int8 or uint8) as int16, less their zero points. */
static inline __m256i widen(const uint8_t *row, int b_signed, __m256i zb) {
    __m128i raw = _mm_loadu_si128((const __m128i *)row);
    __m256i w = b_signed ? _mm256_cvtepi8_epi16(raw) : _mm256_cvtepu8_epi16(raw);
    return _mm256_sub_epi16(w, zb);
}

/* Columns c .. c + 15 of rows r0 .. r0 + rows - 1, summed over B's rows k0 .. k1 - 1 (k0 even)
 * onto what Y holds, or from zero when k0 is 0. Inlined with `rows` a constant (ROWS or 1), so
 * the accumulators stay in registers. */
static inline __attribute__((always_inline)) void tile(const uint32_t *pairs, int64_t stride,
                                                       int rows, int64_t r0, const uint8_t *b,
                                                       int b_signed, const int32_t *zb, int32_t *y,
                                                       int64_t n, int64_t k0, int64_t k1,
                                                       int64_t c) {
    /* zero points as int16 in column order: packs interleaves the 128-bit halves, permute undoes */
    __m256i z = _mm256_packs_epi32(_mm256_loadu_si256((const __m256i *)(zb + c)),
                                   _mm256_loadu_si256((const __m256i *)(zb + c + 8)));
    z = _mm256_permute4x64_epi64(z, 0xD8);
    const uint32_t *row[ROWS];
    for (int r = 0; r < rows; r++) row[r] = pairs + (r0 + r) * stride;
    __m256i lo[ROWS], hi[ROWS];
    for (int r = 0; r < rows; r++) {
        lo[r] = hi[r] = _mm256_setzero_si256();
        if (k0 > 0) { /* the sums so far, back in the accumulators' column order */
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(y + (r0 + r) * n + c));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + (r0 + r) * n + c + 8));
            lo[r] = _mm256_permute2x128_si256(y0, y1, 0x20);
            hi[r] = _mm256_permute2x128_si256(y0, y1, 0x31);
        }
    }
    for (int64_t i = k0 / 2; 2 * i < k1; i++) {
        __m256i w0 = widen(b + 2 * i * n + c, b_signed, z);
        __m256i w1 = 2 * i + 1 < k1 ? widen(b + (2 * i + 1) * n + c, b_signed, z)
                                    : _mm256_setzero_si256();
        /* (B[k, j], B[k + 1, j]) pairs: columns 0-3 and 8-11 in wlo, 4-7 and 12-15 in whi */
        __m256i wlo = _mm256_unpacklo_epi16(w0, w1), whi = _mm256_unpackhi_epi16(w0, w1);
        for (int r = 0; r < rows; r++) {
            __m256i ap = _mm256_set1_epi32((int32_t)row[r][i]);
            lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(wlo, ap));
            hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(whi, ap));
        }
    }
    for (int r = 0; r < rows; r++) {
        int32_t *out = y + (r0 + r) * n + c;
        _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(lo[r], hi[r], 0x20));
        _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(lo[r], hi[r], 0x31));
    }
}

/* Columns past the last whole tile, one product at a time (unsigned sums: wrap, as the tiles). */
static void tail(const uint32_t *pairs, int64_t stride, int64_t m, const uint8_t *b, int b_signed,
                 const int32_t *zb, int32_t *y, int64_t n, int64_t k, int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < m; r++) {
        for (int64_t c = c0; c < c1; c++) {
            uint32_t sum = 0;
            for (int64_t j = 0; j < k; j++) {
                uint32_t word = pairs[r * stride + j / 2];
                int32_t a = (int16_t)(uint16_t)(j % 2 ? word >> 16 : word & 0xffff);
                int32_t w = b_signed ? (int8_t)b[j * n + c] : b[j * n + c];
                sum += (uint32_t)(a * (w - zb[c]));
            }
            int32_t out;
            memcpy(&out, &sum, sizeof out); /* the wrapped bits, not an implementation's cast */
            y[r * n + c] = out;
        }
    }
}

/* Y[:, n0:n1] for the prepared rows (`stride` words apart). B's rows are taken DEPTH at a time
 * across all the columns: a tile reads 16 bytes of each row, and the next three tiles the rest of
 * the same cache lines, while DEPTH rows' pages still fit the TLB (whole columns of a 2048 x 8192
 * weight touched 2048 pages per tile: 30 ms at one row; DEPTH 64: see docs/kernels.md). */
void KERNEL(tm_int8_columns)(const uint32_t *pairs, int64_t stride, int64_t m, const uint8_t *b,
                             int b_signed, const int32_t *zb, int32_t *y, int64_t n, int64_t k,
                             int64_t n0, int64_t n1) {
    int64_t whole = n0 + (n1 - n0) / TILE * TILE;
    for (int64_t k0 = 0; k0 < k; k0 += DEPTH) {
        int64_t k1 = k0 + DEPTH < k ? k0 + DEPTH : k;
        for (int64_t c = n0; c < whole; c += TILE) {
            int64_t r0 = 0;
            for (; r0 + ROWS <= m; r0 += ROWS) {
                tile(pairs, stride, ROWS, r0, b, b_signed, zb, y, n, k0, k1, c);
            }
            for (; r0 < m; r0++) tile(pairs, stride, 1, r0, b, b_signed, zb, y, n, k0, k1, c);
        }
    }
    if (whole < n1) tail(pairs, stride, m, b, b_signed, zb, y, n, k, whole, n1);
}
