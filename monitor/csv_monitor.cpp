// CsvMonitor: DeepSpeed's csv_monitor.py file for file (names, header, append mode, Python csv
// formatting), with the files kept open and flushed by flush() instead of reopened per event.
#include <zero/monitor/csv_monitor.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zero::monitor {
namespace {

// Python csv's QUOTE_MINIMAL: quote a field holding the delimiter, the quote or a line end.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

std::string csv_file_name(const std::string& event_name) {
  std::string name = event_name;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

std::string csv_header(const std::string& event_name) {
  const size_t slash = event_name.rfind('/');
  return slash == std::string::npos ? event_name : event_name.substr(slash + 1);
}

CsvMonitor::CsvMonitor(const std::string& output_path, const std::string& job_name)
    : log_dir_(log_dir_of(output_path, job_name)) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  ZERO_CHECK(!ec, MonitorError, "csv_monitor: cannot create the directory '", log_dir_,
             "': ", ec.message(), " (csv_monitor.output_path / job_name)");
}

CsvMonitor::~CsvMonitor() {
  for (auto& [name, file] : files_) std::fclose(file);
}

void CsvMonitor::write(const std::vector<Event>& events) {
  for (const Event& e : events) {
    const std::string name = csv_file_name(e.name);
    auto it = files_.find(name);
    if (it == files_.end()) {
      const std::string path = log_dir_ + "/" + name;
      std::FILE* f = std::fopen(path.c_str(), "a");
      ZERO_CHECK(f, MonitorError, "csv_monitor: cannot open '", path,
                 "' for appending: ", std::strerror(errno));
      it = files_.emplace(name, f).first;
      const std::string header = "step," + csv_field(csv_header(e.name)) + "\r\n";
      std::fputs(header.c_str(), f);
    }
    const std::string row = std::to_string(e.step) + "," + python_float_repr(e.value) + "\r\n";
    ZERO_CHECK(std::fputs(row.c_str(), it->second) >= 0, MonitorError,
               "csv_monitor: cannot write '", log_dir_, "/", name, "': ", std::strerror(errno));
  }
}

void CsvMonitor::flush() {
  for (auto& [name, file] : files_)
    ZERO_CHECK(std::fflush(file) == 0, MonitorError, "csv_monitor: cannot write '", log_dir_, "/",
               name, "': ", std::strerror(errno));
}

CsvSeries read_csv_series(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZERO_CHECK(in, MonitorError, "cannot open '", path, "'");
  CsvSeries series;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t comma = line.find(',');
    ZERO_CHECK(comma != std::string::npos, MonitorError, path, ":", line_no,
               ": expected 'step,value', got '", line, "'");
    const std::string first = line.substr(0, comma), second = line.substr(comma + 1);
    if (first == "step") {  // a header: the first one, or another run appending to the file
      if (series.column.empty()) series.column = second;
      continue;
    }
    char* end = nullptr;
    const long long step = std::strtoll(first.c_str(), &end, 10);
    ZERO_CHECK(end && *end == '\0' && !first.empty(), MonitorError, path, ":", line_no,
               ": bad step '", first, "'");
    const double value = std::strtod(second.c_str(), &end);
    ZERO_CHECK(end && *end == '\0' && !second.empty(), MonitorError, path, ":", line_no,
               ": bad value '", second, "'");
    series.points.emplace_back(step, value);
  }
  return series;
}

}  // namespace zero::monitor
