/* Picks the instruction set of the native kernels at run time: AVX-512 VNNI, AVX-VNNI, or AVX2 +
 * FMA (the floor: without it the library is not loaded and XLA's path serves). */
#include <stddef.h>

#include "kernels.h"

#define KERNEL_SET(suffix)                                                                     \
    {#suffix + 1,                  tm_nbits_prepare_int8##suffix,                               \
     tm_nbits_prepare_f32##suffix,  tm_nbits_columns_int8##suffix,                               \
     tm_nbits_columns_f32##suffix,  tm_int8_prepare##suffix,                                     \
     tm_int8_columns##suffix,       tm_w8_columns##suffix}

static const tm_kernels AVX512VNNI = KERNEL_SET(_avx512vnni);
static const tm_kernels AVXVNNI = KERNEL_SET(_avxvnni);
static const tm_kernels AVX2 = KERNEL_SET(_avx2);

const tm_kernels *tm_kernels_select(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
        return &AVX512VNNI;
    }
    if (__builtin_cpu_supports("avxvnni")) return &AVXVNNI;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &AVX2;
    return NULL;
}

const char *tm_kernels_isa(void) {
    const tm_kernels *k = tm_kernels_select();
    return k ? k->name : "";
}
