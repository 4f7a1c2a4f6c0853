// The vectorized kernels, written once against the SIMD abstraction `Vec` (one ISA's vector)
// and ScalarVec (tails). simd_kernels.cpp includes this file once per ISA, inside that ISA's
// target region and namespace; make_table() hands the instantiations to the dispatcher.

template <class W, int kKind>
inline typename W::V load_elems(const void* base, int64_t i) {
  if constexpr (kKind == kElemF32) {
    return W::load(static_cast<const float*>(base) + i);
  } else if constexpr (kKind == kElemF16) {
    return W::load_fp16(static_cast<const uint16_t*>(base) + i);
  } else {
    return W::load_bf16(static_cast<const uint16_t*>(base) + i);
  }
}

template <class W, int kKind>
inline void store_elems(void* base, int64_t i, typename W::V x) {
  if constexpr (kKind == kElemF32) {
    W::store(static_cast<float*>(base) + i, x);
  } else if constexpr (kKind == kElemF16) {
    W::store_fp16(static_cast<uint16_t*>(base) + i, x);
  } else if constexpr (kKind == kElemBf16) {
    W::store_bf16(static_cast<uint16_t*>(base) + i, x);
  }
}

// The step's scalars broadcast once per range, kept in registers by the loop.
template <class W>
struct AdamConsts {
  using V = typename W::V;
  V inv_scale, l2, b1, omb1, b2, omb2, inv_sqrt_bc2, eps, decay, step_size;
  bool has_l2, has_decay;
  explicit AdamConsts(const AdamScalars& s)
      : inv_scale(W::set1(s.inv_grad_scale)),
        l2(W::set1(s.l2_decay)),
        b1(W::set1(s.beta1)),
        omb1(W::set1(s.one_minus_beta1)),
        b2(W::set1(s.beta2)),
        omb2(W::set1(s.one_minus_beta2)),
        inv_sqrt_bc2(W::set1(s.inv_sqrt_bc2)),
        eps(W::set1(s.eps)),
        decay(W::set1(s.decay_factor)),
        step_size(W::set1(s.step_size)),
        has_l2(s.has_l2),
        has_decay(s.has_decay) {}
};

// One vector of the Adam step; the order of operations is the reference's (adam.h).
template <class W, int kGrad, int kOut>
inline void adam_elems(const AdamConsts<W>& c, float* p, const void* g, float* m, float* v,
                       void* out, int64_t i) {
  using V = typename W::V;
  V gv = W::mul(load_elems<W, kGrad>(g, i), c.inv_scale);
  V pv = W::load(p + i);
  if (c.has_l2) gv = W::fmadd(c.l2, pv, gv);
  const V mv = W::fmadd(W::load(m + i), c.b1, W::mul(gv, c.omb1));
  const V vv = W::fmadd(W::load(v + i), c.b2, W::mul(W::mul(gv, gv), c.omb2));
  const V denom = W::fmadd(W::sqrt(vv), c.inv_sqrt_bc2, c.eps);
  if (c.has_decay) pv = W::mul(pv, c.decay);
  pv = W::fnmadd(c.step_size, W::div(mv, denom), pv);
  W::store(p + i, pv);
  W::store(m + i, mv);
  W::store(v + i, vv);
  if constexpr (kOut != kElemNone) store_elems<W, kOut>(out, i, pv);
}

template <int kGrad, int kOut>
void adam_range(const AdamScalars& s, const AdamArgs& a, int64_t begin, int64_t end) {
  float* const p = a.param;
  const void* const g = a.grad;
  float* const m = a.exp_avg;
  float* const v = a.exp_avg_sq;
  void* const out = a.out16;
  int64_t i = begin;
  const AdamConsts<Vec> c(s);
  for (; i + Vec::kWidth <= end; i += Vec::kWidth)
    adam_elems<Vec, kGrad, kOut>(c, p, g, m, v, out, i);
  if (i == end) return;
  // The tail runs through the same vector code on a zero-padded copy: an element's update then
  // does not depend on where it sits (a vector lane fuses multiply-adds, a scalar would not), so
  // a parameter's copies on two pipeline stages, or one model at two shard layouts, stay equal.
  constexpr int64_t kW = Vec::kWidth;
  const int64_t n = end - i;
  constexpr size_t kGradBytes = kGrad == kElemF32 ? 4 : 2, kOutBytes = kOut == kElemF32 ? 4 : 2;
  alignas(64) float pb[kW] = {}, mb[kW] = {}, vb[kW] = {};
  alignas(64) unsigned char gb[kW * 4] = {}, ob[kW * 4] = {};
  std::memcpy(pb, p + i, n * sizeof(float));
  std::memcpy(mb, m + i, n * sizeof(float));
  std::memcpy(vb, v + i, n * sizeof(float));
  std::memcpy(gb, static_cast<const unsigned char*>(g) + i * kGradBytes, n * kGradBytes);
  adam_elems<Vec, kGrad, kOut>(c, pb, gb, mb, vb, ob, 0);
  std::memcpy(p + i, pb, n * sizeof(float));
  std::memcpy(m + i, mb, n * sizeof(float));
  std::memcpy(v + i, vb, n * sizeof(float));
  if constexpr (kOut != kElemNone)
    std::memcpy(static_cast<unsigned char*>(out) + i * kOutBytes, ob, n * kOutBytes);
}

// Adam's access pattern (load g, p, m, v; store p, m, v) with one add per output.
template <class W>
inline void floor_elems(float* p, const float* g, float* m, float* v, int64_t i) {
  using V = typename W::V;
  const V gv = W::load(g + i);
  const V pv = W::load(p + i);
  const V mv = W::load(m + i);
  const V vv = W::load(v + i);
  W::store(p + i, W::add(pv, gv));
  W::store(m + i, W::add(mv, gv));
  W::store(v + i, W::add(vv, gv));
}

void floor_range(const AdamArgs& a, int64_t begin, int64_t end) {
  float* const p = a.param;
  const float* const g = static_cast<const float*>(a.grad);
  float* const m = a.exp_avg;
  float* const v = a.exp_avg_sq;
  int64_t i = begin;
  for (; i + Vec::kWidth <= end; i += Vec::kWidth) floor_elems<Vec>(p, g, m, v, i);
  for (; i < end; ++i) floor_elems<ScalarVec>(p, g, m, v, i);
}

// Non-finite detection: y * 0 is 0 for finite y and NaN for inf/NaN; the sum stays NaN.
template <int kIn>
bool unscale_range(const void* in, float* out, float inv_scale, int64_t begin, int64_t end) {
  int64_t i = begin;
  Vec::V acc = Vec::zero();
  const Vec::V zero = Vec::zero();
  const Vec::V inv = Vec::set1(inv_scale);
  for (; i + Vec::kWidth <= end; i += Vec::kWidth) {
    const Vec::V y = Vec::mul(load_elems<Vec, kIn>(in, i), inv);
    Vec::store(out + i, y);
    acc = Vec::add(acc, Vec::mul(y, zero));
  }
  float acc_tail = 0.0f;
  for (; i < end; ++i) {
    const float y = load_elems<ScalarVec, kIn>(in, i) * inv_scale;
    out[i] = y;
    acc_tail += y * 0.0f;
  }
  return Vec::any_nan(acc) || ScalarVec::any_nan(acc_tail);
}

template <int kIn>
bool non_finite_range(const void* in, int64_t begin, int64_t end) {
  int64_t i = begin;
  Vec::V acc = Vec::zero();
  const Vec::V zero = Vec::zero();
  for (; i + Vec::kWidth <= end; i += Vec::kWidth) {
    acc = Vec::add(acc, Vec::mul(load_elems<Vec, kIn>(in, i), zero));
  }
  float acc_tail = 0.0f;
  for (; i < end; ++i) acc_tail += load_elems<ScalarVec, kIn>(in, i) * 0.0f;
  return Vec::any_nan(acc) || ScalarVec::any_nan(acc_tail);
}

template <int kIn>
double sum_squares_range(const void* in, int64_t begin, int64_t end) {
  int64_t i = begin;
  Vec::DAcc acc = Vec::dacc_zero();
  for (; i + Vec::kWidth <= end; i += Vec::kWidth) {
    Vec::dacc_add_squares(acc, load_elems<Vec, kIn>(in, i));
  }
  double tail = 0.0;
  for (; i < end; ++i) ScalarVec::dacc_add_squares(tail, load_elems<ScalarVec, kIn>(in, i));
  return Vec::dacc_sum(acc) + tail;
}

void scale_range(float* data, float factor, int64_t begin, int64_t end) {
  int64_t i = begin;
  const Vec::V f = Vec::set1(factor);
  for (; i + Vec::kWidth <= end; i += Vec::kWidth)
    Vec::store(data + i, Vec::mul(Vec::load(data + i), f));
  for (; i < end; ++i) data[i] *= factor;
}

template <int kOut>
void to_half16_range(const void* in, void* out, int64_t begin, int64_t end) {
  const float* src = static_cast<const float*>(in);
  int64_t i = begin;
  for (; i + Vec::kWidth <= end; i += Vec::kWidth)
    store_elems<Vec, kOut>(out, i, Vec::load(src + i));
  for (; i < end; ++i) store_elems<ScalarVec, kOut>(out, i, src[i]);
}

template <int kIn>
void from_half16_range(const void* in, void* out, int64_t begin, int64_t end) {
  float* dst = static_cast<float*>(out);
  int64_t i = begin;
  for (; i + Vec::kWidth <= end; i += Vec::kWidth) Vec::store(dst + i, load_elems<Vec, kIn>(in, i));
  for (; i < end; ++i) dst[i] = load_elems<ScalarVec, kIn>(in, i);
}

template <int kGrad>
void fill_adam_row(KernelTable& t) {
  t.adam[kGrad][kElemF32] = nullptr;
  t.adam[kGrad][kElemF16] = &adam_range<kGrad, kElemF16>;
  t.adam[kGrad][kElemBf16] = &adam_range<kGrad, kElemBf16>;
  t.adam[kGrad][kElemNone] = &adam_range<kGrad, kElemNone>;
}

KernelTable make_table() {
  KernelTable t{};
  fill_adam_row<kElemF32>(t);
  fill_adam_row<kElemF16>(t);
  fill_adam_row<kElemBf16>(t);
  t.access_floor = &floor_range;
  t.unscale[kElemF32] = &unscale_range<kElemF32>;
  t.unscale[kElemF16] = &unscale_range<kElemF16>;
  t.unscale[kElemBf16] = &unscale_range<kElemBf16>;
  t.non_finite[kElemF32] = &non_finite_range<kElemF32>;
  t.non_finite[kElemF16] = &non_finite_range<kElemF16>;
  t.non_finite[kElemBf16] = &non_finite_range<kElemBf16>;
  t.sum_squares[kElemF32] = &sum_squares_range<kElemF32>;
  t.sum_squares[kElemF16] = &sum_squares_range<kElemF16>;
  t.sum_squares[kElemBf16] = &sum_squares_range<kElemBf16>;
  t.scale = &scale_range;
  t.to_half16[kElemF16] = &to_half16_range<kElemF16>;
  t.to_half16[kElemBf16] = &to_half16_range<kElemBf16>;
  t.from_half16[kElemF16] = &from_half16_range<kElemF16>;
  t.from_half16[kElemBf16] = &from_half16_range<kElemBf16>;
  return t;
}
