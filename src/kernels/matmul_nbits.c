/* MatMulNBits (com.microsoft), 4 and 8 bits, on x86-64:
 *     Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, b]) * scale[n, b],  b = k / block_size.
 *
 * Numerics follow onnxruntime's MLAS SQNBitGemm (core/mlas/lib/sqnbitgemm_kernel_avx2.cpp and its
 * int8 blklen kernels):
 *   - accuracy_level 4 ("CompInt8"): each row of A is quantized per block to int8, scale amax / 127,
 *     values x * (127 / amax) rounded to nearest even (QuantizeARow_CompInt8_avx2). A block's dot
 *     product of the unsigned weights and the signed activations is exact in int32 (vpdpbusd),
 *     then scaled by a_scale * w_scale; the zero point enters as -zp * w_scale * a_scale * sum(xq)
 *     (MLAS's "BlkSum" term).
 *   - levels 0-3 ("CompFp32"): each weight is dequantized in registers, (q - zp) * scale, and
 *     multiplied in f32; no f32 weight is ever written to memory (what XLA's path does per call).
 * Unlike MLAS, B stays in the file's layout (nothing packed at load, no second copy): byte i of a
 * 4-bit block holds element 2i in its low nibble and 2i + 1 in its high one, so a mask and a shift
 * of 32 bytes give the 32 even and the 32 odd elements of 64. Each row of A is laid out
 * evens-then-odds per 64 elements when it is prepared (once per call, shared by every column), and
 * a dot product, which does not depend on order, then needs no shuffle of the weights at all.
 *
 * Measured gain (bench/matmul_nbits.py --models smollm2, 2 cores, AVX-512 VNNI): 1.5-10x faster
 * than XLA's dequantize-in-the-graph path at 1-16 rows, at both levels; onnxruntime's MLAS is
 * 0.59-0.98x our time per product at level 4 (it packs B at load), 0.49-1.91x at level 0.
 *
 * Compiled once per instruction set (kernels/build.py): -mavx512vnni -mavx512vl (vpdpbusd on ymm),
 * -mavxvnni (its VEX form), or plain AVX2 (vpmaddubsw + vpmaddwd). KERNEL(name) gives each copy
 * its own symbols; dispatch.c picks one at run time. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define KERNEL(name) CAT(name, KERNEL_SUFFIX)

/* acc + the sums of four u8 x s8 products per int32 lane. w holds weights up to wmax. */
static inline __m256i dot_u8s8(__m256i acc, __m256i w, __m256i x, int wmax) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    (void)wmax;
    return _mm256_dpbusd_epi32(acc, w, x);
#elif defined(__AVXVNNI__)
    (void)wmax;
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (wmax <= 15) { /* pairs of 15 * 127 fit int16: vpmaddubsw cannot saturate */
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
    }
    /* 8-bit weights: w = 16 * hi + lo, each half a 4-bit product */
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256i lo = _mm256_and_si256(w, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), ones);
    __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), ones);
    return _mm256_add_epi32(acc, _mm256_add_epi32(plo, _mm256_slli_epi32(phi, 4)));
#endif
}

/* Where element e goes in the prepared row. 4 bits: per 64 elements (32 bytes of B), the 32 evens
 * then the 32 odds, so that one 32-byte load of B, masked and shifted, meets them; the int32 lane
 * L of a dot product then sums elements [8L, 8L + 8) of the 64. 8 bits: in order. */
static inline int64_t position(int64_t e, int bits) {
    if (bits != 4) return e;
    int64_t base = e & ~(int64_t)63, i = e & 63;
    return base + ((i & 1) ? 32 + (i >> 1) : (i >> 1));
}

/* |a[lo, hi)|'s largest value, and whether every value is finite: eight at a time. */
static float block_amax(const float *a, int64_t lo, int64_t hi, int *finite) {
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 amax = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    int64_t e = lo;
    for (; e + 8 <= hi; e += 8) {
        __m256 v = _mm256_andnot_ps(sign, _mm256_loadu_ps(a + e));
        ok = _mm256_and_ps(ok, _mm256_cmp_ps(v, inf, _CMP_LT_OQ)); /* false for NaN and inf */
        amax = _mm256_max_ps(amax, v);
    }
    float lanes[8], result = 0.0f;
    _mm256_storeu_ps(lanes, amax);
    for (int i = 0; i < 8; i++) result = lanes[i] > result ? lanes[i] : result;
    *finite = _mm256_movemask_ps(ok) == 0xff;
    for (; e < hi; e++) {
        float v = fabsf(a[e]);
        *finite &= v < INFINITY; /* false for NaN too */
        result = v > result ? v : result;
    }
    return result;
}

/* The int8 digits of a[lo, hi) * inverse, rounded to nearest even (the rounding MXCSR gives
 * _mm256_cvtps_epi32, as nearbyintf), each at position(e); returns their sum. |a| <= amax, so
 * every digit lies in [-127, 127]. */
static int32_t block_digits(const float *a, int64_t lo, int64_t hi, float inverse, int bits,
                            int8_t *xq) {
    const __m256 scale = _mm256_set1_ps(inverse);
    int32_t digits[8], sum = 0;
    int64_t e = lo;
    for (; e + 8 <= hi; e += 8) {
        _mm256_storeu_si256((__m256i *)digits,
                            _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + e), scale)));
        for (int i = 0; i < 8; i++) {
            xq[position(e + i, bits)] = (int8_t)digits[i];
            sum += digits[i];
        }
    }
    for (; e < hi; e++) {
        int32_t v = (int32_t)nearbyintf(a[e] * inverse);
        xq[position(e, bits)] = (int8_t)v;
        sum += v;
    }
    return sum;
}

/* A row of A quantized per block as MLAS's QuantizeARow_CompInt8 does. Vectorised: the scalar
 * form (fmaxf through the PLT, a rounding per element) took ~10 us a row at K = 1536, a third of
 * a one-row product's time (bench/matmul_nbits.py, 576 x 1536). */
void KERNEL(tm_nbits_prepare_int8)(const float *a, int64_t k, int64_t block, int bits,
                                   int8_t *xq, float *scale, float *blksum) {
    int64_t n_blocks = (k + block - 1) / block, padded = n_blocks * block;
    memset(xq, 0, (size_t)((padded + 63) & ~(int64_t)63));
    for (int64_t b = 0; b < n_blocks; b++) {
        int64_t lo = b * block, hi = lo + block < k ? lo + block : k;
        int finite;
        float amax = block_amax(a, lo, hi, &finite);
        /* as MLAS: the inverse is 127 / amax, not 1 / scale (they round differently). A NaN or
         * inf makes the block's scale NaN, so every output of the row is NaN, as in f32
         * arithmetic (MLAS turns them into int8 garbage: its result there is undefined); its
         * digits stay 0. */
        int32_t sum = finite && amax != 0.0f
            ? block_digits(a, lo, hi, 127.0f / amax, bits, xq) : 0;
        scale[b] = finite ? amax / 127.0f : NAN;
        blksum[b] = scale[b] * (float)sum;
    }
}

void KERNEL(tm_nbits_prepare_f32)(const float *a, int64_t k, int bits, float *xp) {
    int64_t padded = (k + 63) & ~(int64_t)63;
    memset(xp, 0, (size_t)padded * sizeof(float));
    for (int64_t e = 0; e < k; e++) xp[position(e, bits)] = a[e];
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* B is read 32 bytes ("a span") at a time: 64 weights of 4 bits or 32 of 8. Lane L (of eight
 * int32 or f32) of a span's sums covers elements [per_lane * L, per_lane * (L + 1)) of it. */
typedef struct {
    int64_t k, block, n_blocks, col_bytes, n_spans, whole_spans;
    int bits, span, per_lane, block_shift;
    int32_t lane_block[8]; /* blocks shorter than a span: lane L's block within it */
} shape_t;

static shape_t shape_of(int64_t k, int64_t block, int bits) {
    shape_t t;
    t.k = k, t.block = block, t.bits = bits;
    t.n_blocks = (k + block - 1) / block;
    t.col_bytes = t.n_blocks * block * bits / 8;
    t.n_spans = (t.col_bytes + 31) / 32;
    t.whole_spans = t.col_bytes / 32; /* a short last span, if any, is read with checks */
    t.span = bits == 4 ? 64 : 32;
    t.per_lane = t.span / 8;
    t.block_shift = __builtin_ctzll((unsigned long long)block);
    for (int lane = 0; lane < 8; lane++)
        t.lane_block[lane] = block < t.span ? (int32_t)(lane * t.per_lane / block) : 0;
    return t;
}

/* Span s of one column's bytes; the last may be short (a multiple of 8 bytes): masked, the rest 0. */
static inline __m256i load_span(const uint8_t *col, int64_t s, const shape_t *t) {
    int64_t left = t->col_bytes - s * 32;
    if (__builtin_expect(left >= 32, 1)) return _mm256_loadu_si256((const __m256i *)(col + s * 32));
    const int32_t words[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    __m256i mask = _mm256_loadu_si256((const __m256i *)(words + 8 - left / 4));
    return _mm256_maskload_epi32((const int *)(col + s * 32), mask);
}

/* values[block of lane L] for the eight lanes of span s (0 past the last block). Blocks shorter
 * than a span: its 2 or 4 blocks' values loaded at once and spread by lane (t->lane_block). */
static inline __m256 lanes(const float *values, int64_t s, const shape_t *t) {
    int64_t first = (s * t->span) >> t->block_shift; /* block is a power of two: no division */
    if (t->block >= t->span) return _mm256_set1_ps(values[first]);
    __m128 four;
    if (first + 4 <= t->n_blocks) {
        four = _mm_loadu_ps(values + first);
    } else {  /* the row's last blocks */
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t i = 0; first + i < t->n_blocks && i < 4; i++) v[i] = values[first + i];
        four = _mm_loadu_ps(v);
    }
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(four),
                                    _mm256_loadu_si256((const __m256i *)t->lane_block));
}

/* sum over blocks of a[b] * c[b] * d[b], in f32 */
static float dot3(const float *a, const float *c, const float *d, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
                              _mm256_mul_ps(_mm256_loadu_ps(c + i), _mm256_loadu_ps(d + i)), acc);
    }
    float total = hsum(acc);
    for (; i < n; i++) total += a[i] * (c[i] * d[i]);
    return total;
}

/* The scales of span s's lanes, for a whole span (all its blocks exist): per_span blocks of the
 * span (1: blocks as long as a span or longer; 2 or 4: shorter), spread by t->lane_block. Sizes are
 * compile-time constants in the tiles below, so this is one or two instructions, not a branch. */
static inline __attribute__((always_inline)) __m256 span_lanes(const float *v, int64_t s,
                                                               const shape_t *t, int per_span,
                                                               __m256i spread) {
    if (per_span == 1) return _mm256_set1_ps(v[(s * t->span) >> t->block_shift]);
    /* movq through __m128i_u: two floats need not be 8-byte aligned (_mm_load_sd's double* load
     * is undefined there; UBSan caught it). */
    __m128 few = per_span == 2 ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i_u *)(v + 2 * s)))
                               : _mm_loadu_ps(v + 4 * s);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(few), spread);
}

/* acc += row i's products with one column's span: lo (low nibbles, or the bytes) and hi (high
 * nibbles) against the row's evens and odds, scaled per lane by a_scale * w_scale. */
#define SPAN_PRODUCT(acc, i, lo, hi, wsl)                                                       \
    do {                                                                                        \
        __m256i d_ = dot_u8s8(_mm256_setzero_si256(), lo, xlo##i, wmax);                         \
        if (bits == 4) d_ = dot_u8s8(d_, hi, xhi##i, wmax);                                     \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d_), _mm256_mul_ps(asl##i, wsl), acc);         \
    } while (0)

/* Column j's span s: its bytes unpacked, and its scales by lane. */
#define SPAN_WEIGHTS(j, LOAD, LANES)                                                            \
    __m256i raw##j = LOAD(b + (c0 + j) * t->col_bytes, s, t);                                   \
    __m256 wsl##j = LANES(scales + (c0 + j) * t->n_blocks, s, t);                               \
    __m256i lo##j = bits == 4 ? _mm256_and_si256(raw##j, low4) : raw##j;                        \
    __m256i hi##j = _mm256_and_si256(_mm256_srli_epi16(raw##j, 4), low4)

/* Row i of the tile's span s (a tile of fewer rows reads row 0 again: never used, and dropped
 * by the compiler, since `rows` is a constant in each copy of tile_int8). */
#define ROW_INPUTS(i, LANES)                                                                    \
    const int64_t row##i = r0 + (i < rows ? i : 0);                                             \
    const int8_t *x##i = xq + row##i * xq_stride + s * t->span;                                 \
    __m256 asl##i = LANES(ascale + row##i * t->n_blocks, s, t);                                 \
    __m256i xlo##i = _mm256_loadu_si256((const __m256i *)x##i);                                 \
    __m256i xhi##i = bits == 4 ? _mm256_loadu_si256((const __m256i *)(x##i + 32)) : xlo##i

#define FAST_LOAD(col, s, t) _mm256_loadu_si256((const __m256i *)((col) + (s) * 32))
#define FAST_LANES(v, s, t) span_lanes(v, s, t, per_span, spread)

/* y[r, c] = sum - the zero points' term (blksum[r] . zp[c] * scales[c], MLAS's BlkSum). */
static inline void store_int8(float *y, int64_t n, const float *blksum, const float *scales,
                              const float *zp, const shape_t *t, int64_t r, int64_t c,
                              __m256 sum) {
    const float *bs = blksum + r * t->n_blocks, *ws = scales + c * t->n_blocks;
    float corr = 0.0f;
    if (zp) {
        corr = dot3(bs, zp + c * t->n_blocks, ws, t->n_blocks);
    } else {
        float zp_default = (float)(1 << (t->bits - 1));
        for (int64_t blk = 0; blk < t->n_blocks; blk++) corr += bs[blk] * (zp_default * ws[blk]);
    }
    y[r * n + c] = hsum(sum) - corr;
}

/* y[r, c] -= the zero points' term, for a value summed by rest_1x1. */
static inline void store_int8_add(float *y, int64_t n, const float *blksum, const float *scales,
                                  const float *zp, const shape_t *t, int64_t r, int64_t c) {
    float sum = y[r * n + c];
    store_int8(y, n, blksum, scales, zp, t, r, c, _mm256_setzero_ps());
    y[r * n + c] += sum;
}

/* y[0 .. 4) = the sums of four accumulators of eight floats (two rounds of hadd). */
static inline void store_sums4(float *y, __m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_storeu_ps(y, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* The first column of the tile after the one at c0 (that one's own when it is the last): its
 * bytes are fetched while this tile computes. A decoder step streams every weight once, from
 * memory, and the hardware prefetcher alone kept one thread at 8 GB/s (SmolLM2-135M's 211
 * products at one row, one thread: 12.6 -> 9.6 ms). */
static inline const uint8_t *next_tile(const uint8_t *b, const shape_t *t, int64_t c0,
                                       int64_t n) {
    return b + (c0 + 8 <= n ? c0 + 4 : c0) * t->col_bytes;
}

/* y[r, c0 .. c0 + 4) from a tile's four accumulators: the zero points' terms taken off them 8
 * blocks at a time, then the four reduced together (two rounds of hadd). One column at a time
 * (store_int8) took a quarter of the kernel's time at K = 576 (SmolLM2-135M: 18 blocks). */
static inline void store_int8_x4(float *y, int64_t n, const float *blksum, const float *scales,
                                 const float *zp, const shape_t *t, int64_t r, int64_t c0,
                                 __m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const int32_t words[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const float *bs = blksum + r * t->n_blocks;
    const __m256 zp_default = _mm256_set1_ps((float)(1 << (t->bits - 1)));
    for (int64_t q = 0; q < t->n_blocks; q += 8) {
        int64_t left = t->n_blocks - q < 8 ? t->n_blocks - q : 8;
        __m256i mask = _mm256_loadu_si256((const __m256i *)(words + 8 - left));
        __m256 bsv = _mm256_maskload_ps(bs + q, mask);
#define ZP_TERM(acc, j)                                                                         \
    do {                                                                                        \
        int64_t at_ = (c0 + j) * t->n_blocks + q;                                               \
        __m256 zz_ = zp ? _mm256_maskload_ps(zp + at_, mask) : zp_default;                      \
        acc = _mm256_fnmadd_ps(bsv, _mm256_mul_ps(zz_, _mm256_maskload_ps(scales + at_, mask)), \
                               acc);                                                            \
    } while (0)
        ZP_TERM(a0, 0); ZP_TERM(a1, 1); ZP_TERM(a2, 2); ZP_TERM(a3, 3);
#undef ZP_TERM
    }
    store_sums4(y + r * n + c0, a0, a1, a2, a3);
}

/* Tiles of rows x 4 columns at level 4 (rows 1, 2, or 4 on AVX-512): accumulators named, so
 * that they stay in registers (an array of them stayed on the stack: 2.3x slower); B's span
 * unpacked once per tile. The whole spans run with unchecked loads; a short last span (K not a
 * multiple of the span) takes the checked ones. Column j: its span unpacked, then multiplied
 * by each row's. */
#define SPAN_COLUMN(j, LOAD, LANES)                                                             \
    do {                                                                                        \
        SPAN_WEIGHTS(j, LOAD, LANES);                                                           \
        SPAN_PRODUCT(a##j, 0, lo##j, hi##j, wsl##j);                                            \
        if (rows >= 2) SPAN_PRODUCT(b##j, 1, lo##j, hi##j, wsl##j);                             \
        if (rows == 4) {                                                                        \
            SPAN_PRODUCT(e##j, 2, lo##j, hi##j, wsl##j);                                        \
            SPAN_PRODUCT(f##j, 3, lo##j, hi##j, wsl##j);                                        \
        }                                                                                       \
    } while (0)

#define TILE_SPAN(LOAD, LANES)                                                                  \
    do {                                                                                        \
        ROW_INPUTS(0, LANES); ROW_INPUTS(1, LANES); ROW_INPUTS(2, LANES); ROW_INPUTS(3, LANES); \
        SPAN_COLUMN(0, LOAD, LANES); SPAN_COLUMN(1, LOAD, LANES);                               \
        SPAN_COLUMN(2, LOAD, LANES); SPAN_COLUMN(3, LOAD, LANES);                               \
    } while (0)

static inline __attribute__((always_inline)) void tile_int8(
    const int8_t *xq, const float *ascale, const float *blksum, int64_t xq_stride,
    const uint8_t *b, const float *scales, const float *zp, float *y, int64_t n,
    const shape_t *t, int64_t r0, int64_t c0, int rows, int bits, int per_span) {
    const int wmax = (1 << bits) - 1;
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i spread = _mm256_loadu_si256((const __m256i *)t->lane_block);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m256 e0 = a0, e1 = a0, e2 = a0, e3 = a0;
    __m256 f0 = a0, f1 = a0, f2 = a0, f3 = a0;
    const uint8_t *next = next_tile(b, t, c0, n);
    for (int64_t s = 0; s < t->whole_spans; s++) {
        for (int j = 0; j < 4; j++)
            _mm_prefetch((const char *)(next + j * t->col_bytes + s * 32), _MM_HINT_T0);
        TILE_SPAN(FAST_LOAD, FAST_LANES);
    }
    store_int8_x4(y, n, blksum, scales, zp, t, r0, c0, a0, a1, a2, a3);
    if (rows >= 2) store_int8_x4(y, n, blksum, scales, zp, t, r0 + 1, c0, b0, b1, b2, b3);
    if (rows == 4) {
        store_int8_x4(y, n, blksum, scales, zp, t, r0 + 2, c0, e0, e1, e2, e3);
        store_int8_x4(y, n, blksum, scales, zp, t, r0 + 3, c0, f0, f1, f2, f3);
    }
}

/* y[r0, c0] += the products of the spans from `first` on, with checked loads: the short last span
 * of the tiles above, and every span of the columns past the last four. */
static void rest_1x1(const int8_t *xq, const float *ascale, int64_t xq_stride, const uint8_t *b,
                     const float *scales, float *y, int64_t n, const shape_t *t, int64_t r0,
                     int64_t c0, int bits, int64_t first) {
    const int wmax = (1 << bits) - 1, rows = 1;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t s = first; s < t->n_spans; s++) {
        ROW_INPUTS(0, lanes);
        SPAN_WEIGHTS(0, load_span, lanes);
        SPAN_PRODUCT(a0, 0, lo0, hi0, wsl0);
    }
    y[r0 * n + c0] += hsum(a0);
}

/* Columns [n0, n1) of rows [0, m) at level 4. xq/ascale/blksum: the rows prepared above, with
 * row strides xq_stride bytes and n_blocks floats. Four columns at a time: one accumulator chain
 * per column is latency-bound (a prototype measured 1.2-1.6x slower than MLAS on 8192 x 2048). */
void KERNEL(tm_nbits_columns_int8)(const int8_t *xq, const float *ascale, const float *blksum,
                                   int64_t xq_stride, int64_t m, const uint8_t *b,
                                   const float *scales, const float *zp, float *y, int64_t n,
                                   int64_t k, int64_t block, int bits, int64_t n0, int64_t n1) {
    shape_t t = shape_of(k, block, bits);
    int per_span = block >= t.span ? 1 : (int)(t.span / block);
#define ARGS xq, ascale, blksum, xq_stride, b, scales, zp, y, n, &t
#define TILES(rows)                                                                             \
    do {                                                                                        \
        if (bits == 4) {                                                                        \
            if (per_span == 1) tile_int8(ARGS, r0, c0, rows, 4, 1);                             \
            else if (per_span == 2) tile_int8(ARGS, r0, c0, rows, 4, 2);                        \
            else tile_int8(ARGS, r0, c0, rows, 4, 4);                                           \
        } else {                                                                                \
            if (per_span == 1) tile_int8(ARGS, r0, c0, rows, 8, 1);                             \
            else tile_int8(ARGS, r0, c0, rows, 8, 2);                                           \
        }                                                                                       \
    } while (0)
    int64_t c0 = n0;
    for (; c0 + 4 <= n1; c0 += 4) {
        int64_t r0 = 0;
#if defined(__AVX512VL__)
        /* 16 accumulators and 8 rows' worth of A need AVX-512's 32 vector registers */
        for (; r0 + 4 <= m; r0 += 4) TILES(4);
#endif
        for (; r0 + 2 <= m; r0 += 2) TILES(2);
        if (r0 < m) TILES(1);
    }
    if (t.whole_spans < t.n_spans) /* K's short last span */
        for (int64_t c = n0; c < c0; c++)
            for (int64_t r = 0; r < m; r++)
                rest_1x1(xq, ascale, xq_stride, b, scales, y, n, &t, r, c, bits, t.whole_spans);
    for (; c0 < n1; c0++) {
        for (int64_t r0 = 0; r0 < m; r0++) {
            y[r0 * n + c0] = 0.0f;
            rest_1x1(xq, ascale, xq_stride, b, scales, y, n, &t, r0, c0, bits, 0);
            store_int8_add(y, n, blksum, scales, zp, &t, r0, c0);
        }
    }
#undef TILES
#undef ARGS
}

#define NC 4
#define NR 2

/* Eight weights (group g of 4 of a 32-byte half) as f32. */
static inline __m256 group_f32(__m256i w, int g) {
    __m128i half = g < 2 ? _mm256_castsi256_si128(w) : _mm256_extracti128_si256(w, 1);
    if (g & 1) half = _mm_srli_si128(half, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(half));
}

#if defined(__AVX512F__) && defined(__AVX512VL__)
/* 4-bit weights in blocks of 32 or more at levels 0-3, on AVX-512: a block's sixteen possible
 * weights, (q - zp) * scale, are computed once into a 16-float table, and sixteen codes at a time
 * are looked up in it (vpermps), rather than each code converted, offset and scaled: 1 lookup
 * where there were 4 operations per 8 weights. bench/matmul_nbits.py --level 0 --models smollm2:
 * onnxruntime/ours, geometric mean over 1, 4 and 16 rows, 0.55 -> 0.98 (the 49152 x 576 lm_head
 * at one row 3.2 -> 1.5 ms; XLA's path was faster than the old form at one row, 0.63-0.74x).
 * The weights are the same f32 values either way. Half a span (16 bytes: 32 weights, one block)
 * at a time: its low nibbles are the evens of its 32 elements, its high ones the odds. */
static inline __attribute__((always_inline)) __m256 fold16(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static inline __attribute__((always_inline)) void tile_f32_lut(
    const float *xp, int64_t xp_stride, const uint8_t *b, const float *scales, const float *zp,
    float *y, int64_t n, const shape_t *t, int64_t r0, int64_t c0, int rows) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m128i low4 = _mm_set1_epi8(15);
    __m512 acc[4][4];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
    const uint8_t *next = next_tile(b, t, c0, n);
    for (int64_t half = 0; half * 16 < t->col_bytes; half++) {
        int64_t blk = (half * 32) >> t->block_shift;
        if (!(half & 3))
            for (int j = 0; j < 4; j++)
                _mm_prefetch((const char *)(next + j * t->col_bytes + half * 16), _MM_HINT_T0);
        __m512 xe[4], xo[4];
        for (int i = 0; i < rows; i++) {
            const float *x = xp + (r0 + i) * xp_stride + (half >> 1) * 64 + (half & 1) * 16;
            xe[i] = _mm512_loadu_ps(x);
            xo[i] = _mm512_loadu_ps(x + 32);
        }
        for (int j = 0; j < 4; j++) {
            int64_t at = (c0 + j) * t->n_blocks + blk;
            const uint8_t *bytes = b + (c0 + j) * t->col_bytes + half * 16;
            __m128i raw = _mm_loadu_si128((const __m128i *)bytes);
            __m512 table = _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(zp ? zp[at] : 8.0f)),
                                         _mm512_set1_ps(scales[at]));
            __m512 we = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_and_si128(raw, low4)),
                                              table);
            __m512 wo = _mm512_permutexvar_ps(
                _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), low4)), table);
            for (int i = 0; i < rows; i++)
                acc[i][j] = _mm512_fmadd_ps(wo, xo[i], _mm512_fmadd_ps(we, xe[i], acc[i][j]));
        }
    }
    for (int i = 0; i < rows; i++)
        store_sums4(y + (r0 + i) * n + c0, fold16(acc[i][0]), fold16(acc[i][1]),
                     fold16(acc[i][2]), fold16(acc[i][3]));
}

/* Columns from n0 on in whole tiles of 4 by the tables above; returns the first column left. */
static int64_t columns_f32_lut(const float *xp, int64_t xp_stride, int64_t m, const uint8_t *b,
                               const float *scales, const float *zp, float *y, int64_t n,
                               const shape_t *t, int64_t n0, int64_t n1) {
    int64_t c0 = n0;
    for (; c0 + 4 <= n1; c0 += 4) {
        int64_t r0 = 0;
        for (; r0 + 4 <= m; r0 += 4)
            tile_f32_lut(xp, xp_stride, b, scales, zp, y, n, t, r0, c0, 4);
        for (; r0 < m; r0++) tile_f32_lut(xp, xp_stride, b, scales, zp, y, n, t, r0, c0, 1);
    }
    return c0;
}
#endif

/* Columns [n0, n1) of rows [0, m) at levels 0-3: (q - zp) * scale in registers, f32 products.
 * A span's groups of eight: 4 bits, group g of the low nibbles (evens) and of the high ones
 * (odds) covers elements [16g, 16g + 16); 8 bits, elements [8g, 8g + 8). */
void KERNEL(tm_nbits_columns_f32)(const float *xp, int64_t xp_stride, int64_t m,
                                  const uint8_t *b, const float *scales, const float *zp,
                                  float *y, int64_t n, int64_t k, int64_t block, int bits,
                                  int64_t n0, int64_t n1) {
    shape_t t = shape_of(k, block, bits);
#if defined(__AVX512F__) && defined(__AVX512VL__)
    if (bits == 4 && block >= 32)
        n0 = columns_f32_lut(xp, xp_stride, m, b, scales, zp, y, n, &t, n0, n1);
#endif
    const __m256i low4 = _mm256_set1_epi8(15);
    float zp_default = (float)(1 << (bits - 1));
    int per_group = bits == 4 ? 16 : 8;
    for (int64_t c0 = n0; c0 < n1; c0 += NC) {
        int nc = n1 - c0 < NC ? (int)(n1 - c0) : NC;
        for (int64_t r0 = 0; r0 < m; r0 += NR) {
            int nr = m - r0 < NR ? (int)(m - r0) : NR;
            __m256 acc[NR][NC];
            for (int i = 0; i < NR; i++)
                for (int j = 0; j < NC; j++) acc[i][j] = _mm256_setzero_ps();
            for (int64_t s = 0; s < t.n_spans; s++) {
                for (int j = 0; j < nc; j++) {
                    const float *sc = scales + (c0 + j) * t.n_blocks;
                    const float *z = zp ? zp + (c0 + j) * t.n_blocks : 0;
                    __m256i raw = load_span(b + (c0 + j) * t.col_bytes, s, &t);
                    __m256i lo = bits == 4 ? _mm256_and_si256(raw, low4) : raw;
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                    for (int g = 0; g < 4; g++) {
                        int64_t blk = (s * t.span + (int64_t)g * per_group) / t.block;
                        if (blk >= t.n_blocks) break;
                        __m256 zv = _mm256_set1_ps(z ? z[blk] : zp_default);
                        __m256 sv = _mm256_set1_ps(sc[blk]);
                        __m256 w0 = _mm256_mul_ps(_mm256_sub_ps(group_f32(lo, g), zv), sv);
                        __m256 w1 = bits == 4
                            ? _mm256_mul_ps(_mm256_sub_ps(group_f32(hi, g), zv), sv) : w0;
                        for (int i = 0; i < nr; i++) {
                            const float *x = xp + (r0 + i) * xp_stride + s * t.span;
                            acc[i][j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + 8 * g), acc[i][j]);
                            if (bits == 4)
                                acc[i][j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 32 + 8 * g),
                                                            acc[i][j]);
                        }
                    }
                }
            }
            for (int j = 0; j < nc; j++)
                for (int i = 0; i < nr; i++) y[(r0 + i) * n + c0 + j] = hsum(acc[i][j]);
        }
    }
}
