// ActivationCheckpointing: the counters every checkpoint of one engine reports to (bytes saved,
// where, copies, recompute times), behind one mutex.
#include <zero/engine/activation/activation_checkpointing.h>

#include <algorithm>
#include <cstdio>

namespace zero {

std::shared_ptr<ActivationCheckpointing> ActivationCheckpointing::process_default() {
  static const auto instance = std::make_shared<ActivationCheckpointing>();
  return instance;
}

ActivationCheckpointStats ActivationCheckpointing::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void ActivationCheckpointing::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_live_bytes = stats_.live_bytes;
  stats_.peak_host_live_bytes = stats_.host_live_bytes;
}

void ActivationCheckpointing::saved(int64_t bytes, bool on_host) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.checkpoints;
  int64_t& live = on_host ? stats_.host_live_bytes : stats_.live_bytes;
  int64_t& peak = on_host ? stats_.peak_host_live_bytes : stats_.peak_live_bytes;
  live += bytes;
  peak = std::max(peak, live);
}

void ActivationCheckpointing::released(int64_t bytes, bool on_host) {
  std::lock_guard<std::mutex> lock(mutex_);
  (on_host ? stats_.host_live_bytes : stats_.live_bytes) -= bytes;
}

void ActivationCheckpointing::moved(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.moved_bytes += bytes;
}

void ActivationCheckpointing::forward_timed(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.forward_seconds += seconds;
}

void ActivationCheckpointing::recomputed(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.recomputes;
  stats_.recompute_seconds += seconds;
}

std::string ActivationCheckpointing::describe() const {
  const ActivationCheckpointStats s = stats();
  char line[256];
  std::snprintf(line, sizeof line,
                "%lld checkpoints, %lld recomputes, peak saved %.2f MiB (host %.2f MiB), "
                "forward %.3f s, recompute %.3f s",
                static_cast<long long>(s.checkpoints), static_cast<long long>(s.recomputes),
                static_cast<double>(s.peak_live_bytes) / (1 << 20),
                static_cast<double>(s.peak_host_live_bytes) / (1 << 20), s.forward_seconds,
                s.recompute_seconds);
  return line;
}

}  // namespace zero
