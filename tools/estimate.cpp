// `zero estimate --params N [--largest-layer-params L] [--nodes K] [--gpus-per-node G]
// [--precision fp16|bf16|fp32] [--buffer-factor F] [--json]`: model-state memory per stage.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zero/engine/memory_estimate.h>
#include <zero/error.h>

#include "command.h"

namespace zero::tools {
namespace {

constexpr const char* kUsage =
    "usage: zero estimate --params N [--largest-layer-params L] [--nodes K] [--gpus-per-node G]\n"
    "                     [--precision fp16|bf16|fp32] [--buffer-factor F] [--json]\n"
    "  N and L accept plain numbers, scientific notation and K/M/B suffixes (1.3e9, 350M, 7B)";

// "7B" -> 7e9, "350M", "125K", "1.5e9", "1000000".
int64_t parse_count(const std::string& flag, const std::string& text) {
  double scale = 1;
  std::string number = text;
  if (!number.empty()) {
    const char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(number.back())));
    const std::string suffixes = "KMBGT";
    const double scales[] = {1e3, 1e6, 1e9, 1e9, 1e12};
    const auto at = suffixes.find(suffix);
    if (at != std::string::npos) {
      scale = scales[at];
      number.pop_back();
    }
  }
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZERO_CHECK(used == number.size() && !number.empty() && value >= 0 && std::isfinite(value),
             UsageError, flag, ": '", text, "' is not a count\n", kUsage);
  return static_cast<int64_t>(std::llround(value * scale));
}

int parse_int(const std::string& flag, const std::string& text) {
  const int64_t v = parse_count(flag, text);
  ZERO_CHECK(v <= 1 << 24, UsageError, flag, ": '", text, "' is too large");
  return static_cast<int>(v);
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%9.2f GiB",
                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string human_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

void print_json(const MemoryEstimateOptions& o, const std::vector<MemoryEstimateRow>& rows) {
  nlohmann::json out;
  out["params"] = o.total_params;
  out["largest_layer_params"] = o.largest_layer_params;
  out["nodes"] = o.nodes;
  out["gpus_per_node"] = o.gpus_per_node;
  out["precision"] = precision_name(o.precision);
  out["additional_buffer_factor"] = o.additional_buffer_factor;
  out["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j;
    j["stage"] = r.stage;
    j["offload_optimizer"] = r.offload_optimizer ? "cpu" : "none";
    j["offload_param"] = r.offload_param ? "cpu" : "none";
    j["device_bytes"] = r.device_bytes;
    j["host_bytes"] = r.host_bytes;
    j["device_parameters_bytes"] = r.device.parameters_bytes;
    j["device_gradients_bytes"] = r.device.gradients_bytes;
    j["device_master_params_bytes"] = r.device.master_params_bytes;
    j["device_optimizer_states_bytes"] = r.device.optimizer_states_bytes;
    j["deepspeed_device_bytes"] =
        r.deepspeed_device_bytes ? nlohmann::json(*r.deepspeed_device_bytes) : nullptr;
    j["deepspeed_host_bytes"] =
        r.deepspeed_host_bytes ? nlohmann::json(*r.deepspeed_host_bytes) : nullptr;
    out["rows"].push_back(j);
  }
  std::cout << out.dump(2) << "\n";
}

void print_table(const MemoryEstimateOptions& o, const std::vector<MemoryEstimateRow>& rows) {
  std::cout
      << "Model states of " << human_count(o.total_params) << " parameters (largest layer "
      << human_count(o.largest_layer_params) << "), " << o.nodes << " node(s) x " << o.gpus_per_node
      << " device(s), " << precision_name(o.precision) << ", Adam.\n"
      << "per host: the node's " << o.gpus_per_node << " rank(s), x" << o.additional_buffer_factor
      << " buffer factor. DeepSpeed: estimate_zero{2,3}_model_states_mem_needs (zero_init=0).\n\n"
      << "stage  offload_optimizer  offload_param      per device       per host |  DeepSpeed: "
         "device"
         "           host\n";
  for (const auto& r : rows) {
    char head[64];
    std::snprintf(head, sizeof head, "%5d  %-17s  %-13s", r.stage,
                  r.offload_optimizer ? "cpu" : "none", r.offload_param ? "cpu" : "none");
    std::cout << head << "  " << gib(r.device_bytes) << "  " << gib(r.host_bytes) << " |";
    if (r.deepspeed_device_bytes)
      std::cout << "      " << gib(*r.deepspeed_device_bytes) << "  "
                << gib(*r.deepspeed_host_bytes);
    std::cout << "\n";
  }
  if (o.largest_layer_params == 0)
    std::cout
        << "\nstage 3 device numbers exclude the gathered layer: pass --largest-layer-params.\n";
}

int run_estimate(const std::vector<std::string>& args) {
  MemoryEstimateOptions o;
  bool json = false, have_params = false;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const auto eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--json") {
      json = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage << "\n";
      return 0;
    }
    if (eq == std::string::npos) {
      ZERO_CHECK(i + 1 < args.size(), UsageError, flag, ": missing value\n", kUsage);
      value = args[++i];
    }
    if (flag == "--params") {
      o.total_params = parse_count(flag, value);
      have_params = true;
    } else if (flag == "--largest-layer-params") {
      o.largest_layer_params = parse_count(flag, value);
    } else if (flag == "--nodes") {
      o.nodes = parse_int(flag, value);
    } else if (flag == "--gpus-per-node") {
      o.gpus_per_node = parse_int(flag, value);
    } else if (flag == "--precision") {
      o.precision = parse_precision(value);
    } else if (flag == "--buffer-factor") {
      try {
        o.additional_buffer_factor = std::stod(value);
      } catch (const std::exception&) {
        throw UsageError("--buffer-factor: '" + value + "' is not a number");
      }
    } else {
      throw UsageError("unknown option '" + flag + "'\n" + kUsage);
    }
  }
  ZERO_CHECK(have_params, UsageError, "--params is required\n", kUsage);
  const auto rows = estimate_memory(o);
  if (json)
    print_json(o, rows);
  else
    print_table(o, rows);
  return 0;
}

}  // namespace

ZERO_COMMAND(
    "estimate",
    "model-state memory per device and per host for ZeRO stages 0-3, with and without offload",
    run_estimate);

}  // namespace zero::tools
