// FlopsProfiler (DeepSpeed's flops_profiler): counts the flops, MACs and latency of every aten
// operator the program's forward runs, through LibTorch's RecordFunction callbacks (with shapes),
// and attributes them to the zero::Sharded blocks whose user scopes enclose them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zero {

// Flops and MACs of one call of aten operator `op` (e.g. "aten::addmm") on inputs of these
// shapes (an empty shape for a non-tensor input): DeepSpeed's formulas (a matmul of m x k by
// k x n is m*k*n MACs and 2*m*k*n flops; element-wise ops one flop per output element; layer
// norm 5 per element). `matmul_flops` is the part spent in matrix products. Operators without a
// formula (views, copies, embedding lookups) count 0.
struct OpFlops {
  int64_t flops = 0;
  int64_t macs = 0;
  int64_t matmul_flops = 0;
};
OpFlops op_flops(const std::string& op, const std::vector<std::vector<int64_t>>& shapes);

class FlopsProfiler {
 public:
  struct Stats {
    int64_t calls = 0;
    int64_t flops = 0;
    int64_t macs = 0;
    int64_t matmul_flops = 0;
    double latency_ms = 0;  // operators: outermost calls only (inclusive); modules: their scope
    int64_t params = 0;     // modules only
  };

  FlopsProfiler() = default;
  ~FlopsProfiler();
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  // Starts counting the operators this thread runs (a thread-local RecordFunction callback);
  // stop() ends it. One profiler may run per thread.
  void start();
  void stop();
  bool running() const { return handle_ != 0; }

  const std::map<std::string, Stats>& by_op() const { return ops_; }
  const std::map<std::string, Stats>& by_module() const { return modules_; }
  const std::vector<std::string>& module_order() const { return module_order_; }
  Stats total() const;
  double latency_ms() const { return latency_ms_; }
  void set_module_params(const std::string& module, int64_t params) {
    modules_[module].params = params;
  }

  // Called by the callbacks.
  void on_op_start(const std::string& op, const std::vector<std::vector<int64_t>>& shapes);
  void on_op_end(const std::string& op, double ms, bool outermost);
  void on_module_start(const std::string& module);
  void on_module_end(double ms);
  int depth = 0;  // nesting of operator calls on this thread

 private:
  uint64_t handle_ = 0;
  std::chrono::steady_clock::time_point started_;
  double latency_ms_ = 0;
  std::map<std::string, Stats> ops_, modules_;
  std::vector<std::string> module_order_;  // first-seen order
  std::vector<std::string> module_stack_;
};

// What the report says besides the profiler's counts.
struct FlopsReportInfo {
  int64_t step = 0;
  int world_size = 1;
  int data_parallel_size = 1;  // world / tensor-parallel degree: the ranks that see other samples
  int64_t micro_batch = 0;     // samples per rank per forward
  int64_t params = 0;       // trainable parameters of the model
  double bwd_ms = 0;        // backward of the profiled step (engine timers)
  double step_ms = 0;       // optimizer step of the profiled step
  double iter_ms = 0;       // the whole profiled step
  double recompute_fwd_factor = 0;
  int64_t module_depth = -1;
  int64_t top_modules = 1;
  bool detailed = true;
};
// DeepSpeed's "Flops Profiler" summary: totals, achieved FLOPS, the top modules and, when
// detailed, every operator.
std::string flops_report(const FlopsProfiler& profiler, const FlopsReportInfo& info);

// The user-scope name prefix zero::Sharded uses for its blocks ("zero::module blocks.0").
constexpr const char* kModuleScopePrefix = "zero::module ";

}  // namespace zero
