// Instantiates kernels_body.inl once per SIMD level (scalar, AVX2, AVX-512), each inside its
// target region and namespace, and exposes one KernelTable per level to the dispatcher.
#include <cstdint>
#include <cstring>

#include "kernel_table.h"
#include "simd.h"
#include "vec_scalar.h"

// GCC 12's own AVX-512 intrinsic headers trip -W(maybe-)uninitialized (`__m512 __Y = __Y;`
// placeholders for undefined lanes); the warning is about the compiler's header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace zero::kernels::detail {
namespace scalar {
using Vec = ScalarVec;
#include "kernels_body.inl"
}  // namespace scalar
const KernelTable& scalar_kernel_table() {
  static const KernelTable table = scalar::make_table();
  return table;
}
}  // namespace zero::kernels::detail

#if ZERO_SIMD_X86
ZERO_SIMD_BEGIN(ZERO_SIMD_ISA_AVX2)
namespace zero::kernels::detail::avx2 {
#include "vec_avx2.inl"  // Vec first: the body below uses it

#include "kernels_body.inl"
}  // namespace zero::kernels::detail::avx2
ZERO_SIMD_END

ZERO_SIMD_BEGIN(ZERO_SIMD_ISA_AVX512)
namespace zero::kernels::detail::avx512 {
#include "vec_avx512.inl"  // Vec first: the body below uses it

#include "kernels_body.inl"
}  // namespace zero::kernels::detail::avx512
ZERO_SIMD_END

namespace zero::kernels::detail {
const KernelTable& avx2_kernel_table() {
  static const KernelTable table = avx2::make_table();
  return table;
}
const KernelTable& avx512_kernel_table() {
  static const KernelTable table = avx512::make_table();
  return table;
}
}  // namespace zero::kernels::detail
#endif
