// The ds_config parser's nlohmann::json entry points, for programs that build their config in
// code, and the parser's schema (every key it reads), for tools and tests that walk it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zero/config/config.h>

namespace zero {

// Same policy as parse_config_string, but diagnostics carry no line numbers (line 0).
ParsedConfig parse_config_json(const nlohmann::json& json, const ConfigOptions& options = {},
                               const std::string& source_name = "<json>");

// One key the parser reads: its dotted path and how its value is read.
struct ConfigSchemaKey {
  enum class Kind { kAny, kBool, kInt, kFloat, kString, kEnum };
  std::string path;
  Kind kind = Kind::kAny;               // kAny: an object, an array or a value checked by hand
  int64_t int_min = 0, int_max = 0;     // kInt
  double float_min = 0, float_max = 0;  // kFloat
  std::vector<std::string> values;      // kEnum
};

// Every key the parser asks for while it parses `document`, present in it or not, in the order
// first asked (a section's keys depend on what the document selects: the optimizer and scheduler
// types, which sections exist). Throws ConfigFileError when the document is not valid.
std::vector<ConfigSchemaKey> config_schema(const nlohmann::json& document,
                                           const ConfigOptions& options = {});

}  // namespace zero
