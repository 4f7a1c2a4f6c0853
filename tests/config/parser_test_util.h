// Helpers of the ds_config parser tests: parse a text at a world size, the diagnostics of a
// rejected config, the one naming a path.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <zero/config/config.h>
#include <zero/config/config_json.h>

using zero::Config;
using zero::ConfigDiagnostic;
using zero::ConfigFileError;
using zero::ConfigOptions;

inline ConfigOptions ws(int world_size, bool strict = false) {
  ConfigOptions o;
  o.world_size = world_size;
  o.strict = strict;
  return o;
}

inline zero::ParsedConfig parse(const std::string& text, const ConfigOptions& options = ws(1)) {
  return zero::parse_config_string(text, options, "t.json");
}

// The diagnostics of a config that must be rejected.
inline std::vector<ConfigDiagnostic> errors_of(const std::string& text,
                                               const ConfigOptions& options = ws(1)) {
  try {
    parse(text, options);
  } catch (const ConfigFileError& e) {
    REQUIRE(!e.diagnostics().empty());
    return e.diagnostics();
  }
  FAIL("accepted: " << text);
  return {};
}

// The one diagnostic naming `path` (fails when there is none).
inline ConfigDiagnostic find(const std::vector<ConfigDiagnostic>& ds, const std::string& path) {
  for (const auto& d : ds) {
    if (d.path == path) return d;
  }
  std::string all;
  for (const auto& d : ds) all += d.to_string() + "\n";
  FAIL("no diagnostic for " << path << " in:\n" << all);
  return {};
}

inline bool mentions(const ConfigDiagnostic& d, const std::string& text) {
  return d.message.find(text) != std::string::npos;
}

inline const char* kBatch = R"("train_batch_size": 8)";
