// Helpers of the checkpoint tests: a scoped temporary directory, whole-file bytes in and out,
// hand-made safetensors images, and a check that a call throws a CheckpointError naming a file.
#pragma once

#include <catch2/catch.hpp>

#include "temp_dir.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <zero/checkpoint/errors.h>

namespace ckpt_test {

using TempDir = zero::test_support::TempDir;

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

// A safetensors file image: 8-byte length, header as given (no padding added), data.
inline std::string image(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// `data_bytes` bytes that are not zeros.
inline std::string pattern(size_t data_bytes) {
  std::string out(data_bytes, '\0');
  for (size_t i = 0; i < data_bytes; ++i) out[i] = static_cast<char>(0x31 + (i * 7) % 200);
  return out;
}

}  // namespace ckpt_test

// Runs `expr`, which must throw zero::CheckpointError whose message contains `path` and `part`.
#define CHECK_CKPT_ERROR(expr, path, part)                                        \
  do {                                                                            \
    try {                                                                         \
      expr;                                                                       \
      FAIL_CHECK("no CheckpointError from " #expr);                               \
    } catch (const zero::CheckpointError& e) {                                    \
      std::string msg = e.what();                                                 \
      INFO("message: " << msg);                                                   \
      CHECK(msg.find(std::string("checkpoint: ") + (path)) != std::string::npos); \
      CHECK(msg.find(part) != std::string::npos);                                 \
    }                                                                             \
  } while (0)
