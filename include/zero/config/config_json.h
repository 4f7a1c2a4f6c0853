// The ds_config parser's nlohmann::json entry point, for programs that build their config in
// code. Same policy as parse_config_string, but diagnostics carry no line numbers (line 0).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include <zero/config/config.h>

namespace zero {

ParsedConfig parse_config_json(const nlohmann::json& json, const ConfigOptions& options = {},
                               const std::string& source_name = "<json>");

}  // namespace zero
