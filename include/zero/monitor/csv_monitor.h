// DeepSpeed's csv_monitor: one CSV file per event name in output_path/job_name, a header
// "step,<last path segment>" written the first time a name is written by this process, rows
// "step,value" appended (Python's csv module: "\r\n" line ends, minimal quoting).
#pragma once

#include <zero/monitor/monitor.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zero::monitor {

// "Train/Samples/train_loss" -> "Train_Samples_train_loss.csv" ('/' and ' ' become '_').
std::string csv_file_name(const std::string& event_name);
// "Train/Samples/train_loss" -> "train_loss": the text after the last '/'.
std::string csv_header(const std::string& event_name);

class CsvMonitor : public Monitor {
 public:
  // Creates the log directory (and its parents); MonitorError when it cannot.
  CsvMonitor(const std::string& output_path, const std::string& job_name);
  ~CsvMonitor() override;
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;
  void write(const std::vector<Event>& events) override;
  void flush() override;
  const std::string& log_dir() const override { return log_dir_; }

 private:
  std::string log_dir_;
  std::map<std::string, std::FILE*> files_;  // by file name, opened for appending
};

// One CSV file of the monitor read back: the (step, value) rows after the header, and the
// header's column name. MonitorError for a file that is missing or not in that form.
struct CsvSeries {
  std::string column;
  std::vector<std::pair<int64_t, double>> points;
};
CsvSeries read_csv_series(const std::string& path);

}  // namespace zero::monitor
