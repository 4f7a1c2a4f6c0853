// Memory estimates against hand-computed bytes: the ZeRO paper's per-rank model states and
// DeepSpeed's estimate_zero{2,3}_model_states_mem_needs (zero_init=False).
#include <catch2/catch.hpp>

#include <zero/engine/memory_estimate.h>
#include <zero/error.h>

using namespace zero;

namespace {
const MemoryEstimateRow& find(const std::vector<MemoryEstimateRow>& rows, int stage, bool opt,
                              bool param) {
  for (const auto& r : rows)
    if (r.stage == stage && r.offload_optimizer == opt && r.offload_param == param) return r;
  FAIL("no row for stage " << stage);
  throw 0;
}
}  // namespace

TEST_CASE("zero_model_state_bytes: the ZeRO paper's formulas (docs/design.md)") {
  for (int n : {1, 2, 3, 4, 8}) {
    const int64_t psi = 1200 * 7;  // divisible by every n above
    // mixed precision: 16P; 4P + 12P/N; 2P + 14P/N; 16P/N
    CHECK(zero_model_state_bytes(0, psi, n, Precision::kFp16).total_bytes() == 16 * psi);
    CHECK(zero_model_state_bytes(1, psi, n, Precision::kBf16).total_bytes() ==
          4 * psi + 12 * psi / n);
    CHECK(zero_model_state_bytes(2, psi, n, Precision::kFp16).total_bytes() ==
          2 * psi + 14 * psi / n);
    CHECK(zero_model_state_bytes(3, psi, n, Precision::kFp16).total_bytes() == 16 * psi / n);
    // fp32: 16P; 8P + 8P/N; 4P + 12P/N; 16P/N
    CHECK(zero_model_state_bytes(0, psi, n, Precision::kFp32).total_bytes() == 16 * psi);
    CHECK(zero_model_state_bytes(1, psi, n, Precision::kFp32).total_bytes() ==
          8 * psi + 8 * psi / n);
    CHECK(zero_model_state_bytes(2, psi, n, Precision::kFp32).total_bytes() ==
          4 * psi + 12 * psi / n);
    CHECK(zero_model_state_bytes(3, psi, n, Precision::kFp32).total_bytes() == 16 * psi / n);
  }
  // Categories, and padding: 10 parameters on 3 ranks -> shards of 4.
  ModelStateBytes b = zero_model_state_bytes(2, 10, 3, Precision::kFp16);
  CHECK(b.parameters_bytes == 20);
  CHECK(b.gradients_bytes == 8);
  CHECK(b.master_params_bytes == 16);
  CHECK(b.optimizer_states_bytes == 32);
  CHECK(zero_model_state_bytes(3, 10, 3, Precision::kFp32).total_bytes() == 64);
  CHECK(zero_model_state_bytes(1, 10, 3, Precision::kFp32).master_params_bytes == 0);
  CHECK_THROWS_AS(zero_model_state_bytes(4, 10, 3, Precision::kFp32), UsageError);
}

TEST_CASE("estimate_memory: 1B params, 1 node x 8 GPUs, fp16") {
  MemoryEstimateOptions o;
  o.total_params = 1000000000;
  o.largest_layer_params = 100000000;
  o.gpus_per_node = 8;
  const auto rows = estimate_memory(o);
  REQUIRE(rows.size() == 8);
  const int64_t host = 48000000000;  // every rank builds the fp32 model: 4 * 1e9 * 8 * 1.5

  const auto& s0 = find(rows, 0, false, false);
  CHECK(s0.device_bytes == 16000000000);
  CHECK(s0.host_bytes == host);
  CHECK(!s0.deepspeed_device_bytes);

  CHECK(find(rows, 1, false, false).device_bytes == 5500000000);  // 4e9 + 12 * 1.25e8
  const auto& s1o = find(rows, 1, true, false);
  CHECK(s1o.device_bytes == 4000000000);  // fp16 params + full fp16 gradients
  CHECK(s1o.device.master_params_bytes == 0);
  CHECK(s1o.host_bytes == host);

  const auto& s2 = find(rows, 2, false, false);
  CHECK(s2.device_bytes == 3750000000);             // 2e9 + 14 * 1.25e8
  CHECK(*s2.deepspeed_device_bytes == 4250000000);  // DeepSpeed: 2P + 18P/N
  CHECK(*s2.deepspeed_host_bytes == host);
  const auto& s2o = find(rows, 2, true, false);
  CHECK(s2o.device_bytes == 2000000000);
  CHECK(*s2o.deepspeed_device_bytes == 2000000000);
  CHECK(*s2o.deepspeed_host_bytes == 48000000000);  // P * max(4 * 8, 16) * 1.5

  const auto& s3 = find(rows, 3, false, false);
  CHECK(s3.device_bytes == 2400000000);             // 16 * 1.25e8 + 4 * 1e8 gathered layer
  CHECK(*s3.deepspeed_device_bytes == 2650000000);  // 4 LL + 18P/N
  const auto& s3o = find(rows, 3, true, false);
  CHECK(s3o.device_bytes == 650000000);  // 2 * 1.25e8 + 4e8
  CHECK(*s3o.deepspeed_device_bytes == 650000000);
  CHECK(*s3o.deepspeed_host_bytes == host);
  const auto& s3p = find(rows, 3, true, true);
  CHECK(s3p.device_bytes == 400000000);
  CHECK(*s3p.deepspeed_device_bytes == 400000000);
  CHECK(s3p.host_bytes == host);
}

TEST_CASE("estimate_memory: offloaded states dominate the host on one device; nodes divide them") {
  MemoryEstimateOptions o;
  o.total_params = 1000000000;
  o.precision = Precision::kBf16;
  auto rows = estimate_memory(o);
  CHECK(find(rows, 0, false, false).host_bytes == 6000000000);  // 4P * 1.5
  CHECK(find(rows, 2, true, false).host_bytes == 24000000000);  // 16P * 1.5
  CHECK(*find(rows, 2, true, false).deepspeed_host_bytes == 24000000000);
  CHECK(find(rows, 3, true, true).host_bytes == 27000000000);  // 18P * 1.5
  CHECK(*find(rows, 3, true, true).deepspeed_host_bytes == 27000000000);

  o.nodes = 4;  // 4 nodes x 1 GPU: shard 2.5e8
  rows = estimate_memory(o);
  CHECK(find(rows, 2, true, false).host_bytes == 6000000000);  // max(4P, 16 * 2.5e8) * 1.5
  CHECK(*find(rows, 2, true, false).deepspeed_host_bytes ==
        24000000000);  // DeepSpeed ignores nodes here
  CHECK(find(rows, 3, true, false).host_bytes == 6000000000);
  CHECK(*find(rows, 3, true, false).deepspeed_host_bytes == 6000000000);  // max(4, 16/4) * P * 1.5
  CHECK(find(rows, 3, true, true).host_bytes == 6750000000);              // 18 * 2.5e8 * 1.5
  CHECK(find(rows, 3, false, false).device_bytes == 4000000000);  // 16 * 2.5e8, no layer given
}

TEST_CASE("estimate_memory: fp32 has no DeepSpeed column and 8-byte gathered layers") {
  MemoryEstimateOptions o;
  o.total_params = 1000000000;
  o.largest_layer_params = 1000;
  o.gpus_per_node = 4;
  o.precision = Precision::kFp32;
  o.additional_buffer_factor = 1.0;
  const auto rows = estimate_memory(o);
  CHECK(find(rows, 1, false, false).device_bytes == 10000000000);  // 8P + 8P/4
  CHECK(find(rows, 2, false, false).device_bytes == 7000000000);   // 4P + 12P/4
  CHECK(find(rows, 3, false, false).device_bytes == 4000008000);   // 16P/4 + 8 * 1000
  CHECK(find(rows, 3, true, true).device_bytes == 8000);
  CHECK(find(rows, 3, true, true).host_bytes == 16000000000);  // max(4P * 4, 16 * 2.5e8 * 4)
  for (const auto& r : rows) CHECK(!r.deepspeed_device_bytes);
}

TEST_CASE("estimate_memory: bad input") {
  MemoryEstimateOptions o;
  CHECK_THROWS_AS(estimate_memory(o), UsageError);
  o.total_params = 10;
  o.largest_layer_params = 11;
  CHECK_THROWS_AS(estimate_memory(o), UsageError);
  o.largest_layer_params = 0;
  o.nodes = 0;
  CHECK_THROWS_AS(estimate_memory(o), UsageError);
  CHECK_THROWS_AS(parse_precision("fp8"), UsageError);
  CHECK(parse_precision("bf16") == Precision::kBf16);
  CHECK(std::string(precision_name(Precision::kFp32)) == "fp32");
}
