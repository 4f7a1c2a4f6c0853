// The partition methods of partition.h.
#include <zero/engine/pipe/partition.h>

#include <zero/error.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <regex>

namespace zero::pipe {

std::vector<int> partition_uniform(int layers, int stages) {
  ZERO_CHECK(layers >= 0 && stages >= 1, UsageError, "partition_uniform: ", layers, " layers, ",
             stages, " stages");
  std::vector<int> parts(stages + 1);
  if (layers <= stages) {
    for (int s = 0; s <= stages; ++s) parts[s] = std::min(s, layers);
    return parts;
  }
  const int chunk = layers / stages, residual = layers % stages;
  for (int s = 0; s <= stages; ++s) parts[s] = s * chunk + std::min(s, residual);
  return parts;
}

std::vector<int> partition_balanced(const std::vector<double>& weights, int stages) {
  const int n = static_cast<int>(weights.size()), m = stages;
  if (n <= m) return partition_uniform(n, m);
  const double inf = std::numeric_limits<double>::infinity();
  // cell (i, j): the first i layers in j parts.
  auto cell = [&](std::vector<double>& v, int i, int j) -> double& { return v[i * (m + 1) + j]; };
  std::vector<double> most((n + 1) * (m + 1), inf), least((n + 1) * (m + 1), inf),
      spread((n + 1) * (m + 1), inf);
  std::vector<int> split((n + 1) * (m + 1), 0);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  cell(most, 0, 0) = 0;
  cell(spread, 0, 0) = 0;
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= std::min(i, m); ++j)
      for (int k = 0; k < i; ++k) {
        const double part = prefix[i] - prefix[k];
        const double hi = std::max(cell(most, k, j - 1), part);
        const double lo = std::min(cell(least, k, j - 1), part);
        const double cost = hi - lo;
        if (cell(spread, i, j) >= cost) {
          cell(spread, i, j) = cost;
          cell(most, i, j) = hi;
          cell(least, i, j) = lo;
          split[i * (m + 1) + j] = k;
        }
      }
  std::vector<int> parts{n};
  for (int j = m; j >= 1; --j) parts.push_back(split[parts.back() * (m + 1) + j]);
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<int> partition_layers(const std::string& method_in,
                                  const std::vector<int64_t>& trainable_parameters,
                                  const std::vector<std::string>& type_names, int stages,
                                  const std::vector<double>& layer_seconds) {
  std::string method = method_in;
  std::transform(method.begin(), method.end(), method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const int layers = static_cast<int>(type_names.size());
  if (method == "uniform") return partition_uniform(layers, stages);
  if (method == "parameters") {
    ZERO_CHECK(trainable_parameters.size() == type_names.size(), UsageError,
               "partition_layers: ", trainable_parameters.size(), " parameter counts for ", layers,
               " layers");
    return partition_balanced(
        std::vector<double>(trainable_parameters.begin(), trainable_parameters.end()), stages);
  }
  if (method == "profile") {
    ZERO_CHECK(layer_seconds.size() == type_names.size(), UsageError,
               "partition_layers: ", layer_seconds.size(), " layer times for ", layers, " layers");
    return partition_balanced(layer_seconds, stages);
  }
  if (method.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    std::regex type_regex;
    try {
      type_regex = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& e) {
      throw ConfigError("pipeline partition method '" + method_in + "': the pattern '" + pattern +
                        "' is not a regular expression (" + e.what() + ")");
    }
    std::vector<double> matches(layers, 0.0);
    for (int i = 0; i < layers; ++i)
      if (std::regex_search(type_names[i], type_regex)) matches[i] = 1.0;
    ZERO_CHECK(std::count(matches.begin(), matches.end(), 1.0) > 0, ConfigError,
               "pipeline partition method '", method_in, "' found no layer type matching '",
               pattern, "'");
    return partition_balanced(matches, stages);
  }
  throw ConfigError("pipeline partition method '" + method_in +
                    "' is not one of: uniform, parameters, type:REGEX, profile");
}

}  // namespace zero::pipe
