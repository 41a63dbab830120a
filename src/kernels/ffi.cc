// XLA FFI handlers of the native kernels (jax.ffi.ffi_call targets, registered by
// backends/jax_kernels.py). C++ only because XLA's FFI header is; the kernels are C.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

extern "C" {
#include "kernels.h"
}

namespace ffi = xla::ffi;

namespace {

const tm_kernels *Kernels() {
  static const tm_kernels *kernels = tm_kernels_select();
  return kernels;
}

// Runs fn(begin, end) over [0, n) in pieces of `grain`, on the caller and XLA's intra-op pool.
// Work is claimed piece by piece, so a pool busy elsewhere only means the caller does more; the
// shared counters outlive the call (a task the pool starts late finds nothing left to do). The
// caller is one of the threads: with as many helpers as the pool has threads, one more thread
// than cores competed for them.
template <typename F>
void ParallelFor(ffi::ThreadPool &pool, int64_t n, int64_t grain, F fn) {
  int64_t pieces = (n + grain - 1) / grain;
  int64_t helpers = std::min<int64_t>(pool.num_threads() - 1, pieces - 1);
  if (helpers <= 0) {
    fn(0, n);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0}, done{0};
  };
  auto state = std::make_shared<State>();
  auto work = [state, n, grain, pieces, fn]() {
    for (int64_t p; (p = state->next.fetch_add(1)) < pieces;) {
      fn(p * grain, std::min(n, (p + 1) * grain));
      state->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t i = 0; i < helpers; i++) pool.Schedule(decltype(work)(work));
  work();
  while (state->done.load(std::memory_order_acquire) < pieces) {
    __builtin_ia32_pause();
  }
}

// Below this many weight bytes x rows an 8-bit kernel's product runs on the calling thread
// alone: waking XLA's pool cost more than it saved in one-product benches (bench/matmul_nbits.py,
// 2 cores, one row: 3072x1024 4-bit 179 us split from 64 KB, 122 us alone; the 49152x576 lm_head
// 1.33 ms alone, 1.03-1.09 ms split). Not measured again in a whole model for these kernels.
constexpr int64_t kParallelWork = int64_t{1} << 21;

// MatMulNBits splits from far less: in a decoder step, where one product follows another and
// the pool's threads are awake, two threads stream the weights from memory at twice one
// thread's rate, which the one-product bench above does not show (bench/generation.py
// --shape smollm2 --precision int4: 45.7 -> 51.9 tok/s at one row with 64 KB, the same at
// 16-128 KB).
constexpr int64_t kNBitsParallelWork = int64_t{1} << 16;

// Columns per piece of the pool for a product over an 8-bit B [k, n] at m rows: whole tiles of 16.
int64_t TileGrain(int64_t k, int64_t m) {
  return std::max<int64_t>(16, kParallelWork / std::max<int64_t>(1, k * m)) / 16 * 16;
}

// The checks the 8-bit weight kernels share: the kernels are there, B is int8 (*is_signed) or
// uint8, and K is positive (K = 0 would leave Y unwritten: the callers take XLA's path there).
ffi::Error CheckInt8Weight(const ffi::AnyBuffer &b, int64_t k, const char *kernel,
                           bool *is_signed) {
  if (Kernels() == nullptr) {
    return ffi::Error::Internal("transmuter kernels: this CPU lacks AVX2/FMA");
  }
  *is_signed = b.element_type() == ffi::DataType::S8;
  if (!*is_signed && b.element_type() != ffi::DataType::U8) {
    return ffi::Error::InvalidArgument(std::string(kernel) + " kernel: B must be int8 or uint8");
  }
  if (k <= 0) return ffi::Error::InvalidArgument(std::string(kernel) + " kernel: K must be > 0");
  return ffi::Error::Success();
}

ffi::Error MatMulNBits(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> a, ffi::AnyBuffer b,
                       ffi::Buffer<ffi::F32> scales, ffi::Buffer<ffi::F32> zero_points,
                       ffi::ResultBuffer<ffi::F32> y, int64_t n, int64_t k, int64_t bits,
                       int64_t block_size, int64_t accuracy_level, bool has_zero_points) {
  const tm_kernels *kern = Kernels();
  if (kern == nullptr) return ffi::Error::Internal("transmuter kernels: this CPU lacks AVX2/FMA");
  int64_t m = k ? a.element_count() / k : 0;
  if (m == 0 || n == 0) return ffi::Error::Success();
  int64_t n_blocks = (k + block_size - 1) / block_size;
  int64_t stride = (n_blocks * block_size + 63) / 64 * 64;  // whole spans of B (matmul_nbits.c)
  const float *a_data = a.typed_data();
  auto b_data = static_cast<const uint8_t *>(b.untyped_data());
  const float *zp = has_zero_points ? zero_points.typed_data() : nullptr;
  float *out = y->typed_data();
  int64_t col_bytes = n_blocks * block_size * bits / 8;
  int64_t grain =
      std::max<int64_t>(16, kNBitsParallelWork / std::max<int64_t>(1, col_bytes * m));
  grain = (grain + 3) / 4 * 4;
  int b_bits = static_cast<int>(bits);
  if (accuracy_level == 4) {
    std::vector<int8_t> xq(m * stride);
    std::vector<float> ascale(m * n_blocks), blksum(m * n_blocks);
    for (int64_t r = 0; r < m; r++) {
      kern->prepare_int8(a_data + r * k, k, block_size, b_bits, xq.data() + r * stride,
                         ascale.data() + r * n_blocks, blksum.data() + r * n_blocks);
    }
    ParallelFor(pool, n, grain, [&](int64_t n0, int64_t n1) {
      kern->columns_int8(xq.data(), ascale.data(), blksum.data(), stride, m, b_data,
                         scales.typed_data(), zp, out, n, k, block_size, b_bits, n0, n1);
    });
  } else {
    std::vector<float> xp(m * stride);
    for (int64_t r = 0; r < m; r++) {
      kern->prepare_f32(a_data + r * k, k, b_bits, xp.data() + r * stride);
    }
    ParallelFor(pool, n, grain, [&](int64_t n0, int64_t n1) {
      kern->columns_f32(xp.data(), stride, m, b_data, scales.typed_data(), zp, out, n, k,
                        block_size, b_bits, n0, n1);
    });
  }
  return ffi::Error::Success();
}

// MatMulInteger's A (int32, less its zero point) @ (B - zb): B int8 or uint8 [k, n] as the file
// holds it, zb int32 [n]. Columns are split over the pool in whole tiles of 16 (matmul_integer.c).
ffi::Error MatMulInteger(ffi::ThreadPool pool, ffi::Buffer<ffi::S32> a, ffi::AnyBuffer b,
                         ffi::Buffer<ffi::S32> zb, ffi::ResultBuffer<ffi::S32> y, int64_t n,
                         int64_t k) {
  bool b_signed;
  ffi::Error error = CheckInt8Weight(b, k, "MatMulInteger", &b_signed);
  if (error.failure()) return error;
  const tm_kernels *kern = Kernels();
  int64_t m = a.element_count() / k;
  if (m == 0 || n == 0) return ffi::Error::Success();
  int64_t stride = (k + 1) / 2;
  std::vector<uint32_t> pairs(m * stride);
  for (int64_t r = 0; r < m; r++) {
    kern->int8_prepare(a.typed_data() + r * k, k, pairs.data() + r * stride);
  }
  auto b_data = static_cast<const uint8_t *>(b.untyped_data());
  int32_t *out = y->typed_data();
  ParallelFor(pool, n, TileGrain(k, m), [&](int64_t n0, int64_t n1) {
    kern->int8_columns(pairs.data(), stride, m, b_data, b_signed, zb.typed_data(), out, n, k, n0,
                       n1);
  });
  return ffi::Error::Success();
}

// A float32 A [m, k] @ W, W the 8-bit B [k, n] (as the file holds it) dequantized as
// (B - zb) * scale per column (matmul_int8_weight.c). Columns are split over the pool in whole
// panels of 16.
ffi::Error MatMulInt8Weight(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> a, ffi::AnyBuffer b,
                            ffi::Buffer<ffi::S32> zb, ffi::Buffer<ffi::F32> scale,
                            ffi::ResultBuffer<ffi::F32> y, int64_t n, int64_t k) {
  bool b_signed;
  ffi::Error error = CheckInt8Weight(b, k, "int8 weight", &b_signed);
  if (error.failure()) return error;
  const tm_kernels *kern = Kernels();
  int64_t m = a.element_count() / k;
  if (m == 0 || n == 0) return ffi::Error::Success();
  auto b_data = static_cast<const uint8_t *>(b.untyped_data());
  // The pool from the same amount of work as the other kernels: splitting sooner did not pay
  // (bench/int8_weight.py, 2 cores: 1536 x 384 at one row 70 us alone, 96 us split).
  ParallelFor(pool, n, TileGrain(k, m), [&](int64_t n0, int64_t n1) {
    kern->w8_columns(a.typed_data(), m, b_data, b_signed, zb.typed_data(), scale.typed_data(),
                     y->typed_data(), n, k, n0, n1);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(TransmuterMatMulInt8Weight, MatMulInt8Weight,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("n")
                                  .Attr<int64_t>("k"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TransmuterMatMulInteger, MatMulInteger,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("n")
                                  .Attr<int64_t>("k"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(TransmuterMatMulNBits, MatMulNBits,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("n")
                                  .Attr<int64_t>("k")
                                  .Attr<int64_t>("bits")
                                  .Attr<int64_t>("block_size")
                                  .Attr<int64_t>("accuracy_level")
                                  .Attr<bool>("has_zero_points"));
