// FlopsProfiler: a thread-local RecordFunction callback (inputs recorded, so shapes are known)
// that counts each aten operator's flops with DeepSpeed's formulas, and the module scopes that
// zero::Sharded opens around its blocks. Works with LibTorch 1.13 and 2.x (same callback API).
#include "observe/flops_profiler.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_set>

namespace zero {

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Operators with one flop per output element (their output has the largest input's size).
bool elementwise(const std::string& op) {
  static const std::unordered_set<std::string> kOps = {
      "aten::add",          "aten::add_",
      "aten::sub",          "aten::sub_",
      "aten::mul",          "aten::mul_",
      "aten::div",          "aten::div_",
      "aten::gelu",         "aten::relu",
      "aten::relu_",        "aten::silu",
      "aten::tanh",         "aten::sigmoid",
      "aten::exp",          "aten::sqrt",
      "aten::rsqrt",        "aten::pow",
      "aten::neg",          "aten::masked_fill_",
      "aten::where",        "aten::sum",
      "aten::mean",         "aten::_softmax",
      "aten::_log_softmax", "aten::nll_loss_forward"};
  return kOps.count(op) > 0;
}

thread_local FlopsProfiler* tls_profiler = nullptr;

struct ScopeContext : at::ObserverContext {
  std::chrono::steady_clock::time_point start;
  bool module = false;
  bool outermost = false;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  FlopsProfiler* p = tls_profiler;
  if (!p) return nullptr;
  const char* name = fn.name();
  auto ctx = std::make_unique<ScopeContext>();
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    const size_t prefix = std::strlen(kModuleScopePrefix);
    if (std::strncmp(name, kModuleScopePrefix, prefix) != 0) return nullptr;
    ctx->module = true;
    p->on_module_start(name + prefix);
  } else {
    ctx->outermost = p->depth == 0;
    ++p->depth;
    std::vector<std::vector<int64_t>> shapes;
    for (const c10::IValue& v : fn.inputs()) {
      if (v.isTensor() && v.toTensor().defined())
        shapes.push_back(v.toTensor().sizes().vec());
      else
        shapes.emplace_back();
    }
    p->on_op_start(name, shapes);
  }
  ctx->start = std::chrono::steady_clock::now();
  return ctx;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* base) {
  FlopsProfiler* p = tls_profiler;
  auto* ctx = static_cast<ScopeContext*>(base);
  if (!p || !ctx) return;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ctx->start)
          .count();
  if (ctx->module) {
    p->on_module_end(ms);
  } else {
    --p->depth;
    p->on_op_end(fn.name(), ms, ctx->outermost);
  }
}

}  // namespace

OpFlops op_flops(const std::string& op, const std::vector<std::vector<int64_t>>& shapes) {
  OpFlops f;
  auto shape = [&](size_t i) -> const std::vector<int64_t>& {
    static const std::vector<int64_t> kNone;
    return i < shapes.size() ? shapes[i] : kNone;
  };
  // a [.., m, k] x b [.., k, n]: the batch dimensions of a times m*k*n.
  auto matmul = [&](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < 2 || b.size() < 2) return int64_t{0};
    return numel(a) * b.back();
  };
  if (op == "aten::mm" || op == "aten::bmm") {
    f.macs = matmul(shape(0), shape(1));
  } else if (op == "aten::addmm" || op == "aten::baddbmm") {
    f.macs = matmul(shape(1), shape(2));
    if (f.macs > 0) f.flops = f.macs / shape(1).back();  // the added input: one per output
  } else if (op == "aten::native_layer_norm" || op == "aten::layer_norm") {
    f.flops = (op == "aten::native_layer_norm" ? 5 : 0) * numel(shape(0));
    return f;
  } else if (elementwise(op)) {
    int64_t most = 0;
    for (const auto& s : shapes) most = std::max(most, numel(s));
    f.flops = most;
    return f;
  } else {
    return f;
  }
  f.matmul_flops = 2 * f.macs;
  f.flops += f.matmul_flops;
  return f;
}

FlopsProfiler::~FlopsProfiler() {
  stop();
}

void FlopsProfiler::start() {
  if (running()) return;
  tls_profiler = this;
  depth = 0;
  started_ = std::chrono::steady_clock::now();
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_start, &on_end)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

void FlopsProfiler::stop() {
  if (!running()) return;
  at::removeCallback(handle_);
  handle_ = 0;
  if (tls_profiler == this) tls_profiler = nullptr;
  latency_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
}

FlopsProfiler::Stats FlopsProfiler::total() const {
  Stats t;
  for (const auto& [name, s] : ops_) {
    t.calls += s.calls;
    t.flops += s.flops;
    t.macs += s.macs;
    t.matmul_flops += s.matmul_flops;
    t.latency_ms += s.latency_ms;
  }
  return t;
}

void FlopsProfiler::on_op_start(const std::string& op,
                                const std::vector<std::vector<int64_t>>& shapes) {
  const OpFlops f = op_flops(op, shapes);
  Stats& s = ops_[op];
  ++s.calls;
  s.flops += f.flops;
  s.macs += f.macs;
  s.matmul_flops += f.matmul_flops;
  for (const std::string& m : module_stack_) {
    Stats& ms = modules_[m];
    ms.flops += f.flops;
    ms.macs += f.macs;
    ms.matmul_flops += f.matmul_flops;
  }
}

void FlopsProfiler::on_op_end(const std::string& op, double ms, bool outermost) {
  if (outermost) ops_[op].latency_ms += ms;
}

void FlopsProfiler::on_module_start(const std::string& module) {
  if (!modules_.count(module) || modules_[module].calls == 0)
    if (std::find(module_order_.begin(), module_order_.end(), module) == module_order_.end())
      module_order_.push_back(module);
  ++modules_[module].calls;
  module_stack_.push_back(module);
}

void FlopsProfiler::on_module_end(double ms) {
  if (module_stack_.empty()) return;
  modules_[module_stack_.back()].latency_ms += ms;
  module_stack_.pop_back();
}

}  // namespace zero
