// The ds_config entry points: read the file, apply overrides, read every section, handle the
// top-level keys and unimplemented features, resolve batch sizes, and report all problems at once.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <zero/config/config_json.h>

#include "config_detail.h"
#include "json_reader.h"

namespace zero {

std::string ConfigDiagnostic::to_string() const {
  return file + ":" + std::to_string(line) + ": " + path + ": " + message;
}

static std::string join_diagnostics(const std::vector<ConfigDiagnostic>& diagnostics) {
  std::string out;
  for (const ConfigDiagnostic& d : diagnostics) out += (out.empty() ? "" : "\n") + d.to_string();
  return out;
}

ConfigFileError::ConfigFileError(std::vector<ConfigDiagnostic> diagnostics)
    : ConfigError(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

std::string Config::precision() const {
  return fp16.enabled ? "fp16" : bf16.enabled ? "bf16" : "fp32";
}

const char* ZeroOptimizationConfig::host_shared_params_excluded_by() const {
  if (stage == 0) return "at stage 0 (every rank updates all parameters itself)";
  if (stage != 3) return nullptr;
  if (mics_shard_size > 0) return "with MiCS (mics_shard_size)";
  if (offload_param.device != "none") return "with offload_param";
  if (zero_hpz_partition_size > 1) return "with hpZ (zero_hpz_partition_size)";
  if (zero_quantized_weights) return "with qwZ (zero_quantized_weights)";
  return nullptr;
}

namespace detail {

namespace {

const char* const kTopLevelKeys[] = {"train_batch_size",
                                     "train_micro_batch_size_per_gpu",
                                     "gradient_accumulation_steps",
                                     "fp16",
                                     "bf16",
                                     "bfloat16",
                                     "optimizer",
                                     "scheduler",
                                     "gradient_clipping",
                                     "communication_data_type",
                                     "prescale_gradients",
                                     "gradient_predivide_factor",
                                     "zero_optimization",
                                     "steps_per_print",
                                     "wall_clock_breakdown",
                                     "checkpoint",
                                     "csv_monitor",
                                     "tensorboard",
                                     "wandb",
                                     "comet",
                                     "comms_logger",
                                     "aio",
                                     "zero_allow_untested_optimizer",
                                     "flops_profiler",
                                     "activation_checkpointing",
                                     "data_types",
                                     "amp",
                                     "pipeline",
                                     "elasticity"};

enum class Kind { kIgnored, kUnsupported, kNoClient };
struct Feature {
  const char* key;
  Kind kind;
  const char* what;
};
// DeepSpeed features this engine lacks: ignored (with a warning) when they leave the training math
// alone, errors when they would change it. Monitors with no C++ client are errors too: a run the
// user meant to watch would otherwise leave no trace. A section whose "enabled" is false is
// silently fine.
const Feature kFeatures[] = {
    {"wandb", Kind::kNoClient, "Weights & Biases has no C++ client"},
    {"comet", Kind::kNoClient, "Comet has no C++ client"},
    {"autotuning", Kind::kIgnored, "the autotuner is not implemented"},
    {"compile", Kind::kIgnored, "torch.compile / DeepCompile do not exist in LibTorch"},
    {"eigenvalue", Kind::kIgnored, "the eigenvalue computation is not implemented"},
    {"sparse_attention", Kind::kIgnored,
     "sparse attention is a model-side module the engine does not apply"},
    {"nebula", Kind::kIgnored, "the Nebula checkpoint engine is not implemented"},
    {"timers", Kind::kIgnored, "DeepSpeed's throughput timers are not implemented"},
    {"hybrid_engine", Kind::kIgnored, "the RLHF hybrid inference engine is not implemented"},
    {"seq_parallel_communication_data_type", Kind::kIgnored,
     "sequence parallelism is not implemented"},
    {"amp", Kind::kUnsupported, "Apex AMP mixed precision (use fp16 or bf16)"},
    {"progressive_layer_drop", Kind::kUnsupported, "progressive layer drop"},
    {"compression_training", Kind::kUnsupported, "compression training (quantization / pruning)"},
    {"quantize_training", Kind::kUnsupported, "MoQ quantized training"},
    {"data_efficiency", Kind::kUnsupported, "data efficiency (curriculum sampling / random-LTD)"},
    {"curriculum_learning", Kind::kUnsupported, "curriculum learning"},
    {"torch_autocast", Kind::kUnsupported, "torch autocast mixed precision (use fp16 or bf16)"},
};

// Whether a feature section is switched on: its "enabled" (or compile's "disable"), else any nested
// "enabled": true, else true when it has no "enabled" anywhere (presence means on).
int enabled_state(const nlohmann::json& v, int depth) {  // 1 on, 0 off, -1 no "enabled" key
  if (!v.is_object() || depth > 8) return -1;
  auto it = v.find("enabled");
  if (it != v.end()) return it->is_boolean() ? (it->get<bool>() ? 1 : 0) : 1;
  int state = -1;
  for (const auto& item : v.items()) {
    int s = enabled_state(item.value(), depth + 1);
    if (s == 1) return 1;
    if (s == 0) state = 0;
  }
  return state;
}
bool feature_on(const std::string& key, const nlohmann::json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (key == "compile" && v.is_object()) {
    auto d = v.find("disable");
    if (d != v.end() && d->is_boolean()) return !d->get<bool>();
  }
  return enabled_state(v, 0) != 0;
}

void apply_overrides(nlohmann::json& root, const std::map<std::string, std::string>& overrides,
                     Ctx& ctx) {
  for (const auto& [key, text] : overrides) {
    std::vector<std::string> parts;
    std::stringstream in(key);
    for (std::string part; std::getline(in, part, '.');) parts.push_back(part);
    bool bad =
        key.empty() || key.back() == '.' ||
        std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); });
    ctx.overridden.insert(key.empty() ? std::string("(override)") : key);
    if (bad) {
      ctx.error(key.empty() ? "(override)" : key,
                "invalid override key: expected dotted.key=value");
      continue;
    }
    nlohmann::json value;
    try {
      value = read_lenient_json(text, "--set").value;
    } catch (const ConfigFileError&) {
      value = text;  // a bare word: a string
    }
    nlohmann::json* cur = &root;
    std::string prefix;
    bool ok = true;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix = join_path(prefix, parts[i]);
      nlohmann::json& next = (*cur)[parts[i]];
      if (next.is_null()) next = nlohmann::json::object();
      if (!next.is_object()) {
        ctx.error(key, "cannot set it: '" + prefix + "' is " + type_name(next) + ", not an object");
        ok = false;
        break;
      }
      cur = &next;
    }
    if (!ok) continue;
    auto it = cur->find(parts.back());
    if (it != cur->end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>() == "auto") && *it != value) {
      ctx.warn(key, "the override " + value.dump() + " replaces the file's value " + it->dump());
    }
    (*cur)[parts.back()] = value;
  }
}

void read_top_level(Section& root, Config& c) {
  Ctx& ctx = root.ctx;
  root.read("gradient_clipping", c.gradient_clipping, 0.0, HUGE_VAL);
  root.read_enum("communication_data_type", c.communication_data_type, {"fp32", "fp16", "bf16"},
                 true);
  root.read("prescale_gradients", c.prescale_gradients);
  if (root.read("gradient_predivide_factor", c.gradient_predivide_factor, 0.0, HUGE_VAL) &&
      c.gradient_predivide_factor <= 0) {
    ctx.error("gradient_predivide_factor", "must be > 0");
  }
  root.read("steps_per_print", c.steps_per_print, 1, INT64_MAX);
  root.read("wall_clock_breakdown", c.wall_clock_breakdown);
  read_fixed(root, "memory_breakdown", false, Otherwise::kNoEffect,
             "DeepSpeed's memory printouts at each engine phase are not implemented; rank 0's "
             "progress line shows the memory use every steps_per_print steps");
  read_fixed(root, "dump_state", false, Otherwise::kNoEffect,
             "DeepSpeed prints its engine's state after initialize; `zero config FILE` prints the "
             "resolved config instead");
  root.read("sparse_gradients", c.sparse_gradients);
  if (c.sparse_gradients)
    ctx.warn("sparse_gradients", "ignored: sparse gradient all-reduce is not implemented");
  read_fixed(root, "zero_allow_untested_optimizer", false, Otherwise::kNoEffect,
             "every optimizer this engine implements (Adam, AdamW, SGD) runs at every ZeRO stage; "
             "there is no untested-optimizer check to lift");
  read_fixed(root, "zero_force_ds_cpu_optimizer", true, Otherwise::kNoEffect,
             "an offloaded optimizer always runs on this engine's own host kernels; there is no "
             "client optimizer to allow");
  read_fixed(root, "dataloader_drop_last", false, Otherwise::kNoEffect,
             "the engine builds no data loader (DeepSpeed's deepspeed_io); the program feeds the "
             "batches");
  bool disable_allgather = false;
  if (root.read("disable_allgather", disable_allgather) && disable_allgather) {
    ctx.warn("disable_allgather", "ignored: a legacy key without effect");
  }
  const nlohmann::json* zero = root.get("zero_optimization");
  if (root.get("allgather_size") && !(zero && zero->is_boolean())) {
    ctx.warn("allgather_size",
             "no effect: a legacy key (used only with \"zero_optimization\": true); use "
             "zero_optimization.allgather_bucket_size");
  }
  int64_t sp = 1;
  if (root.read("sequence_parallel_size", sp, 1, INT64_MAX) && sp > 1) {
    ctx.error("sequence_parallel_size", "not supported: sequence parallelism");
  }
  if (const nlohmann::json* tp = root.get("tensor_parallel")) {
    Section t(ctx, tp, "tensor_parallel", Unknown::kWarn);
    int64_t size = 1;
    if (t.read("autotp_size", size, 0, INT32_MAX) && size > 1) {
      if (c.world_size % size != 0)
        ctx.error("tensor_parallel.autotp_size",
                  "the tensor-parallel degree " + std::to_string(size) +
                      " does not divide the world size " + std::to_string(c.world_size));
      else
        c.tensor_parallel_size = static_cast<int>(size);
    }
  }
  if (const nlohmann::json* pipe = root.get("pipeline")) {
    Section s(ctx, pipe, "pipeline", Unknown::kWarn);
    int64_t stages = 1;
    if (s.read("stages", stages, 1, INT32_MAX)) c.pipeline_parallel_size = static_cast<int>(stages);
    s.read_enum("schedule", c.pipeline_schedule, {"1f1b", "interleaved", "zb-h1"}, true);
    int64_t chunks = 1;
    if (s.read("virtual_stages", chunks, 1, INT32_MAX))
      c.pipeline_virtual_stages = static_cast<int>(chunks);
    if (chunks > 1 && c.pipeline_schedule != "interleaved")
      ctx.warn("pipeline.virtual_stages",
               "no effect: only the interleaved schedule has model chunks (pipeline.schedule is " +
                   c.pipeline_schedule + ")");
    for (const char* key :
         {"partition", "seed_layers", "activation_checkpoint_interval", "seeded", "seed"})
      if (s.get(key))
        ctx.warn(s.child(key),
                 "no effect: zero::pipe::PipelineModule's options decide it (PipelineOptions)");
    const std::pair<const char*, bool*> partitioned[] = {{"pipe_partitioned", &c.pipe_partitioned},
                                                         {"grad_partitioned", &c.grad_partitioned}};
    for (const auto& [key, value] : partitioned)
      if (s.read(key, *value) && *value && c.tensor_parallel_size == 1)
        ctx.warn(s.child(key),
                 "no effect: there is no tensor parallelism to partition over "
                 "(tensor_parallel.autotp_size is 1)");
    s.finish("pipeline");
    const int64_t model = int64_t{c.tensor_parallel_size} * c.pipeline_parallel_size;
    if (c.world_size % model != 0) {
      ctx.error("pipeline.stages",
                "the pipeline stages (" + std::to_string(c.pipeline_parallel_size) +
                    ") x tensor_parallel.autotp_size (" + std::to_string(c.tensor_parallel_size) +
                    ") do not divide the world size " + std::to_string(c.world_size));
      c.pipeline_parallel_size = 1;
    }
  }
  for (const Feature& f : kFeatures) {
    const nlohmann::json* v = root.get(f.key);
    if (!v) continue;
    if (f.kind == Kind::kNoClient && !v->is_object()) {
      // DeepSpeed builds its monitor config from the section's keys: anything else is a TypeError.
      ctx.error(f.key, "expected an object (with \"enabled\"), got " + type_name(*v));
      continue;
    }
    // DeepSpeed's monitor sections default to "enabled": false, unlike the presence-means-on rule.
    if (f.kind == Kind::kNoClient
            ? !(v->is_object() && v->value("enabled", nlohmann::json()) == true)
            : !feature_on(f.key, *v))
      continue;
    if (f.kind == Kind::kIgnored)
      ctx.warn(f.key, std::string("ignored: ") + f.what);
    else if (f.kind == Kind::kNoClient)
      ctx.error(f.key, std::string("not supported: ") + f.what +
                           "; log to \"tensorboard\" or \"csv_monitor\" instead (same events, "
                           "DeepSpeed's file layout), or set \"enabled\": false");
    else
      ctx.error(f.key, std::string("not supported: ") + f.what + " would change the training math");
  }
}

void resolve_batch(Section& root, Config& c, int world) {
  Ctx& ctx = root.ctx;
  size_t errors_before = ctx.errors.size();
  std::optional<int64_t> tb, mb, gas;
  int64_t v = 0;
  if (root.read("train_batch_size", v, 1, INT64_MAX)) tb = v;
  if (root.read("train_micro_batch_size_per_gpu", v, 1, INT64_MAX)) mb = v;
  if (root.read("gradient_accumulation_steps", v, 1, INT64_MAX)) gas = v;
  if (ctx.errors.size() != errors_before) return;
  if (!tb && !mb) {
    std::string path = root.is_auto("train_micro_batch_size_per_gpu")
                           ? "train_micro_batch_size_per_gpu"
                           : "train_batch_size";
    bool is_auto = root.is_auto(path);
    ctx.error(path, std::string(is_auto ? "\"auto\" cannot be determined" : "missing") +
                        ": give train_batch_size or train_micro_batch_size_per_gpu a number "
                        "(supply \"auto\" values "
                        "with --set " +
                        path + "=N or ConfigOptions::overrides)");
    return;
  }
  const int64_t w = world;
  bool overflow = false;
  auto mul = [&overflow](int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) overflow = true;
    return r;
  };
  // DeepSpeed's derivation (runtime/config.py _set_batch_related_parameters), integer division.
  if (tb && mb && gas) {
  } else if (tb && mb) {
    gas = *tb / *mb / w;
  } else if (tb && gas) {
    mb = *tb / w / *gas;
  } else if (mb && gas) {
    tb = mul(mul(*mb, *gas), w);
  } else if (tb) {
    gas = 1;
    mb = *tb / w;
  } else {
    gas = 1;
    tb = mul(*mb, w);
  }
  c.train_batch_size = *tb;
  c.train_micro_batch_size_per_gpu = *mb;
  c.gradient_accumulation_steps = *gas;
  int64_t product = mul(mul(*mb, *gas), w);
  if (overflow || *tb <= 0 || *mb <= 0 || *gas <= 0 || *tb != product) {
    std::ostringstream m;
    m << "batch sizes do not fit: train_batch_size (" << *tb
      << ") must equal train_micro_batch_size_per_gpu (" << *mb
      << ") * gradient_accumulation_steps (" << *gas << ") * "
      << (c.data_parallel_size != c.world_size ? "data-parallel size" : "world_size") << " (" << w;
    if (c.tensor_parallel_size > 1)
      m << " = world_size " << c.world_size << " / tensor_parallel.autotp_size "
        << c.tensor_parallel_size;
    if (c.pipeline_parallel_size > 1)
      m << (c.tensor_parallel_size > 1
                ? " / pipeline.stages "
                : " = world_size " + std::to_string(c.world_size) + " / pipeline.stages ")
        << c.pipeline_parallel_size;
    m << ")";
    if (overflow)
      m << ", which overflows 64 bits";
    else
      m << " = " << product;
    ctx.error(root.get("train_batch_size") ? "train_batch_size" : "train_micro_batch_size_per_gpu",
              m.str());
  }
}

bool by_line(const ConfigDiagnostic& a, const ConfigDiagnostic& b) {
  return a.line < b.line;
}

}  // namespace

bool is_top_level_key(const std::string& key) {
  for (const char* k : kTopLevelKeys) {
    if (key == k) return true;
  }
  return false;
}

ParsedConfig parse_document(nlohmann::json value, const std::unordered_map<std::string, int>* lines,
                            const ConfigOptions& options, const std::string& source,
                            std::vector<ConfigSchemaKey>* schema = nullptr) {
  Ctx ctx(source, lines);
  ctx.schema = schema;
  if (options.world_size < 1) {
    ctx.error("world_size",
              "the world size must be >= 1, got " + std::to_string(options.world_size));
    throw ConfigFileError(ctx.errors);
  }
  if (!value.is_object()) {
    ctx.error("", "the config must be a JSON object, got " + type_name(value));
    throw ConfigFileError(ctx.errors);
  }
  apply_overrides(value, options.overrides, ctx);
  ParsedConfig result;
  Config& c = result.config;
  c.world_size = options.world_size;
  Section root(ctx, &value, "", Unknown::kWarn);
  read_precision(root, c);
  read_optimizer(root, c.optimizer);
  read_scheduler(root, c.scheduler);
  read_zero(root, c.zero_optimization);
  if (!c.zero_optimization.load_from_fp32_weights && c.precision() == "fp32")
    ctx.warn("zero_optimization.load_from_fp32_weights",
             "no effect in fp32 training: the fp32 masters are the model's weights");
  read_monitors(root, c);
  read_top_level(root, c);  // tensor_parallel first: partition_activations depends on it
  read_activation_checkpointing(root, c.activation_checkpointing, c.tensor_parallel_size);
  c.data_parallel_size = c.world_size / (c.tensor_parallel_size * c.pipeline_parallel_size);
  read_elasticity(root, c.elasticity);
  if (!resolve_elastic_batch(root, c, c.data_parallel_size))
    resolve_batch(root, c, c.data_parallel_size);
  root.finish("the top level of the config");

  std::stable_sort(ctx.warnings.begin(), ctx.warnings.end(), by_line);
  if (options.strict) {
    for (ConfigDiagnostic d : ctx.warnings) {
      d.message = "(--strict) " + d.message;
      ctx.errors.push_back(d);
    }
    ctx.warnings.clear();
  }
  if (!ctx.errors.empty()) {
    std::stable_sort(ctx.errors.begin(), ctx.errors.end(), by_line);
    throw ConfigFileError(ctx.errors);
  }
  result.warnings = std::move(ctx.warnings);
  return result;
}

}  // namespace detail

std::vector<ConfigSchemaKey> config_schema(const nlohmann::json& document,
                                           const ConfigOptions& options) {
  std::vector<ConfigSchemaKey> schema;
  detail::parse_document(document, nullptr, options, "<schema>", &schema);
  return schema;
}

ParsedConfig parse_config_string(const std::string& text, const ConfigOptions& options,
                                 const std::string& source_name) {
  detail::JsonDocument doc = detail::read_lenient_json(text, source_name);
  return detail::parse_document(std::move(doc.value), &doc.lines, options, source_name);
}

ParsedConfig parse_config_file(const std::string& path, const ConfigOptions& options) {
  auto fail = [&](const std::string& why) {
    ConfigDiagnostic d;
    d.file = path;
    d.path = "(root)";
    d.message = "cannot read the config file: " + why;
    throw ConfigFileError({d});
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("read error");
  return parse_config_string(text.str(), options, path);
}

ParsedConfig parse_config_json(const nlohmann::json& json, const ConfigOptions& options,
                               const std::string& source_name) {
  return detail::parse_document(json, nullptr, options, source_name);
}

}  // namespace zero
