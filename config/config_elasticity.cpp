// The `elasticity` section (DeepSpeed's ElasticityConfig checks) and its batch sizes: with
// elasticity enabled the solver's choice replaces train_batch_size, the micro batch and the
// accumulation steps, as DeepSpeed's runtime config does.
#include "config_detail.h"

#include <zero/config/elasticity.h>

#include <cmath>

namespace zero::detail {

void read_elasticity(Section& root, ElasticityConfig& e) {
  Ctx& ctx = root.ctx;
  Section s(ctx, root.get("elasticity"), "elasticity", Unknown::kError);
  if (!s.exists()) return;
  s.read("enabled", e.enabled);
  for (const char* key : {"max_train_batch_size", "micro_batch_sizes"})
    if (e.enabled && !s.get(key))
      ctx.error(s.child(key), "missing: an enabled elasticity section needs it (DeepSpeed's too)");
  s.read("max_train_batch_size", e.max_train_batch_size, 1, INT64_MAX);
  if (const nlohmann::json* m = s.get("micro_batch_sizes")) {
    if (!m->is_array() || m->empty()) {
      ctx.error(s.child("micro_batch_sizes"),
                "expected a list of positive integers, got " + type_name(*m));
    } else {
      e.micro_batch_sizes.clear();
      for (size_t i = 0; i < m->size(); ++i) {
        const std::string path = s.child("micro_batch_sizes") + "[" + std::to_string(i) + "]";
        int64_t v = 0;
        if (!(*m)[i].is_number_integer()) {
          ctx.error(path, "expected a positive integer, got " + (*m)[i].dump());
        } else if (to_int64(ctx, path, (*m)[i], v)) {
          if (v < 1)
            ctx.error(path, "a micro batch size must be positive, got " + std::to_string(v));
          else
            e.micro_batch_sizes.push_back(v);
        }
      }
    }
  }
  s.read("min_gpus", e.min_gpus, 1, INT64_MAX);
  s.read("max_gpus", e.max_gpus, 1, INT64_MAX);
  if (e.max_gpus < e.min_gpus)
    ctx.error(s.child("max_gpus"), "max_gpus (" + std::to_string(e.max_gpus) +
                                       ") is below min_gpus (" + std::to_string(e.min_gpus) + ")");
  s.read("num_gpus_per_node", e.num_gpus_per_node, 1, INT64_MAX);
  s.read("model_parallel_size", e.model_parallel_size, 1, INT64_MAX);
  if (s.read("min_time", e.min_time, 0.0, HUGE_VAL) && e.min_time > 0)
    ctx.warn(s.child("min_time"),
             "no effect: DeepSpeed reads it for a scheduler's minimum run time, not for the "
             "batch; neither does zerorun use it");
  // DeepSpeed takes float(version): 0.1, 0.2 or their strings.
  if (const nlohmann::json* v = s.get("version"))
    if (to_double(ctx, s.child("version"), *v, e.version) && e.version != 0.1 && e.version != 0.2)
      ctx.error(s.child("version"),
                "version " + v->dump() + ": this engine (as DeepSpeed) knows versions 0.1 and 0.2");
  s.read("prefer_larger_batch", e.prefer_larger_batch);
  s.read("ignore_non_elastic_batch_info", e.ignore_non_elastic_batch_info);
  s.finish("elasticity");
}

bool resolve_elastic_batch(Section& root, Config& c, int world) {
  const ElasticityConfig& e = c.elasticity;
  if (!e.enabled) return false;
  Ctx& ctx = root.ctx;
  const char* keys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps"};
  if (e.model_parallel_size != c.tensor_parallel_size * c.pipeline_parallel_size) {
    ctx.error("elasticity.model_parallel_size",
              "elasticity.model_parallel_size (" + std::to_string(e.model_parallel_size) +
                  ") must be the ranks of one model: tensor_parallel.autotp_size x "
                  "pipeline.stages = " +
                  std::to_string(c.tensor_parallel_size * c.pipeline_parallel_size));
    return true;
  }
  ElasticBatch b;
  try {
    b = compute_elastic_batch(e, world);
  } catch (const ConfigError& error) {
    std::string why = error.what();
    const std::string prefix = "elasticity: ";
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    ctx.error("elasticity", why);
    return true;
  }
  const int64_t chosen[] = {b.train_batch_size, b.micro_batch_size, b.gradient_accumulation_steps};
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json* given = root.get(keys[i]);
    if (!given) continue;
    if (!e.ignore_non_elastic_batch_info)
      ctx.error(keys[i], std::string("elastic training takes control of train_batch_size, "
                                     "train_micro_batch_size_per_gpu and "
                                     "gradient_accumulation_steps; remove ") +
                             keys[i] +
                             ", or set elasticity.ignore_non_elastic_batch_info: true to "
                             "have it replaced (DeepSpeed refuses it alike)");
    else
      ctx.warn(keys[i],
               "elasticity replaces " + given->dump() + " with " + std::to_string(chosen[i]));
  }
  if (b.fallback)
    ctx.warn("elasticity",
             "version 0.2 at " + std::to_string(world) +
                 " data-parallel ranks, not a size the elastic batch " +
                 std::to_string(b.elastic_batch_size) + " admits: DeepSpeed's fallback batch " +
                 std::to_string(b.train_batch_size) +
                 " for this size alone (a restart at another size changes the global batch)");
  c.train_batch_size = b.train_batch_size;
  c.train_micro_batch_size_per_gpu = b.micro_batch_size;
  c.gradient_accumulation_steps = b.gradient_accumulation_steps;
  c.elastic_valid_data_parallel_sizes = b.valid_data_parallel_sizes;
  return true;
}

}  // namespace zero::detail
