// The lenient JSON front end of the ds_config parser: JSON plus comments, trailing commas, BOM,
// with the line of every key path and duplicate-key detection. Internal to config/.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace zero::detail {

struct JsonDocument {
  nlohmann::json value;
  // dotted path ("zero_optimization.offload_optimizer.device", "optimizer.params.betas[1]")
  // -> 1-based line of its key (object members) or of its value (array elements).
  std::unordered_map<std::string, int> lines;
};

// Nesting deeper than this is rejected (real configs nest 5 levels; this bounds recursion).
constexpr int kMaxJsonDepth = 128;

// Throws ConfigFileError with one diagnostic "syntax error at column C: ..." on anything that is
// not JSON after removing //- and /* */-comments, trailing commas and a UTF-8 BOM.
JsonDocument read_lenient_json(std::string_view text, const std::string& source_name);

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(const std::string& parent, const std::string& key);

}  // namespace zero::detail
