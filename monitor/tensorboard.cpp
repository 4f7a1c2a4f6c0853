// TensorBoardMonitor: event files as torch.utils.tensorboard.SummaryWriter writes them, from the
// Event/Summary messages of proto/ (compiled by protoc) framed as TFRecords with masked CRC32C.
#include <zero/checkpoint/digest.h>
#include <zero/monitor/tensorboard.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#ifdef ZERO_HAS_PROTOBUF
#include "event.pb.h"
#endif

namespace zero::monitor {
namespace {

double wall_time_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::atomic<int> writer_count{0};  // tensorboard's _global_uid: the n-th writer of the process

}  // namespace

bool tensorboard_available() {
#ifdef ZERO_HAS_PROTOBUF
  return true;
#else
  return false;
#endif
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = ckpt::crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& payload) {
  std::string header;
  put_le(header, payload.size(), 8);
  std::string out = header;
  put_le(out, masked_crc32c(header.data(), header.size()), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

TensorBoardMonitor::TensorBoardMonitor(const std::string& output_path, const std::string& job_name)
    : log_dir_(log_dir_of(output_path, job_name)) {
  ZERO_CHECK(tensorboard_available(), MonitorError,
             "tensorboard: this build has no protobuf (install libprotobuf-dev and "
             "protobuf-compiler, then reconfigure); use csv_monitor instead");
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  ZERO_CHECK(!ec, MonitorError, "tensorboard: cannot create the directory '", log_dir_,
             "': ", ec.message(), " (tensorboard.output_path / job_name)");
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(wall_time_s()), host, static_cast<int>(getpid()),
                writer_count.fetch_add(1));
  path_ = log_dir_ + "/" + name;
  file_ = std::fopen(path_.c_str(), "wb");
  ZERO_CHECK(file_, MonitorError, "tensorboard: cannot create '", path_,
             "': ", std::strerror(errno));
#ifdef ZERO_HAS_PROTOBUF
  tensorboard::Event first;
  first.set_wall_time(wall_time_s());
  first.set_file_version("brain.Event:2");
  first.mutable_source_metadata()->set_writer("zero::monitor::TensorBoardMonitor");
  append_record(first.SerializeAsString());
  flush();
#endif
}

TensorBoardMonitor::~TensorBoardMonitor() {
  if (file_) std::fclose(file_);
}

void TensorBoardMonitor::append_record(const std::string& payload) {
  const std::string record = tfrecord_frame(payload);
  ZERO_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(), MonitorError,
             "tensorboard: cannot write '", path_, "': ", std::strerror(errno));
}

void TensorBoardMonitor::write(const std::vector<Event>& events) {
#ifdef ZERO_HAS_PROTOBUF
  for (const Event& e : events) {
    tensorboard::Event event;
    event.set_wall_time(wall_time_s());
    event.set_step(e.step);
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(e.name);
    v->set_simple_value(static_cast<float>(e.value));
    append_record(event.SerializeAsString());
  }
#else
  (void)events;
#endif
}

void TensorBoardMonitor::flush() {
  ZERO_CHECK(std::fflush(file_) == 0, MonitorError, "tensorboard: cannot write '", path_,
             "': ", std::strerror(errno));
}

}  // namespace zero::monitor
