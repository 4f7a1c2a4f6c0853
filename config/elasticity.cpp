// DeepSpeed's elastic batch solver, transcribed from deepspeed/elasticity/elasticity.py
// (get_candidate_batch_sizes, get_valid_gpus, get_best_candidates, _get_compatible_gpus_v01/v02,
// compute_elastic_config); Python's integer and float arithmetic kept where it decides.
#include <zero/config/elasticity.h>

#include <zero/error.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <sstream>

namespace zero {

namespace {

// DeepSpeed's HCN_LIST: the 38 smallest highly composite numbers.
constexpr int64_t kHcn[] = {1,      2,      4,      6,      12,     24,     36,     48,
                            60,     120,    180,    240,    360,    720,    840,    1260,
                            1680,   2520,   5040,   7560,   10080,  15120,  20160,  25200,
                            27720,  45360,  50400,  55440,  83160,  110880, 166320, 221760,
                            277200, 332640, 498960, 554400, 665280, 720720};
constexpr size_t kHcnCount = sizeof(kHcn) / sizeof(kHcn[0]);

std::string list_of(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

struct Best {
  int64_t batch_size = 0;
  std::vector<int64_t> valid;
};

// get_best_candidates: the candidate admitting the most sizes; ties go to the larger batch
// (prefer_larger) or the smaller. Its result does not depend on the candidates' order.
Best best_candidate(const std::vector<int64_t>& candidates, const std::vector<int64_t>& micro,
                    int64_t min_gpus, int64_t max_gpus, bool prefer_larger) {
  Best best;
  best.batch_size = *std::min_element(micro.begin(), micro.end());
  size_t most = 0;
  for (int64_t batch : candidates) {
    std::vector<int64_t> valid = elastic_valid_sizes(batch, micro, min_gpus, max_gpus);
    const bool tie_wins = prefer_larger ? batch > best.batch_size : batch < best.batch_size;
    if (valid.size() > most || (valid.size() == most && tie_wins)) {
      most = valid.size();
      best.valid = std::move(valid);
      best.batch_size = batch;
    }
  }
  return best;
}

// _get_compatible_gpus_v01 (min_gpus / max_gpus 0 stand for Python's None).
Best compatible_v01(const std::vector<int64_t>& micro, int64_t max_acceptable, int64_t min_gpus,
                    int64_t max_gpus, bool prefer_larger) {
  const int64_t smallest = *std::min_element(micro.begin(), micro.end());
  if (min_gpus == 0) min_gpus = 1;
  if (max_gpus == 0) max_gpus = max_acceptable / smallest;
  for (int64_t m : micro)
    ZERO_CHECK(m <= max_acceptable, ConfigError,
               "elasticity: every micro batch size must be at "
               "most max_train_batch_size (",
               max_acceptable, "); ", m, " is larger");
  int64_t lcm = 1;
  for (int64_t m : micro) lcm = std::lcm(lcm, m);
  std::vector<int64_t> bases = micro;
  bases.push_back(lcm);
  return best_candidate(elastic_candidate_batch_sizes(bases, max_acceptable), micro, min_gpus,
                        max_gpus, prefer_larger);
}

}  // namespace

std::vector<int64_t> elastic_candidate_batch_sizes(const std::vector<int64_t>& bases,
                                                   int64_t max_acceptable_batch_size) {
  std::set<int64_t> out;
  for (int64_t base : bases) {
    // A base above the cap only grows when scaled: DeepSpeed skips it.
    if (base > max_acceptable_batch_size) continue;
    if (base == max_acceptable_batch_size) {
      out.insert(base);
      continue;
    }
    const int64_t value = max_acceptable_batch_size / base;
    // np.argmax(HCN > value): the first larger one, or 0 when none is (then HCN[-1]).
    size_t index = 0;
    while (index < kHcnCount && kHcn[index] <= value) ++index;
    if (index == kHcnCount) index = 0;
    out.insert(kHcn[(index + kHcnCount - 1) % kHcnCount] * base);
  }
  return {out.begin(), out.end()};
}

std::vector<int64_t> elastic_valid_sizes(int64_t batch_size,
                                         const std::vector<int64_t>& micro_batches,
                                         int64_t min_valid, int64_t max_valid) {
  std::set<int64_t> valid;
  for (int64_t micro : micro_batches) {
    if (batch_size % micro != 0) continue;
    const int64_t max_gpus = batch_size / micro;
    if (min_valid <= max_gpus && max_gpus <= max_valid) valid.insert(max_gpus);
    // Every factor up to max_gpus / 2.
    for (int64_t i = 1; i <= max_gpus / 2; ++i) {
      if (i > max_valid) break;
      if (i < min_valid) continue;
      if (max_gpus % i == 0) valid.insert(i);
    }
  }
  return {valid.begin(), valid.end()};
}

ElasticBatch compute_elastic_batch(const ElasticityConfig& c, int64_t world) {
  // min_gpus and max_gpus count devices: the data-parallel ranks times the model-parallel ones.
  const int64_t gpus = world * c.model_parallel_size;
  ZERO_CHECK(c.enabled, ConfigError,
             "elasticity is disabled; enable it (\"enabled\": true) for an elastic training job");
  ZERO_CHECK(!c.micro_batch_sizes.empty(), ConfigError,
             "elasticity.micro_batch_sizes: give at least one micro batch size");
  ZERO_CHECK(c.min_gpus >= 1 && c.max_gpus >= 1 && c.min_gpus <= c.max_gpus, ConfigError,
             "elasticity: min_gpus (", c.min_gpus, ") and max_gpus (", c.max_gpus,
             ") must be >= 1 with min_gpus <= max_gpus");
  ZERO_CHECK(c.model_parallel_size <= 1 || c.version == 0.2, ConfigError, "elasticity version ",
             c.version, " does not support model parallelism (", "model_parallel_size ",
             c.model_parallel_size, "); use version 0.2");
  ZERO_CHECK(c.version <= 0.2, ConfigError, "elasticity version ", c.version,
             ": this engine (as DeepSpeed) knows versions up to 0.2");
  ZERO_CHECK(c.version == 0.1 || c.version == 0.2, ConfigError, "elasticity version ", c.version,
             ": no batch logic for it (versions 0.1 and 0.2)");
  ZERO_CHECK(gpus >= c.min_gpus && gpus <= c.max_gpus, ConfigError, "elasticity: ", gpus,
             c.model_parallel_size > 1 ? " ranks (data x model parallel)" : " data-parallel ranks",
             ", outside [min_gpus, max_gpus] = [", c.min_gpus, ", ", c.max_gpus, "]");
  ElasticBatch out;
  const std::vector<int64_t>& micro = c.micro_batch_sizes;
  if (c.version == 0.1) {
    const Best best = compatible_v01(micro, c.max_train_batch_size, c.min_gpus, c.max_gpus,
                                     c.prefer_larger_batch);
    out.train_batch_size = best.batch_size;
    out.valid_data_parallel_sizes = best.valid;
  } else {
    ZERO_CHECK(c.num_gpus_per_node % c.model_parallel_size == 0, ConfigError,
               "elasticity version 0.2: num_gpus_per_node (", c.num_gpus_per_node,
               ") must be divisible by model_parallel_size (", c.model_parallel_size, ")");
    const int64_t dp_per_node = c.num_gpus_per_node / c.model_parallel_size;
    // Version 0.2 works per node: v01 on the nodes' counts (Python's int(a / b)).
    const Best best =
        compatible_v01(micro,
                       static_cast<int64_t>(static_cast<double>(c.max_train_batch_size) /
                                            static_cast<double>(dp_per_node)),
                       static_cast<int64_t>(static_cast<double>(c.min_gpus) /
                                            static_cast<double>(c.num_gpus_per_node)),
                       static_cast<int64_t>(static_cast<double>(c.max_gpus) /
                                            static_cast<double>(c.num_gpus_per_node)),
                       c.prefer_larger_batch);
    out.train_batch_size = best.batch_size * dp_per_node;
    for (int64_t n : best.valid) out.valid_data_parallel_sizes.push_back(n * dp_per_node);
    const auto& valid = out.valid_data_parallel_sizes;
    if (std::find(valid.begin(), valid.end(), gpus / c.model_parallel_size) == valid.end()) {
      // DeepSpeed's fallback: the largest (or smallest) batch of whole micro batches for this
      // size alone (its micro batch choice there is replaced by the one below when, as here, the
      // size is given).
      const double current_dp = static_cast<double>(gpus) /
                                static_cast<double>(c.num_gpus_per_node) *
                                static_cast<double>(dp_per_node);
      std::vector<double> candidates;
      for (int64_t m : micro) {
        const double min_batch = static_cast<double>(m) * current_dp;
        candidates.push_back(std::floor(static_cast<double>(c.max_train_batch_size) / min_batch) *
                             min_batch);
      }
      out.fallback = true;
      out.elastic_batch_size = out.train_batch_size;
      out.train_batch_size = static_cast<int64_t>(
          c.prefer_larger_batch ? *std::max_element(candidates.begin(), candidates.end())
                                : *std::min_element(candidates.begin(), candidates.end()));
      out.valid_data_parallel_sizes = {static_cast<int64_t>(current_dp)};
    }
  }
  const auto& valid = out.valid_data_parallel_sizes;
  ZERO_CHECK(std::find(valid.begin(), valid.end(), world) != valid.end(), ConfigError,
             "elasticity: ", world,
             " data-parallel ranks is not a valid size for the elastic batch ",
             out.train_batch_size, "; the valid sizes are ", list_of(valid));
  // The largest micro batch that divides each rank's share.
  std::set<int64_t> sizes(micro.begin(), micro.end());
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it)
    if (out.train_batch_size / world % *it == 0) {
      out.micro_batch_size = *it;
      break;
    }
  ZERO_CHECK(out.micro_batch_size > 0, ConfigError, "elasticity: no micro batch size of ",
             list_of(micro), " divides the batch ", out.train_batch_size, " over ", world,
             " data-parallel ranks");
  out.gradient_accumulation_steps = out.train_batch_size / (out.micro_batch_size * world);
  return out;
}

}  // namespace zero
