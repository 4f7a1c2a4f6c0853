// monitor/: DeepSpeed's CSV layout byte for byte, Python's float repr, TFRecord framing and
// CRCs, TensorBoard events read back with the generated protobuf code, and the SVG plot.
#include <zero/checkpoint/digest.h>
#include <zero/monitor/csv_monitor.h>
#include <zero/monitor/plot.h>
#include <zero/monitor/tensorboard.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef ZERO_HAS_PROTOBUF
#include "event.pb.h"
#endif

namespace fs = std::filesystem;
using namespace zero::monitor;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/zero_monitor_test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t get_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file, checking both CRCs of every record.
std::vector<std::string> records_of(const std::string& data) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < data.size()) {
    REQUIRE(at + 12 <= data.size());
    const uint64_t len = get_le(data, at, 8);
    REQUIRE(get_le(data, at + 8, 4) == masked_crc32c(data.data() + at, 8));
    REQUIRE(at + 12 + len + 4 <= data.size());
    const std::string payload = data.substr(at + 12, len);
    REQUIRE(get_le(data, at + 12 + len, 4) == masked_crc32c(payload.data(), payload.size()));
    out.push_back(payload);
    at += 12 + len + 4;
  }
  return out;
}

}  // namespace

TEST_CASE("log directory: os.path.join(output_path, job_name)") {
  CHECK(log_dir_of("", "DeepSpeedJobName") == "DeepSpeedJobName");
  CHECK(log_dir_of("out", "job") == "out/job");
  CHECK(log_dir_of("out/", "job") == "out/job");
  CHECK(log_dir_of("/a/b", "/abs") == "/abs");
}

TEST_CASE("values are written as Python's repr(float)") {
  const std::pair<double, const char*> cases[] = {
      {0.001, "0.001"},
      {1e-05, "1e-05"},
      {65536.0, "65536.0"},
      {0.1, "0.1"},
      {1.0 / 3.0, "0.3333333333333333"},
      {1e16, "1e+16"},
      {1.5e-7, "1.5e-07"},
      {123456789012345.6, "123456789012345.6"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {1e22, "1e+22"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},
      {0.0001, "0.0001"},
      {1e15, "1000000000000000.0"},
      {-2.75e-3, "-0.00275"},
      {3.0517578125e-05, "3.0517578125e-05"},
      {100.0, "100.0"},
  };
  for (const auto& [v, text] : cases) CHECK(python_float_repr(v) == text);
  CHECK(python_float_repr(std::nan("")) == "nan");
  CHECK(python_float_repr(-HUGE_VAL) == "-inf");
}

TEST_CASE("CSV file names and headers are DeepSpeed's") {
  CHECK(csv_file_name("Train/Samples/train_loss") == "Train_Samples_train_loss.csv");
  CHECK(csv_file_name("Train/Samples/lr") == "Train_Samples_lr.csv");
  CHECK(csv_file_name("Train/Samples/loss_scale") == "Train_Samples_loss_scale.csv");
  CHECK(csv_file_name("my metric") == "my_metric.csv");
  CHECK(csv_header("Train/Samples/train_loss") == "train_loss");
  CHECK(csv_header("loss") == "loss");
}

TEST_CASE("CsvMonitor writes Python csv rows, and appends with a new header as DeepSpeed does") {
  TempDir t;
  {
    CsvMonitor m(t.path + "/out", "job");
    CHECK(m.log_dir() == t.path + "/out/job");
    m.write({{"Train/Samples/train_loss", 2.5, 0}, {"Train/Samples/lr", 1e-05, 8}});
    m.write({{"Train/Samples/train_loss", 1.25, 8}, {"a,b/x\"y", 3.0, 16}});
    m.flush();
    CHECK(slurp(t.path + "/out/job/Train_Samples_train_loss.csv") ==
          "step,train_loss\r\n0,2.5\r\n8,1.25\r\n");
  }
  CHECK(slurp(t.path + "/out/job/Train_Samples_lr.csv") == "step,lr\r\n8,1e-05\r\n");
  CHECK(slurp(t.path + "/out/job/a,b_x\"y.csv") == "step,\"x\"\"y\"\r\n16,3.0\r\n");
  {
    CsvMonitor again(t.path + "/out", "job");
    again.write({{"Train/Samples/lr", 0.5, 24}});
  }  // destroyed: closed (and so flushed)
  CHECK(slurp(t.path + "/out/job/Train_Samples_lr.csv") ==
        "step,lr\r\n8,1e-05\r\nstep,lr\r\n24,0.5\r\n");
  const CsvSeries s = read_csv_series(t.path + "/out/job/Train_Samples_lr.csv");
  CHECK(s.column == "lr");
  REQUIRE(s.points.size() == 2);
  CHECK(s.points[0] == std::make_pair(int64_t{8}, 1e-05));
  CHECK(s.points[1] == std::make_pair(int64_t{24}, 0.5));
}

TEST_CASE("CsvMonitor reports a directory it cannot create") {
  TempDir t;
  std::ofstream(t.path + "/file") << "x";
  CHECK_THROWS_AS(CsvMonitor(t.path + "/file", "job"), MonitorError);
}

TEST_CASE("TFRecord framing: little-endian length, masked CRC32C of length and payload") {
  CHECK(zero::ckpt::crc32c("123456789", 9) == 0xE3069283u);  // the CRC32C check value
  const uint32_t crc = zero::ckpt::crc32c("abc", 3);
  CHECK(masked_crc32c("abc", 3) == ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string frame = tfrecord_frame("hello");
  REQUIRE(frame.size() == 8 + 4 + 5 + 4);
  CHECK(get_le(frame, 0, 8) == 5);
  CHECK(frame.substr(12, 5) == "hello");
  CHECK(records_of(frame) == std::vector<std::string>{"hello"});
}

#ifdef ZERO_HAS_PROTOBUF
TEST_CASE("TensorBoardMonitor: SummaryWriter's file name and events, read back") {
  TempDir t;
  std::string path;
  {
    TensorBoardMonitor m(t.path, "tb_job");
    path = m.file_path();
    m.write({{"Train/Samples/train_loss", 2.0625, 0}, {"Train/Samples/lr", 1e-3, 32}});
    m.flush();
  }
  const std::string name = fs::path(path).filename().string();
  CHECK(fs::path(path).parent_path().string() == t.path + "/tb_job");
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(name.find("." + std::to_string(getpid()) + ".") != std::string::npos);
  const std::vector<std::string> records = records_of(slurp(path));
  REQUIRE(records.size() == 3);
  tensorboard::Event first, loss, lr;
  REQUIRE(first.ParseFromString(records[0]));
  CHECK(first.file_version() == "brain.Event:2");
  CHECK(first.wall_time() > 1.6e9);
  REQUIRE(loss.ParseFromString(records[1]));
  CHECK(loss.step() == 0);
  REQUIRE(loss.summary().value_size() == 1);
  CHECK(loss.summary().value(0).tag() == "Train/Samples/train_loss");
  CHECK(loss.summary().value(0).simple_value() == 2.0625f);
  REQUIRE(lr.ParseFromString(records[2]));
  CHECK(lr.step() == 32);
  CHECK(lr.summary().value(0).simple_value() == 1e-3f);
}
#endif

TEST_CASE("render_svg: a panel per event, runs overlaid, known panels first") {
  PlotRun a{"run_a", {}}, b{"run_b", {}};
  a.series["Train_Samples_train_loss"] = {"train_loss", {{0, 4.0}, {8, 3.0}, {16, 2.5}}};
  a.series["Train_Samples_lr"] = {"lr", {{8, 1e-3}, {16, 1e-3}}};
  b.series["Train_Samples_train_loss"] = {"train_loss", {{0, 4.1}, {8, std::nan("")}, {16, 2.0}}};
  b.series["Custom_metric"] = {"metric", {{8, 1.0}}};
  const std::string svg = render_svg({a, b});
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("train loss") < svg.find("learning rate"));
  CHECK(svg.find("learning rate") < svg.find("Custom_metric"));
  CHECK(svg.find("run_a") != std::string::npos);
  CHECK(svg.find("run_b") != std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("stroke-width=\"1.5\""); at != std::string::npos;
       at = svg.find("stroke-width=\"1.5\"", at + 1))
    ++lines;
  CHECK(lines == 3);  // loss of both runs, lr of run_a (Custom_metric: one point, a circle)
  CHECK_THROWS_AS(render_svg({PlotRun{"empty", {}}}), MonitorError);
}
