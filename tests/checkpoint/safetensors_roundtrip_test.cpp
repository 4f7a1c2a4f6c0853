// safetensors round trips: every dtype with real data, scalars and empty tensors, partial range
// reads, metadata, 8-aligned data, byte-exact files against the reference implementation's tests.
#include <cmath>
#include <cstring>
#include <random>

#include <zero/checkpoint/safetensors.h>

#include "ckpt_test_util.h"

using namespace zero::ckpt;
using ckpt_test::TempDir;

namespace {

// numel elements of dtype with values a reader would notice if they were lost: random, non-zero,
// signs mixed; bool is 0/1 and float bit patterns are finite.
std::vector<unsigned char> real_data(DType dtype, int64_t numel, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-3.0, 3.0);
  std::vector<unsigned char> out(static_cast<size_t>(numel * dtype_bytes(dtype)));
  for (int64_t i = 0; i < numel; ++i) {
    unsigned char* p = out.data() + i * dtype_bytes(dtype);
    double v = real(rng);
    if (v == 0.0) v = 1.5;
    switch (dtype) {
      case DType::kF64:
        std::memcpy(p, &v, 8);
        break;
      case DType::kF32: {
        auto f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::kBF16: {
        auto f = static_cast<float>(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        auto h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kF16: {  // sign, exponent 1..30, any mantissa: a finite half
        auto h =
            static_cast<uint16_t>(((rng() & 1) << 15) | ((1 + rng() % 30) << 10) | (rng() & 0x3FF));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kI64: {
        auto x = static_cast<int64_t>(rng()) * (i % 2 ? -977 : 1013) + 1;
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::kI32: {
        auto x = static_cast<int32_t>(rng() % 2000000) - 1000001;
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::kI16: {
        auto x = static_cast<int16_t>(static_cast<int>(rng() % 60000) - 30001);
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::kI8:
        *p = static_cast<unsigned char>(static_cast<int8_t>(rng() % 255 - 127));
        break;
      case DType::kU8:
        *p = static_cast<unsigned char>(1 + rng() % 255);
        break;
      case DType::kBool:
        *p = static_cast<unsigned char>(rng() % 2);
        break;
    }
  }
  return out;
}

const DType kAll[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kI64,
                      DType::kI32, DType::kI16, DType::kI8,  DType::kU8,   DType::kBool};

}  // namespace

TEST_CASE("dtype names and sizes follow the safetensors spec") {
  const char* names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"};
  const int64_t bytes[] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    CHECK(std::string(dtype_name(kAll[i])) == names[i]);
    CHECK(dtype_bytes(kAll[i]) == bytes[i]);
    CHECK(parse_dtype(names[i]) == kAll[i]);
  }
  CHECK_FALSE(parse_dtype("f32").has_value());
  CHECK_FALSE(parse_dtype("U16").has_value());  // in the spec, not supported here
  CHECK_FALSE(parse_dtype("").has_value());
}

TEST_CASE("every dtype round-trips, with scalars and empty tensors, in the given order") {
  TempDir dir;
  std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0}, {7}, {2, 0, 3}, {2, 3, 4}};
  std::vector<std::vector<unsigned char>> datas;
  std::vector<TensorToWrite> tensors;
  uint32_t seed = 10;
  for (DType dt : kAll) {
    for (const auto& shape : shapes) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      datas.push_back(real_data(dt, numel, seed++));
      tensors.push_back({std::string("t.") + dtype_name(dt) + "." + std::to_string(datas.size()),
                         dt, shape, numel ? datas.back().data() : nullptr});
    }
  }
  const std::string path = dir / "all.safetensors";
  FileDigest digest = write_safetensors(path, tensors);
  SafetensorsReader r(path);
  CHECK(r.path() == path);
  CHECK(r.file_bytes() == digest.bytes);
  CHECK(r.metadata().empty());
  REQUIRE(r.tensors().size() == tensors.size());
  int64_t expected_begin = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = r.tensors()[i];  // header order is the order given
    INFO(t.name);
    CHECK(t.name == tensors[i].name);
    CHECK(t.dtype == tensors[i].dtype);
    CHECK(t.shape == tensors[i].shape);
    CHECK(t.begin == expected_begin);  // packed back to back, as the reference writes
    CHECK(t.nbytes() == static_cast<int64_t>(datas[i].size()));
    CHECK(t.numel() * dtype_bytes(t.dtype) == t.nbytes());
    expected_begin = t.end;
    std::vector<unsigned char> out(datas[i].size() + 1, 0xA5);  // poisoned, one guard byte
    r.read_all(t, out.data());
    CHECK((datas[i].empty() || std::memcmp(out.data(), datas[i].data(), datas[i].size()) == 0));
    CHECK(out.back() == 0xA5);
    CHECK(r.find(t.name) == &t);
  }
  CHECK(r.file_bytes() == r.data_offset() + expected_begin);
  CHECK(r.find("absent") == nullptr);
  CHECK(r.tensors()[1].shape.empty());
  CHECK(r.tensors()[1].numel() == 1);
}

TEST_CASE("partial range reads return exactly the asked bytes") {
  TempDir dir;
  std::vector<float> w(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * static_cast<float>(i)) + 2.0f;
  std::vector<int32_t> ids = {5, -3, 7, 9};
  const std::string path = dir / "p.safetensors";
  write_safetensors(
      path, {{"ids", DType::kI32, {4}, ids.data()}, {"w", DType::kF32, {10, 100}, w.data()}});
  SafetensorsReader r(path);
  const TensorInfo* t = r.find("w");
  REQUIRE(t != nullptr);
  for (auto [lo, hi] :
       {std::pair<int64_t, int64_t>{0, 4}, {400, 1200}, {3996, 4000}, {17, 17}, {1, 2999}}) {
    std::vector<unsigned char> out(static_cast<size_t>(hi - lo) + 1, 0xA5);
    r.read(*t, lo, hi, out.data());
    CHECK(std::memcmp(out.data(), reinterpret_cast<const unsigned char*>(w.data()) + lo,
                      static_cast<size_t>(hi - lo)) == 0);
    CHECK(out.back() == 0xA5);
  }
  std::vector<unsigned char> out(8);
  CHECK_CKPT_ERROR(r.read(*t, 3998, 4002, out.data()), path,
                   "read of bytes [3998, 4002) outside its 4000 bytes");
  CHECK_CKPT_ERROR(r.read(*t, -4, 0, out.data()), path, "tensor 'w'");
  CHECK_CKPT_ERROR(r.read(*t, 8, 4, out.data()), path, "outside its 4000 bytes");
  TensorInfo fake = *t;  // not from this file: checked against the data buffer
  fake.begin = 1000000;
  fake.end = 1004000;
  CHECK_CKPT_ERROR(r.read_all(fake, out.data()), path, "lies outside the file's");

  SafetensorsReader moved(std::move(r));
  std::vector<int32_t> got(4, 0);
  moved.read_all(*moved.find("ids"), got.data());
  CHECK(got == ids);
}

TEST_CASE("metadata round-trips and data starts 8-aligned") {
  TempDir dir;
  std::vector<double> x = {1.5, -2.25, 3.125};
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"zero.rank", "3"},
                                             {"quote\"and\\slash", "line\nbreak"},
                                             {"utf8", "\xc3\xa9t\xc3\xa9"}};
  for (size_t name_len = 1; name_len <= 9; ++name_len) {  // header sizes across all residues mod 8
    const std::string path = dir / ("m" + std::to_string(name_len) + ".safetensors");
    write_safetensors(path, {{std::string(name_len, 'x'), DType::kF64, {3}, x.data()}}, meta);
    SafetensorsReader r(path);
    CHECK(r.metadata() == meta);
    CHECK(r.data_offset() % 8 == 0);
    std::string bytes = ckpt_test::read_bytes(path);
    std::string header = bytes.substr(8, static_cast<size_t>(r.data_offset() - 8));
    CHECK(header.find_last_not_of(' ') == header.find_last_of('}'));  // padded with spaces only
  }
}

TEST_CASE("the writer's bytes equal the reference implementation's (safetensors tensor.rs tests)") {
  TempDir dir;
  std::vector<float> v = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};
  std::string data(reinterpret_cast<const char*>(v.data()), 24);
  // test_serialization: the header is 64 bytes, no padding needed.
  write_safetensors(dir / "a", {{"attn.0", DType::kF32, {1, 2, 3}, v.data()}});
  CHECK(ckpt_test::read_bytes(dir / "a") ==
        ckpt_test::image(R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})",
                         data));
  // test_serialization_forced_alignement: 65 bytes padded to 72 with spaces.
  write_safetensors(dir / "b", {{"attn0", DType::kF32, {1, 1, 2, 3}, v.data()}});
  CHECK(ckpt_test::read_bytes(dir / "b") ==
        ckpt_test::image(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                             std::string(7, ' '),
                         data));
  // test_empty: no tensors, without and with metadata.
  write_safetensors(dir / "c", {});
  CHECK(ckpt_test::read_bytes(dir / "c") == ckpt_test::image("{}" + std::string(6, ' '), ""));
  write_safetensors(dir / "d", {}, {{"framework", "pt"}});
  CHECK(ckpt_test::read_bytes(dir / "d") ==
        ckpt_test::image(R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '), ""));
  SafetensorsReader r(dir / "d");
  CHECK(r.tensors().empty());
  CHECK(r.metadata().at("framework") == "pt");
}

TEST_CASE("large tensors and many small ones cross the writer's staging buffer") {
  TempDir dir;
  auto big = real_data(DType::kF32, (int64_t{3} << 20) / 4 + 3, 99);  // > 1 MiB: written directly
  std::vector<std::vector<unsigned char>> small;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 3000; ++i) {  // ~6 MiB of 2 KiB pieces: several buffer flushes
    small.push_back(real_data(DType::kI16, 1000 + i % 7, 200 + i));
    tensors.push_back({"s" + std::to_string(i), DType::kI16, {1000 + i % 7}, small.back().data()});
    if (i == 1500)
      tensors.push_back({"big", DType::kF32, {(int64_t{3} << 20) / 4 + 3}, big.data()});
  }
  const std::string path = dir / "big.safetensors";
  FileDigest d = write_safetensors(path, tensors);
  CHECK(digest_file(path) == d);
  SafetensorsReader r(path);
  std::vector<unsigned char> out(big.size());
  r.read_all(*r.find("big"), out.data());
  CHECK((out == big));  // a bool: never print megabytes
  for (int i : {0, 1500, 2999}) {
    const TensorInfo* t = r.find("s" + std::to_string(i));
    std::vector<unsigned char> s(small[i].size());
    r.read_all(*t, s.data());
    CHECK((s == small[i]));
  }
}

TEST_CASE("the writer refuses to overwrite and refuses invalid tensors before creating a file") {
  TempDir dir;
  std::vector<float> x = {1.f, 2.f};
  const std::string path = dir / "x.safetensors";
  ckpt_test::write_bytes(path, "precious");
  CHECK_CKPT_ERROR(write_safetensors(path, {{"x", DType::kF32, {2}, x.data()}}), path,
                   "already exists");
  CHECK(ckpt_test::read_bytes(path) == "precious");

  const std::string q = dir / "q.safetensors";
  auto refused = [&](std::vector<TensorToWrite> t, const char* part) {
    CHECK_CKPT_ERROR(write_safetensors(q, t), q, part);
    CHECK_FALSE(std::filesystem::exists(q));
  };
  refused({{"", DType::kF32, {2}, x.data()}}, "invalid tensor name ''");
  refused({{"__metadata__", DType::kF32, {2}, x.data()}}, "invalid tensor name");
  refused({{"a", DType::kF32, {1}, x.data()}, {"a", DType::kF32, {1}, x.data()}},
          "name given twice");
  refused({{"a", DType::kF32, {-2}, x.data()}}, "invalid shape [-2]");
  refused({{"a", DType::kF32, {int64_t{1} << 62, 4}, x.data()}}, "invalid shape");
  refused({{"a", DType::kF32, {2}, nullptr}}, "no data for 8 bytes");
  refused({{"bad\xff", DType::kF32, {2}, x.data()}}, "not valid UTF-8");
  CHECK_CKPT_ERROR(write_safetensors(q, {}, {{"k", "\xc3"}}), q, "not valid UTF-8");
  CHECK_CKPT_ERROR(write_safetensors(dir / "no/such/dir/f", {}), dir / "no/such/dir/f",
                   "cannot create");
}
