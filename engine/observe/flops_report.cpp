// flops_report: the flops profiler's text in DeepSpeed's layout (profile summary, aggregated
// profile of the top modules per depth, detailed profile of every module and operator).
#include <zero/error.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "observe/flops_profiler.h"

namespace zero {

namespace {

// DeepSpeed's number_to_string: 2 decimals with a K/M/G/T prefix.
std::string units(double value, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(value) >= 1000 && i < 5) {
    value /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s%s", value, prefixes[i], unit);
  return buf;
}

std::string ms_text(double ms) {
  char buf[32];
  if (ms < 1)
    std::snprintf(buf, sizeof buf, "%.2f us", ms * 1000);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", ms);
  return buf;
}

std::string flops_per_s(double flops, double ms) {
  return ms > 0 ? units(flops / (ms / 1000), "FLOPS") : "n/a";
}

void row(std::string& out, const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-68s%s\n", (label + ":").c_str(), value.c_str());
  out += buf;
}

std::string pct(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

std::string flops_report(const FlopsProfiler& p, const FlopsReportInfo& info) {
  using Stats = FlopsProfiler::Stats;
  const Stats total = p.total();
  const double fwd_ms = p.latency_ms();
  const double flops = static_cast<double>(total.flops);
  const double bwd_factor = 2.0 + info.recompute_fwd_factor;
  std::string out =
      "-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  out += detail::str("Profile Summary at step ", info.step, ":\n");
  out +=
      "Notations: number of parameters (params), multiply-accumulate operations (MACs),\n"
      "floating-point operations (flops), floating-point operations per second (FLOPS),\n"
      "fwd latency (the program's forward, seen by the engine), bwd latency, step (weights\n"
      "update latency), iter latency (the whole step)\n\n";
  row(out, "world size", std::to_string(info.world_size));
  row(out, "data parallel size", std::to_string(info.data_parallel_size));
  row(out, "batch size per GPU", std::to_string(info.micro_batch));
  row(out, "params per GPU", units(static_cast<double>(info.params), ""));
  row(out, "fwd MACs per GPU", units(static_cast<double>(total.macs), "MACs"));
  row(out, "fwd flops per GPU", units(flops, ""));
  row(out, "fwd matmul flops per GPU (exact)", std::to_string(total.matmul_flops));
  row(out, "fwd flops per GPU (exact)", std::to_string(total.flops));
  row(out, "fwd latency", ms_text(fwd_ms));
  row(out, "fwd FLOPS per GPU = fwd flops per GPU / fwd latency", flops_per_s(flops, fwd_ms));
  if (info.iter_ms > 0) {
    row(out, "bwd latency", ms_text(info.bwd_ms));
    row(out, "bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency",
        flops_per_s((bwd_factor)*flops, info.bwd_ms));
    row(out, "fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency)",
        flops_per_s((1 + bwd_factor) * flops, fwd_ms + info.bwd_ms));
    row(out, "step latency", ms_text(info.step_ms));
    row(out, "iter latency", ms_text(info.iter_ms));
    row(out, "FLOPS per GPU = 3 * fwd flops per GPU / iter latency",
        flops_per_s((1 + bwd_factor) * flops, info.iter_ms));
    char buf[32];
    std::snprintf(
        buf, sizeof buf, "%.2f",
        static_cast<double>(info.micro_batch * info.data_parallel_size) / (info.iter_ms / 1000));
    row(out, "samples/second", buf);
  }

  // Modules: depth 0 the model, depth 1 the zero::Sharded blocks and the rest of the model.
  std::vector<std::pair<std::string, Stats>> depth1;
  Stats rest = total;
  rest.params = info.params;
  rest.latency_ms = fwd_ms;
  for (const std::string& name : p.module_order()) {
    const Stats& s = p.by_module().at(name);
    depth1.emplace_back(name, s);
    rest.flops -= s.flops;
    rest.macs -= s.macs;
    rest.matmul_flops -= s.matmul_flops;
    rest.latency_ms -= s.latency_ms;
    rest.params -= s.params;
  }
  if (!depth1.empty()) depth1.emplace_back("(rest of the model)", rest);
  Stats model = total;
  model.params = info.params;
  model.latency_ms = fwd_ms;
  const int64_t max_depth = info.module_depth < 0 ? 1 : std::min<int64_t>(info.module_depth, 1);

  out +=
      "\n----------------------------- Aggregated Profile per GPU -----------------------------\n";
  out += detail::str("Top ", info.top_modules,
                     " modules in terms of params, MACs or fwd latency at different model "
                     "depths:\n");
  auto top = [&](std::vector<std::pair<std::string, Stats>> mods, auto key, auto text) {
    std::sort(mods.begin(), mods.end(),
              [&](const auto& a, const auto& b) { return key(a.second) > key(b.second); });
    std::string s = "{";
    for (size_t i = 0; i < mods.size() && static_cast<int64_t>(i) < info.top_modules; ++i)
      s += (i ? ", '" : "'") + mods[i].first + "': '" + text(mods[i].second) + "'";
    return s + "}";
  };
  for (int64_t depth = 0; depth <= max_depth; ++depth) {
    const auto mods =
        depth == 0 ? std::vector<std::pair<std::string, Stats>>{{"model", model}} : depth1;
    if (mods.empty()) continue;
    out += detail::str("depth ", depth, ":\n");
    out += "    params      - " +
           top(
               mods, [](const Stats& s) { return static_cast<double>(s.params); },
               [](const Stats& s) { return units(static_cast<double>(s.params), ""); }) +
           "\n";
    out += "    MACs        - " +
           top(
               mods, [](const Stats& s) { return static_cast<double>(s.macs); },
               [](const Stats& s) { return units(static_cast<double>(s.macs), "MACs"); }) +
           "\n";
    out += "    fwd latency - " +
           top(
               mods, [](const Stats& s) { return s.latency_ms; },
               [](const Stats& s) { return ms_text(s.latency_ms); }) +
           "\n";
  }

  if (info.detailed) {
    out +=
        "\n------------------------------ Detailed Profile per GPU "
        "------------------------------\n";
    out +=
        "Each module: params, percentage of total params, MACs, percentage of total MACs, fwd "
        "latency, percentage of total fwd latency, fwd FLOPS\n";
    auto module_line = [&](const std::string& indent, const std::string& name, const Stats& s) {
      out += indent + name + ": " + units(static_cast<double>(s.params), "") + ", " +
             pct(static_cast<double>(s.params), static_cast<double>(info.params)) + " Params, " +
             units(static_cast<double>(s.macs), "MACs") + ", " +
             pct(static_cast<double>(s.macs), static_cast<double>(total.macs)) + " MACs, " +
             ms_text(s.latency_ms) + ", " + pct(s.latency_ms, fwd_ms) + " latency, " +
             flops_per_s(static_cast<double>(s.flops), s.latency_ms) + "\n";
    };
    module_line("", "model", model);
    if (max_depth >= 1)
      for (const auto& [name, s] : depth1) module_line("  ", name, s);
    out += "\nBy operator (flops and MACs exact; latency of the outermost calls, inclusive):\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-28s%10s%22s%22s%14s%10s\n", "operator", "calls", "flops",
                  "MACs", "latency", "flops %");
    out += buf;
    std::vector<std::pair<std::string, Stats>> ops(p.by_op().begin(), p.by_op().end());
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
      return a.second.flops != b.second.flops ? a.second.flops > b.second.flops
                                              : a.second.latency_ms > b.second.latency_ms;
    });
    for (const auto& [name, s] : ops) {
      std::snprintf(buf, sizeof buf, "%-28s%10lld%22lld%22lld%14s%10s\n", name.c_str(),
                    static_cast<long long>(s.calls), static_cast<long long>(s.flops),
                    static_cast<long long>(s.macs), ms_text(s.latency_ms).c_str(),
                    pct(static_cast<double>(s.flops), flops).c_str());
      out += buf;
    }
  }
  out += "------------------------------------------------------------------------------\n";
  return out;
}

}  // namespace zero
