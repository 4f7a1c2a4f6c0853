// CommsLog: DeepSpeed's comms_logger. The backends' one collective door records every
// collective it ran (op, message size, latency); the log keeps count, latencies and bandwidths.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace zero {

struct CommsLogOptions {
  bool verbose = false;  // print every collective as it completes (rank 0)
  bool prof_all = true;  // record every op; else only those in prof_ops
  bool debug = false;    // record names carry the caller (the engine phase that issued the op)
  std::vector<std::string> prof_ops;
  int rank = 0;
};

// DeepSpeed's calc_bw_log: algorithm and bus bandwidth in Gbps of one collective `op` whose
// message is `msg_bytes` (all_gather / reduce_scatter: one rank's part; all_reduce, broadcast:
// the tensor) on `world` ranks taking `latency_ms`.
std::pair<double, double> comm_bandwidth_gbps(const std::string& op, int64_t msg_bytes, int world,
                                              double latency_ms);

// DeepSpeed's trimmed mean (drops round(n * fraction) values at each end).
double trim_mean(std::vector<double> values, double fraction);

class CommsLog {
 public:
  explicit CommsLog(CommsLogOptions options);

  // One row of the summary: op (with the caller when debug) and message size.
  struct Entry {
    std::string name;
    int64_t msg_bytes = 0;
    int64_t count = 0;
    double total_ms = 0;
    double avg_ms = 0;        // trimmed mean (10%), as DeepSpeed
    double algbw = 0;         // Gbps, trimmed mean
    double busbw = 0;         // Gbps, trimmed mean
    int64_t total_bytes = 0;  // count x message size
  };

  bool wants(const char* op) const;
  // Called by a backend when a collective completed: `buffer_bytes` is the whole buffer (the
  // input of a reduce-scatter, the output of an all-gather, the tensor of an all-reduce), from
  // which the message size follows DeepSpeed's convention. Thread-safe.
  void record(const char* op, int64_t buffer_bytes, int world, double latency_ms,
              const char* caller);
  std::vector<Entry> entries() const;  // by name, then message size
  // DeepSpeed's log_summary table (Comm. Op, Message Size, Count, Total Latency(ms), ...).
  std::string summary() const;
  void reset();

  // The engine phase issuing collectives now (debug mode's caller), or "": one per process,
  // so the collectives autograd's device thread issues during backward carry "backward" too.
  static const char* caller();
  class CallerScope {
   public:
    explicit CallerScope(const char* name);
    ~CallerScope();
    CallerScope(const CallerScope&) = delete;
    CallerScope& operator=(const CallerScope&) = delete;

   private:
    const char* previous_;
  };

 private:
  struct Samples {
    int64_t count = 0;
    std::vector<double> latency_ms, algbw, busbw;
  };
  CommsLogOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, std::map<int64_t, Samples>> records_;
};

// "1.5 MB" as DeepSpeed's convert_size.
std::string convert_size(int64_t bytes);

}  // namespace zero
