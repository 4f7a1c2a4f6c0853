// DeepSpeed's tensorboard monitor without Python: TensorBoard event files written as
// torch.utils.tensorboard.SummaryWriter writes them (TFRecord framing, Event/Summary protos).
#pragma once

#include <zero/monitor/monitor.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zero::monitor {

// Whether this build can write TensorBoard files (it needs protobuf at build time).
bool tensorboard_available();

// TFRecord's checksum: CRC32C rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord: uint64 length (little-endian), masked CRC of those 8 bytes, payload, masked
// CRC of the payload.
std::string tfrecord_frame(const std::string& payload);

class TensorBoardMonitor : public Monitor {
 public:
  // Creates output_path/job_name and in it events.out.tfevents.<10-digit time>.<host>.<pid>.<n>
  // (n counts this process's writers from 0), starting with the brain.Event:2 version event.
  // MonitorError when the directory or file cannot be created, or tensorboard_available() is
  // false.
  TensorBoardMonitor(const std::string& output_path, const std::string& job_name);
  ~TensorBoardMonitor() override;
  TensorBoardMonitor(const TensorBoardMonitor&) = delete;
  TensorBoardMonitor& operator=(const TensorBoardMonitor&) = delete;
  // One Event per scalar (wall time, step, a Summary with one simple_value, stored as float32),
  // as SummaryWriter.add_scalar writes it.
  void write(const std::vector<Event>& events) override;
  void flush() override;
  const std::string& log_dir() const override { return log_dir_; }
  const std::string& file_path() const { return path_; }

 private:
  void append_record(const std::string& payload);
  std::string log_dir_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zero::monitor
