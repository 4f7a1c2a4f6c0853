// Which layers each pipeline stage holds, as DeepSpeed's PipelineModule decides it (no
// LibTorch): boundaries parts[0] = 0 <= parts[1] <= ... <= parts[stages] = layers, stage s
// holding layers [parts[s], parts[s + 1]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::pipe {

// ds_utils.partition_uniform: equal counts, the first `layers % stages` stages one more; with
// fewer layers than stages, one layer each to the first stages.
std::vector<int> partition_uniform(int layers, int stages);

// ds_utils.partition_balanced: the linear partition by dynamic programming over prefix sums,
// each cell keeping the split with the smallest spread (heaviest minus lightest part) so far,
// the last of equal ones; uniform when there are no more layers than stages.
std::vector<int> partition_balanced(const std::vector<double>& weights, int stages);

// PipelineModule's partition_method (case-insensitive): "uniform"; "parameters" (balanced by each
// layer's trainable parameter count, DeepSpeed's default); "type:REGEX" (balanced by the layers
// whose type name REGEX, in ECMAScript syntax, matches, searched case-insensitively; ConfigError
// when none does); "profile" (balanced by each layer's measured seconds, `layer_seconds`). Other
// methods are a ConfigError naming the choices.
std::vector<int> partition_layers(const std::string& method,
                                  const std::vector<int64_t>& trainable_parameters,
                                  const std::vector<std::string>& type_names, int stages,
                                  const std::vector<double>& layer_seconds = {});

}  // namespace zero::pipe
