// StateReader, the load's way into the state tensors: straight into contiguous fp32 CPU memory,
// and chunk by chunk through staging for other dtypes and strides, across two rank files.
#include "save_load/read.h"

#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/safetensors.h>

#include <ATen/ATen.h>

#include "catch_after_torch.h"
#include "checkpoint/ckpt_test_util.h"

#include <fstream>

namespace {

constexpr int64_t kNumel = 10;

// A checkpoint of one parameter "w" of kNumel elements, master only, saved by two ranks:
// elements [0, 6) in rank 0's file, [6, 10) in rank 1's. Returns the values saved.
std::vector<float> make_checkpoint(const std::string& dir) {
  std::vector<float> master(kNumel);
  for (int64_t i = 0; i < kNumel; ++i) master[i] = 0.1f + 1.37f * static_cast<float>(i);
  zero::ckpt::Manifest m;
  m.tag = "t";
  m.world_size = 2;
  m.stage = 1;
  m.precision = "fp32";
  m.optimizer = "AdamW";
  m.state_kinds = {"master"};
  m.config_hash = "0";
  m.params.push_back({"w", {kNumel}, "F32"});
  const int64_t split[] = {0, 6, kNumel};
  for (int r = 0; r < 2; ++r) {
    const std::string name = r == 0 ? "rank00000.safetensors" : "rank00001.safetensors";
    const int64_t begin = split[r], end = split[r + 1];
    const auto digest = zero::ckpt::write_safetensors(
        dir + "/" + name, {{zero::ckpt::piece_tensor_name("master", "w", begin),
                            zero::ckpt::DType::kF32,
                            {end - begin},
                            master.data() + begin}});
    m.files.push_back({name, r, digest.bytes, digest.crc32c, {{0, begin, end}}});
  }
  std::ofstream(dir + "/" + zero::ckpt::kManifestFile) << zero::ckpt::manifest_to_json(m).dump();
  return master;
}

at::Tensor expected(const std::vector<float>& master, int64_t begin, int64_t end) {
  return at::from_blob(const_cast<float*>(master.data()) + begin, {end - begin}).clone();
}

}  // namespace

TEST_CASE("StateReader reads contiguous fp32 CPU tensors in place, across files") {
  ckpt_test::TempDir dir;
  const std::vector<float> master = make_checkpoint(dir.path());
  zero::ckpt::CheckpointReader reader(dir.path());
  zero::detail::StateReader into(reader, /*chunk_numel=*/3);
  at::Tensor big = at::full({12}, -1.0f);
  into.read("master", 0, 2, 9, big.narrow(0, 4, 7));
  CHECK(at::equal(big.narrow(0, 4, 7), expected(master, 2, 9)));
  CHECK(big[3].item<float>() == -1.0f);  // nothing outside the range is touched
  CHECK(big[11].item<float>() == -1.0f);
  CHECK(into.staged_numel() == 0);
  CHECK(into.staging_capacity() == 0);
  CHECK(reader.bytes_read() == 7 * 4);
}

TEST_CASE("StateReader stages other dtypes and strides through a bounded chunk") {
  ckpt_test::TempDir dir;
  const std::vector<float> master = make_checkpoint(dir.path());
  zero::ckpt::CheckpointReader reader(dir.path());
  zero::detail::StateReader into(reader, /*chunk_numel=*/3);

  SECTION("bf16: cast as copy_ casts, 3 elements at a time") {
    at::Tensor dst = at::full({8}, 7.0f).to(at::kBFloat16);
    into.read("master", 0, 1, 9, dst);
    CHECK(at::equal(dst, expected(master, 1, 9).to(at::kBFloat16)));
    CHECK(into.staged_numel() == 8);
    CHECK(into.staging_capacity() == 3);
  }
  SECTION("fp32 with a stride: every other element of a column") {
    at::Tensor both = at::full({kNumel, 2}, -1.0f);
    into.read("master", 0, 0, kNumel, both.select(1, 0));
    CHECK(at::equal(both.select(1, 0), expected(master, 0, kNumel)));
    CHECK(at::equal(both.select(1, 1), at::full({kNumel}, -1.0f)));
    CHECK(into.staged_numel() == kNumel);
    CHECK(into.staging_capacity() == 3);
  }
  SECTION("a range beyond the parameter is an error naming the checkpoint") {
    at::Tensor dst = at::empty({4}, at::kHalf);
    CHECK_CKPT_ERROR(into.read("master", 0, 8, 12, dst), dir.path(), "in no rank file");
  }
}
