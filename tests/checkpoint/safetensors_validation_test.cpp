// Hand-made bad safetensors files, one per validation rule: each must be refused with a
// CheckpointError that names the file and the problem, before any tensor data is read.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zero/checkpoint/safetensors.h>

#include "ckpt_test_util.h"

using namespace zero::ckpt;
using ckpt_test::image;
using ckpt_test::pattern;
using ckpt_test::TempDir;

namespace {

// Writes the image and checks that opening it fails with a message naming the file and `part`.
void check_rejected(const TempDir& dir, const std::string& bytes, const std::string& part) {
  static int count = 0;
  const std::string path = dir / ("bad" + std::to_string(count++) + ".safetensors");
  ckpt_test::write_bytes(path, bytes);
  CHECK_CKPT_ERROR(SafetensorsReader{path}, path, part);
}

std::string entry(const std::string& name, const std::string& body) {
  return "\"" + name + "\":{" + body + "}";
}

}  // namespace

TEST_CASE("a valid hand-made file with padding and gaps opens") {
  TempDir dir;
  const std::string path = dir / "ok.safetensors";
  // Entries out of offset order, an 8-byte gap, an empty tensor, metadata last: all allowed.
  std::string header = "{" + entry("b", R"("dtype":"I8","shape":[4],"data_offsets":[24,28])") +
                       "," + entry("a", R"("dtype":"F32","shape":[2,2],"data_offsets":[0,16])") +
                       "," + entry("e", R"("dtype":"F64","shape":[3,0],"data_offsets":[16,16])") +
                       R"(,"__metadata__":{"k":"v"}}   )";
  ckpt_test::write_bytes(path, image(header, pattern(28)));
  SafetensorsReader r(path);
  REQUIRE(r.tensors().size() == 3);
  CHECK(r.tensors()[0].name == "b");
  CHECK(r.find("e")->numel() == 0);
  CHECK(r.metadata().at("k") == "v");
  std::string out(4, '\0');
  r.read_all(*r.find("b"), out.data());
  CHECK(out == pattern(28).substr(24, 4));
}

TEST_CASE("length prefix problems") {
  TempDir dir;
  check_rejected(dir, "", "too short for the 8-byte header length");
  check_rejected(dir, "1234567", "too short");
  check_rejected(dir, ckpt_test::le64(1000) + "{}",
                 "header length 1000 runs past the end of the 10-byte file");
  check_rejected(dir, ckpt_test::le64(uint64_t{1} << 40) + "{}", "exceeds the limit of 100000000");
  check_rejected(dir, ckpt_test::le64(~uint64_t{0}) + "{}", "exceeds the limit");
  check_rejected(dir, ckpt_test::le64(0), "not valid JSON");
}

TEST_CASE("JSON problems") {
  TempDir dir;
  check_rejected(dir, image(R"({"a":)", ""), "not valid JSON");
  check_rejected(dir, image("[1,2]", ""), "not a JSON object but array");
  check_rejected(dir, image("{} x", ""), "not valid JSON");
  check_rejected(dir, image("{\"a\xff\":1}", ""), "not valid JSON");  // ill-formed UTF-8
  check_rejected(dir, image(std::string(100, '[') + std::string(100, ']'), ""),
                 "nested more than 16");
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "{\"a\":";
  check_rejected(dir, image(deep + "1" + std::string(40, '}'), ""), "nested more than 16");
}

TEST_CASE("duplicate keys are refused, not resolved silently") {
  TempDir dir;
  const std::string a = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  const std::string b = R"("dtype":"F32","shape":[1],"data_offsets":[4,8])";
  check_rejected(dir, image("{" + entry("w", a) + "," + entry("w", b) + "}", pattern(8)),
                 "duplicate key 'w'");
  check_rejected(dir, image("{" + entry("w", a + R"(,"dtype":"I32")") + "}", pattern(8)),
                 "duplicate key 'dtype' in entry 'w'");
  check_rejected(dir, image(R"({"__metadata__":{"k":"1"},"__metadata__":{"k":"2"}})", ""),
                 "duplicate key '__metadata__'");
  check_rejected(dir, image(R"({"__metadata__":{"k":"1","k":"2"}})", ""),
                 "duplicate key 'k' in entry '__metadata__'");
}

TEST_CASE("entry schema problems") {
  TempDir dir;
  const std::string d = pattern(64);
  check_rejected(dir, image(R"({"w":[1,2]})", d), "tensor 'w': entry is not an object but array");
  check_rejected(dir, image(R"({"w":"F32"})", d), "entry is not an object but string");
  check_rejected(
      dir,
      image("{" + entry("w", R"("dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1)") + "}", d),
      "tensor 'w': unknown key 'x'");
  check_rejected(dir, image("{" + entry("w", R"("dtype":"F32","data_offsets":[0,4])") + "}", d),
                 "missing key 'shape'");
  check_rejected(dir, image("{" + entry("w", R"("dtype":"F32","shape":[1])") + "}", d),
                 "missing key 'data_offsets'");
  check_rejected(
      dir, image("{" + entry("", R"("dtype":"F32","shape":[1],"data_offsets":[0,4])") + "}", d),
      "empty name");
  check_rejected(dir, image(R"({"__metadata__":{"k":1}})", d),
                 "__metadata__ value of 'k' is not a string but number");
  check_rejected(dir, image(R"({"__metadata__":["k"]})", d), "__metadata__ is not an object");
}

TEST_CASE("dtype and shape problems") {
  TempDir dir;
  const std::string d = pattern(64);
  auto bad = [&](const std::string& body, const std::string& part) {
    check_rejected(dir, image("{" + entry("t", body) + "}", d), part);
  };
  bad(R"("dtype":"F128","shape":[1],"data_offsets":[0,4])", "tensor 't': unsupported dtype 'F128'");
  bad(R"("dtype":"f32","shape":[1],"data_offsets":[0,4])", "unsupported dtype 'f32'");
  bad(R"("dtype":4,"shape":[1],"data_offsets":[0,4])", "unsupported dtype 4");
  bad(R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])", "shape entry -1 is not a non-negative");
  bad(R"("dtype":"F32","shape":[1.0],"data_offsets":[0,4])", "shape entry 1.0");
  bad(R"("dtype":"F32","shape":["1"],"data_offsets":[0,4])", "shape entry \"1\"");
  bad(R"("dtype":"F32","shape":{"a":1},"data_offsets":[0,4])", "shape is not an array");
  bad(R"("dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4])",
      "shape entry 9223372036854775808");
  bad(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4])",
      "shape [4294967296, 4294967296] x F32 overflows 64 bits");
  bad(R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4])", "overflows");
}

TEST_CASE("offset problems") {
  TempDir dir;
  const std::string d = pattern(32);
  auto bad = [&](const std::string& body, const std::string& part) {
    check_rejected(dir, image("{" + entry("t", body) + "}", d), part);
  };
  bad(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])",
      "data_offsets [-8,0] is not two non-negative");
  bad(R"("dtype":"F32","shape":[2],"data_offsets":[0])", "is not two non-negative");
  bad(R"("dtype":"F32","shape":[2],"data_offsets":[0,8,16])", "is not two");
  bad(R"("dtype":"F32","shape":[2],"data_offsets":"0-8")", "is not two");
  bad(R"("dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615])", "is not two");
  bad(R"("dtype":"F32","shape":[2],"data_offsets":[16,8])",
      "data_offsets [16, 8) end before they begin");
  bad(R"("dtype":"F32","shape":[4],"data_offsets":[0,12])",
      "tensor 't': data [0, 12) holds 12 bytes but shape [4] x F32 needs 16");
  bad(R"("dtype":"F32","shape":[4],"data_offsets":[24,40])",
      "tensor 't': data [24, 40) lies outside the file's 32 data bytes (truncated or corrupted "
      "file)");
  bad(R"("dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807])",
      "lies outside the file's 32 data bytes");
  check_rejected(
      dir,
      image("{" + entry("a", R"("dtype":"F32","shape":[4],"data_offsets":[0,16])") + "," +
                entry("b", R"("dtype":"F32","shape":[4],"data_offsets":[8,24])") + "}",
            d),
      "tensors 'a' [0, 16) and 'b' [8, 24) overlap");
  check_rejected(dir,
                 image("{" + entry("a", R"("dtype":"I8","shape":[8],"data_offsets":[8,16])") + "," +
                           entry("b", R"("dtype":"I8","shape":[32],"data_offsets":[0,32])") + "}",
                       d),
                 "tensors 'b' [0, 32) and 'a' [8, 16) overlap");
}

TEST_CASE("hostile names are escaped in messages") {
  TempDir dir;
  check_rejected(dir, image("{\"a\\u001b[2Jb'\":[]}", ""),
                 "tensor 'a\\x1b[2Jb\\x27': entry is not an object");
}

TEST_CASE("a truncated file is refused when opened, and a file truncated while open when read") {
  TempDir dir;
  std::vector<float> x(1000, 0.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + static_cast<float>(i);
  const std::string path = dir / "t.safetensors";
  write_safetensors(path, {{"master:w:0", DType::kF32, {1000}, x.data()}});
  SafetensorsReader r(path);
  const int64_t data_bytes = r.file_bytes() - r.data_offset();
  REQUIRE(truncate(path.c_str(), r.data_offset() + 2000) == 0);
  CHECK_CKPT_ERROR(SafetensorsReader{path}, path,
                   "tensor 'master:w:0': data [0, 4000) lies outside the file's 2000 data bytes");
  std::vector<float> out(1000);
  CHECK_CKPT_ERROR(r.read_all(r.tensors()[0], out.data()), path,
                   "while reading tensor 'master:w:0' data");
  r.read(r.tensors()[0], 0, 2000, out.data());  // what is still there reads fine
  CHECK(out[499] == 500.0f);
  CHECK(data_bytes == 4000);
  REQUIRE(truncate(path.c_str(), 20) == 0);
  CHECK_CKPT_ERROR(SafetensorsReader{path}, path, "runs past the end of the 20-byte file");
}

TEST_CASE("missing files, directories and FIFOs are refused") {
  TempDir dir;
  CHECK_CKPT_ERROR(SafetensorsReader{dir / "missing"}, dir / "missing", "cannot open");
  CHECK_CKPT_ERROR(SafetensorsReader{dir.path()}, dir.path(), "not a regular file");
  const std::string fifo = dir / "fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // A FIFO without a writer: a blocking open() would hang here.
  CHECK_CKPT_ERROR(SafetensorsReader{fifo}, fifo, "not a regular file");
  CHECK_CKPT_ERROR(digest_file(fifo), fifo, "not a regular file");
}

TEST_CASE("parse_safetensors_header names what_for_errors and fills the metadata") {
  std::map<std::string, std::string> meta = {{"stale", "x"}};
  auto t = parse_safetensors_header(
      R"({"__metadata__":{"a":"b"},"w":{"dtype":"BF16","shape":[3],"data_offsets":[2,8]}})", 8,
      "fuzz input", &meta);
  REQUIRE(t.size() == 1);
  CHECK(t[0].begin == 2);
  CHECK(t[0].end == 8);
  CHECK(t[0].dtype == DType::kBF16);
  CHECK(meta == std::map<std::string, std::string>{{"a", "b"}});
  CHECK(parse_safetensors_header("{}", 0, "x", nullptr).empty());
  CHECK_CKPT_ERROR(
      parse_safetensors_header(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[2,8]}})", 7,
                               "fuzz input", nullptr),
      "fuzz input", "lies outside the file's 7 data bytes");
}
