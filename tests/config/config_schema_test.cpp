// Walks the parser's whole schema (zero::config_schema: every key it reads, in every section and
// for every optimizer and schedule) and holds each key to the policy: set to a value other than
// the default, it is honoured (the Config changes), refused (an error) or reported (a warning).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <zero/config/config_json.h>

namespace {

using nlohmann::json;
using zero::ConfigSchemaKey;

// Documents that together make the parser ask for every key it knows: each optimizer, each
// schedule, the optional sections, the old name of bf16. Stage 3, so that stage 3 settings count.
std::vector<json> bases() {
  const std::map<std::string, json> schedules = {
      {"WarmupLR", json::object()},
      {"WarmupDecayLR", {{"total_num_steps", 1000}}},
      {"WarmupCosineLR", {{"total_num_steps", 1000}}},
      {"OneCycle", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}}},
      {"LRRangeTest", json::object()}};
  std::vector<json> out;
  for (const char* optimizer : {"Adam", "AdamW", "SGD"}) {
    for (const auto& [schedule, params] : schedules) {
      json doc = {{"train_micro_batch_size_per_gpu", 1},
                  {"zero_optimization", {{"stage", 3}}},
                  {"optimizer", {{"type", optimizer}, {"params", json::object()}}},
                  {"scheduler", {{"type", schedule}, {"params", params}}},
                  {"tensor_parallel", json::object()}};
      out.push_back(doc);
    }
  }
  json legacy = out.front();
  legacy["bfloat16"] = json::object();
  out.push_back(legacy);
  return out;
}

// Values to try, by how the parser reads the key; at most one of them can be the default.
std::vector<json> candidates(const ConfigSchemaKey& k) {
  std::vector<json> out;
  switch (k.kind) {
    case ConfigSchemaKey::Kind::kBool:
      return {true, false};
    case ConfigSchemaKey::Kind::kInt: {
      std::set<int64_t> values;
      for (int64_t step : {0, 1, 7, 12345})
        if (k.int_max - step >= k.int_min) values.insert(k.int_min + step);
      values.insert(k.int_max);
      for (int64_t v : values) out.push_back(v);
      return out;
    }
    case ConfigSchemaKey::Kind::kFloat: {
      std::set<double> values;
      for (double step : {0.0, 0.25, 0.5})
        if (k.float_max - k.float_min >= step) values.insert(k.float_min + step);
      if (std::isfinite(k.float_max)) values.insert(k.float_max);
      for (double v : values) out.push_back(v);
      return out;
    }
    case ConfigSchemaKey::Kind::kString:
      return {"x", "y"};
    case ConfigSchemaKey::Kind::kEnum:
      for (const std::string& v : k.values) out.push_back(v);
      return out;
    case ConfigSchemaKey::Kind::kAny:
      break;
  }
  return {json{{"enabled", true}}, true, "x", json::array({"x"}), json::array({0.5, 0.25}), 7};
}

// `doc` with `value` at the dotted `path` (objects created on the way).
json with(json doc, const std::string& path, const json& value) {
  json* cur = &doc;
  std::stringstream parts(path);
  std::vector<std::string> keys;
  for (std::string part; std::getline(parts, part, '.');) keys.push_back(part);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    json& next = (*cur)[keys[i]];
    if (!next.is_object()) next = json::object();
    cur = &next;
  }
  (*cur)[keys.back()] = value;
  return doc;
}

bool names(const zero::ConfigDiagnostic& d, const std::string& path) {
  return d.path == path ||
         (d.path.size() > path.size() && d.path.compare(0, path.size(), path) == 0 &&
          (d.path[path.size()] == '.' || d.path[path.size()] == '['));
}

enum class Outcome { kHonoured, kRefused, kReported, kSilent };

struct Tried {
  Outcome outcome;
  std::string detail;
};

Tried judge(const json& base, const std::string& path, const json& value) {
  const zero::ParsedConfig before = zero::parse_config_json(base);
  zero::ParsedConfig after;
  try {
    after = zero::parse_config_json(with(base, path, value));
  } catch (const zero::ConfigFileError& e) {
    return {Outcome::kRefused, e.what()};
  }
  for (const zero::ConfigDiagnostic& w : after.warnings) {
    if (!names(w, path)) continue;
    bool known = std::any_of(
        before.warnings.begin(), before.warnings.end(),
        [&](const zero::ConfigDiagnostic& b) { return b.to_string() == w.to_string(); });
    if (!known) return {Outcome::kReported, w.to_string()};
  }
  if (zero::to_json_string(after.config) != zero::to_json_string(before.config))
    return {Outcome::kHonoured, ""};
  return {Outcome::kSilent, ""};
}

// Values other than the default that mean the same as it (silent, rightly).
const std::map<std::string, std::set<std::string>> kSameAsDefault = {
    {"tensor_parallel.autotp_size", {"0", "1"}},  // both: no tensor parallelism
};

// Each key once, with the first base document that makes the parser ask for it. Sections (keys
// with keys below them) are left out: their keys are walked one by one.
struct Entry {
  ConfigSchemaKey key;
  json base;
};
std::vector<Entry> schema() {
  std::vector<Entry> out;
  std::set<std::string> seen;
  for (const json& base : bases()) {
    for (const ConfigSchemaKey& k : zero::config_schema(base)) {
      if (seen.insert(k.path).second) out.push_back({k, base});
    }
  }
  std::vector<Entry> leaves;
  for (const Entry& e : out) {
    bool section = std::any_of(out.begin(), out.end(), [&](const Entry& o) {
      return o.key.path.size() > e.key.path.size() &&
             o.key.path.compare(0, e.key.path.size() + 1, e.key.path + ".") == 0;
    });
    if (!section) leaves.push_back(e);
  }
  return leaves;
}

}  // namespace

TEST_CASE("the schema comes from the parser and covers every section") {
  std::set<std::string> paths;
  for (const Entry& e : schema()) paths.insert(e.key.path);
  INFO(paths.size() << " keys");
  CHECK(paths.size() > 200);
  for (const char* p : {"train_batch_size",
                        "zero_optimization.stage",
                        "zero_optimization.contiguous_gradients",
                        "zero_optimization.offload_optimizer.device",
                        "zero_optimization.offload_param.max_in_cpu",
                        "zero_optimization.allgather_sequential",
                        "fp16.loss_scale",
                        "bf16.immediate_grad_update",
                        "bfloat16.enabled",
                        "optimizer.legacy_fusion",
                        "optimizer.params.torch_adam",
                        "optimizer.params.momentum",
                        "scheduler.params.cycle_min_lr",
                        "scheduler.params.lr_range_test_staircase",
                        "checkpoint.parallel_write.pipeline_stage",
                        "aio.use_gds",
                        "aio.thread_count",
                        "tensor_parallel.autotp_size",
                        "comms_logger.prof_ops",
                        "flops_profiler.output_file",
                        "activation_checkpointing.profile",
                        "data_types.grad_accum_dtype",
                        "wandb",
                        "compile"}) {
    CHECK(paths.count(p) == 1);
  }
  // Typed where the parser reads a type, also for aliases it reads only when given.
  for (const Entry& e : schema()) {
    if (e.key.path == "zero_optimization.allgather_sequential" ||
        e.key.path == "zero_optimization.stage3_gather_fp16_weights_on_model_save")
      CHECK(e.key.kind == ConfigSchemaKey::Kind::kBool);
    if (e.key.path == "aio.thread_count") CHECK(e.key.kind == ConfigSchemaKey::Kind::kInt);
  }
}

TEST_CASE("every key is honoured, refused or reported at every value but its default") {
  int keys = 0;
  for (const Entry& e : schema()) {
    ++keys;
    std::set<std::string> silent;
    auto same = kSameAsDefault.find(e.key.path);
    std::string tried;
    for (const json& value : candidates(e.key)) {
      Tried t = judge(e.base, e.key.path, value);
      const char* word = t.outcome == Outcome::kHonoured   ? "honoured"
                         : t.outcome == Outcome::kRefused  ? "refused"
                         : t.outcome == Outcome::kReported ? "reported"
                                                           : "silent";
      tried +=
          "\n  " + value.dump() + ": " + word + (t.detail.empty() ? "" : " (" + t.detail + ")");
      if (t.outcome != Outcome::kSilent) continue;
      bool equivalent = same != kSameAsDefault.end() && same->second.count(value.dump());
      silent.insert(equivalent ? "default" : value.dump());
    }
    INFO(e.key.path << ":" << tried);
    // One silent value is the default (or a value equal to it); two mean the key is dropped.
    CHECK(silent.size() <= 1);
  }
  CHECK(keys > 200);
}
