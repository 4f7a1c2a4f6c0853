// CommsLog (comms_logger): records of the collectives the backends ran, DeepSpeed's bandwidth
// formulas and summary table, and Communicator's hook through which a backend finds its log.
#include <zero/comm/comms_log.h>
#include <zero/comm/communicator.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace zero {

namespace {
// Process-wide, not per thread: on CUDA, autograd runs the gradient hooks (and so backward's
// collectives) on its device thread while the engine's thread waits inside backward().
std::atomic<const char*> current_caller{""};

bool gathers_or_scatters(const std::string& op) {
  return op == "all_gather" || op == "reduce_scatter";
}
}  // namespace

std::pair<double, double> comm_bandwidth_gbps(const std::string& op, int64_t msg_bytes, int world,
                                              double latency_ms) {
  if (latency_ms <= 0) return {0.0, 0.0};
  const double n = world;
  double size = static_cast<double>(msg_bytes), tput = 0, busbw = 0;
  if (gathers_or_scatters(op)) {
    size *= n;
    tput = size / latency_ms;
    busbw = size / latency_ms * ((n - 1) / n);
  } else if (op == "all_reduce") {
    tput = size * 2 / latency_ms;
    busbw = size / latency_ms * (2 * (n - 1) / n);
  } else {  // broadcast, barrier
    tput = size / latency_ms;
    busbw = tput;
  }
  // bytes per ms -> Gbps
  return {tput * 8 / 1e6, busbw * 8 / 1e6};
}

double trim_mean(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const size_t k = static_cast<size_t>(std::lround(static_cast<double>(n) * fraction));
  if (2 * k >= n) return 0;
  return std::accumulate(values.begin() + k, values.end() - k, 0.0) /
         static_cast<double>(n - 2 * k);
}

std::string convert_size(int64_t bytes) {
  if (bytes <= 0) return "0B";
  static const char* kNames[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  const int i = std::min(5, static_cast<int>(std::floor(std::log(bytes) / std::log(1024.0))));
  const double scaled = std::round(bytes / std::pow(1024.0, i) * 100) / 100;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g %s", scaled, kNames[i]);
  return buf;
}

CommsLog::CommsLog(CommsLogOptions options) : options_(std::move(options)) {}

bool CommsLog::wants(const char* op) const {
  if (options_.prof_all) return true;
  return std::find(options_.prof_ops.begin(), options_.prof_ops.end(), op) !=
         options_.prof_ops.end();
}

void CommsLog::record(const char* op, int64_t buffer_bytes, int world, double latency_ms,
                      const char* caller) {
  const int64_t msg = gathers_or_scatters(op) && world > 0 ? buffer_bytes / world : buffer_bytes;
  const auto [algbw, busbw] = comm_bandwidth_gbps(op, msg, world, latency_ms);
  std::string name = op;
  if (options_.debug && caller && *caller) name += std::string(" | [Caller: ") + caller + "]";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Samples& s = records_[name][msg];
    ++s.count;
    s.latency_ms.push_back(latency_ms);
    s.algbw.push_back(algbw);
    s.busbw.push_back(busbw);
  }
  if (options_.verbose && options_.rank == 0)
    spdlog::info(
        "[rank 0] comm op: {} | time (ms): {:.2f} | msg size: {} | algbw (Gbps): {:.2f} | busbw "
        "(Gbps): {:.2f}",
        name, latency_ms, convert_size(msg), algbw, busbw);
}

std::vector<CommsLog::Entry> CommsLog::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Entry> out;
  for (const auto& [name, sizes] : records_)
    for (const auto& [msg, s] : sizes) {
      Entry e;
      e.name = name;
      e.msg_bytes = msg;
      e.count = s.count;
      e.total_ms = std::accumulate(s.latency_ms.begin(), s.latency_ms.end(), 0.0);
      e.avg_ms = trim_mean(s.latency_ms, 0.1);
      e.algbw = trim_mean(s.algbw, 0.1);
      e.busbw = trim_mean(s.busbw, 0.1);
      e.total_bytes = msg * s.count;
      out.push_back(e);
    }
  return out;
}

std::string CommsLog::summary() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op",
                "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
                "busbw_avg (Gbps)", "Total Bytes");
  out += line;
  std::string last;
  for (const Entry& e : entries()) {
    if (e.name != last) out += e.name + "\n";
    last = e.name;
    std::snprintf(line, sizeof line, "%-20s%-20s%-20lld%-20.2f%-20.2f%-20.2f%-20.2f%-20s\n", "",
                  convert_size(e.msg_bytes).c_str(), static_cast<long long>(e.count), e.total_ms,
                  e.avg_ms, e.algbw, e.busbw, convert_size(e.total_bytes).c_str());
    out += line;
  }
  return out;
}

void CommsLog::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.clear();
}

const char* CommsLog::caller() {
  return current_caller;
}

CommsLog::CallerScope::CallerScope(const char* name) : previous_(current_caller) {
  current_caller = name;
}
CommsLog::CallerScope::~CallerScope() {
  current_caller = previous_;
}

void Communicator::set_comms_log(std::shared_ptr<CommsLog> log) {
  std::lock_guard<std::mutex> lock(log_mutex_);
  comms_log_ = std::move(log);
}

std::shared_ptr<CommsLog> Communicator::comms_log() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return comms_log_;
}

}  // namespace zero
