// CRC32C: the standard check value, incremental use, the SSE4.2 and portable versions against
// each other at every length and alignment, and digest_file against the writer's digest.
#include <cstring>
#include <random>

#include <zero/checkpoint/digest.h>
#include <zero/checkpoint/safetensors.h>

#include "ckpt_test_util.h"

using namespace zero::ckpt;

namespace {
std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) b = static_cast<unsigned char>(rng());
  return out;
}
}  // namespace

TEST_CASE("crc32c matches the standard check value") {
  const char* s = "123456789";
  CHECK(crc32c(s, 9) == 0xE3069283u);
  CHECK(detail::crc32c_portable(s, 9, 0) == 0xE3069283u);
  CHECK(crc32c(nullptr, 0) == 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros and of 0xFF.
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
}

TEST_CASE("crc32c is incremental") {
  auto data = random_bytes(10000, 1);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4999}, size_t{10000}}) {
    uint32_t a = crc32c(data.data(), split);
    CHECK(crc32c(data.data() + split, data.size() - split, a) == whole);
    uint32_t p = detail::crc32c_portable(data.data(), split, 0);
    CHECK(detail::crc32c_portable(data.data() + split, data.size() - split, p) == whole);
  }
  CHECK(crc32c("56789", 5, crc32c("1234", 4)) == 0xE3069283u);
}

TEST_CASE("crc32c: the SSE4.2 version equals the portable one at every length and alignment") {
  if (!detail::crc32c_hw_available()) {
    WARN("this CPU has no SSE4.2: only the portable CRC32C is tested");
    return;
  }
  auto data = random_bytes(300, 2);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; offset + n <= data.size(); ++n) {
      uint32_t seed = static_cast<uint32_t>(n * 2654435761u);
      REQUIRE(detail::crc32c_hw(data.data() + offset, n, seed) ==
              detail::crc32c_portable(data.data() + offset, n, seed));
    }
  }
  auto big = random_bytes(size_t{3} << 20, 3);
  CHECK(detail::crc32c_hw(big.data(), big.size(), 0) ==
        detail::crc32c_portable(big.data(), big.size(), 0));
}

TEST_CASE("digest_file equals the writer's digest and the CRC of the file's bytes") {
  ckpt_test::TempDir dir;
  std::vector<float> small(100);
  for (size_t i = 0; i < small.size(); ++i) small[i] = 0.5f + static_cast<float>(i) * 1.25f;
  auto big = random_bytes((size_t{3} << 20) + 5, 4);  // larger than digest_file's 1 MiB reads
  std::vector<TensorToWrite> tensors = {
      {"small", DType::kF32, {10, 10}, small.data()},
      {"big", DType::kU8, {static_cast<int64_t>(big.size())}, big.data()},
  };
  const std::string path = dir / "d.safetensors";
  FileDigest written = write_safetensors(path, tensors, {{"k", "v"}});
  FileDigest read = digest_file(path);
  CHECK(read == written);
  std::string bytes = ckpt_test::read_bytes(path);
  CHECK(written.bytes == static_cast<int64_t>(bytes.size()));
  CHECK(written.crc32c == crc32c(bytes.data(), bytes.size()));
  CHECK_CKPT_ERROR(digest_file(dir / "missing"), dir / "missing", "cannot open");
  CHECK_CKPT_ERROR(digest_file(dir.path()), dir.path(), "not a regular file");
}
