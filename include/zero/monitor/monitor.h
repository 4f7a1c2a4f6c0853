// Training monitors with DeepSpeed's file layout (deepspeed/monitor/): a Monitor takes
// (name, value, step) events; MonitorSet fans them out to the enabled csv_monitor/tensorboard.
#pragma once

#include <zero/error.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zero::monitor {

// A monitor file or directory that cannot be created or written.
class MonitorError : public Error {
 public:
  using Error::Error;
};

// One scalar, as DeepSpeed's (log_name, value, step) tuple; the step is the number of samples
// trained so far for the engine's events (DeepSpeed's global_samples).
struct Event {
  std::string name;  // e.g. "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;
};

// Rank 0's writer of one backend. write() buffers; flush() puts everything on disk.
class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual void write(const std::vector<Event>& events) = 0;
  virtual void flush() = 0;
  virtual const std::string& log_dir() const = 0;
};

// Where DeepSpeed's monitors write: os.path.join(output_path, job_name) (job_name alone when
// output_path is empty; job_name itself when it is absolute).
std::string log_dir_of(const std::string& output_path, const std::string& job_name);

// Python's repr() of a float ("0.001", "1e-05", "65536.0", "nan", "inf"), as Python's csv
// module writes a float.
std::string python_float_repr(double value);

// The enabled monitors of one job; flushes them when destroyed.
class MonitorSet {
 public:
  MonitorSet() = default;
  MonitorSet(MonitorSet&&) = default;
  MonitorSet& operator=(MonitorSet&&) = default;
  ~MonitorSet();
  void add(std::unique_ptr<Monitor> monitor);
  bool enabled() const { return !monitors_.empty(); }
  void write(const std::vector<Event>& events);
  void flush();
  const std::vector<std::unique_ptr<Monitor>>& monitors() const { return monitors_; }

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
};

}  // namespace zero::monitor
