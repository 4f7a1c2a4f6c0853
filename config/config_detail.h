// Internals of the ds_config parser: the diagnostics context, typed readers over one JSON
// object ("section") that know which keys exist, and the per-section readers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include <zero/config/config.h>
#include <zero/config/config_json.h>

namespace zero::detail {

// Collects errors and warnings with their file and line.
class Ctx {
 public:
  Ctx(std::string source, const std::unordered_map<std::string, int>* lines)
      : source_(std::move(source)), lines_(lines) {}

  void error(const std::string& path, const std::string& message) {
    errors.push_back(make(path, message));
  }
  void warn(const std::string& path, const std::string& message) {
    warnings.push_back(make(path, message));
  }
  int line_of(const std::string& path) const;
  bool is_overridden(const std::string& path) const;
  // Records a key the parser reads (when `schema` is set): kind kAny until a typed read says more.
  void note_key(ConfigSchemaKey key);

  std::vector<ConfigDiagnostic> errors;
  std::vector<ConfigDiagnostic> warnings;
  std::set<std::string> overridden;  // paths set by ConfigOptions::overrides
  std::set<std::string> autos;       // paths whose value was "auto" and took the default
  std::vector<ConfigSchemaKey>* schema = nullptr;  // config_schema(): every key asked for

 private:
  ConfigDiagnostic make(const std::string& path, const std::string& message) const;
  std::string source_;
  const std::unordered_map<std::string, int>* lines_;
};

enum class Unknown { kError, kWarn };

// Reads the keys of one JSON object into typed fields. Every reader call names a key the section
// knows (whether or not the file has it); finish() reports the keys of the file nobody asked for.
// A value "auto" leaves the field at its default (recorded in Ctx::autos). Readers return true
// when they stored a value from the file.
class Section {
 public:
  Section(Ctx& ctx, const nlohmann::json* object, std::string path, Unknown unknown);

  const std::string& path() const { return path_; }
  std::string child(const std::string& key) const;
  bool exists() const { return object_ != nullptr; }
  // The value of key (nullptr when absent or null); marks key as known.
  const nlohmann::json* get(const std::string& key);
  // Of several aliases for one setting, the one present (error when more than one is); "" if none.
  std::string pick(std::initializer_list<const char*> names);
  bool is_auto(const std::string& key);

  bool read(const std::string& key, bool& out);
  bool read(const std::string& key, int& out, int64_t min, int64_t max);
  bool read(const std::string& key, int64_t& out, int64_t min, int64_t max);
  bool read(const std::string& key, double& out, double min, double max);
  bool read(const std::string& key, std::string& out);  // a string (null = leave default)
  // One of `values`; matched case-insensitively when ci, stored as spelled in `values`.
  bool read_enum(const std::string& key, std::string& out, const std::vector<std::string>& values,
                 bool ci);

  // Reports unknown keys: error or warning (per the section's policy) with the nearest known key.
  void finish(const std::string& what);

  Ctx& ctx;

 private:
  const nlohmann::json* object_;
  std::string path_;
  Unknown unknown_;
  std::vector<std::string> known_;
};

// Keys whose DeepSpeed effect this engine has at one value only: `ours`, what it does by design.
// Any other value is reported once as "no effect: <why>" (a warning), or, where DeepSpeed would
// train or save differently, refused as "not supported: <why>" (an error). Nothing is stored.
enum class Otherwise { kNoEffect, kRefuse };
void read_fixed(Section& s, const std::string& key, bool ours, Otherwise otherwise,
                const std::string& why);
void read_fixed(Section& s, const std::string& key, int64_t ours, int64_t min, int64_t max,
                const std::string& why);
void read_fixed(Section& s, const std::string& key, double ours, double min, double max,
                const std::string& why);

// Typed conversions shared by the readers (they report through ctx and return false on error).
bool to_int64(Ctx& ctx, const std::string& path, const nlohmann::json& v, int64_t& out);
bool to_double(Ctx& ctx, const std::string& path, const nlohmann::json& v, double& out);
bool to_bool(Ctx& ctx, const std::string& path, const nlohmann::json& v, bool& out);
std::string type_name(const nlohmann::json& v);
std::string nearest(const std::string& key, const std::vector<std::string>& candidates);
std::string lower(std::string s);

// Section readers (config_sections.cpp, config_optim.cpp). Each gets the parent (top-level)
// section.
void read_precision(Section& root, Config& config);
void read_optimizer(Section& root, OptimizerConfig& out);
void read_scheduler(Section& root, SchedulerConfig& out);
void read_zero(Section& root, ZeroOptimizationConfig& out);
void read_monitors(Section& root, Config& config);
// partition_activations acts only with tensor_parallel_size > 1 (else reported: no effect).
void read_activation_checkpointing(Section& root, ActivationCheckpointingConfig& out,
                                   int tensor_parallel_size);

// config_elasticity.cpp: the `elasticity` section; and with it enabled, the batch sizes its
// solver picks for `world` data-parallel ranks (true: the caller resolves nothing more).
void read_elasticity(Section& root, ElasticityConfig& out);
bool resolve_elastic_batch(Section& root, Config& config, int world);

// Top-level keys of a ds_config (for "this section belongs at the top level" diagnostics).
bool is_top_level_key(const std::string& key);

}  // namespace zero::detail
