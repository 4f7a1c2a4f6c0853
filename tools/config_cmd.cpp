// `zero config FILE [--world-size N] [--set dotted.key=value]... [--strict]`: validate a ds_config
// and print the complete resolved config as JSON; exit 0 on success, 2 on any problem.
#include <charconv>
#include <iostream>
#include <string>
#include <vector>

#include <zero/config/config.h>

#include "command.h"

namespace zero::tools {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFail = 2;

int usage(const std::string& problem) {
  std::cerr << "zero config: " << problem << "\n"
            << "usage: zero config FILE [--world-size N] [--set dotted.key=value]... [--strict]\n";
  return kExitFail;
}

int run_config(const std::vector<std::string>& args) {
  ConfigOptions options;
  std::string file;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& flag, std::string& out) {
      if (a.rfind(flag + "=", 0) == 0) {
        out = a.substr(flag.size() + 1);
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        out = args[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::cout
          << "usage: zero config FILE [--world-size N] [--set dotted.key=value]... [--strict]\n"
             "Validates a DeepSpeed ds_config and prints the resolved config (every field) as "
             "JSON.\n"
             "Exit 0 when valid; 2 with one 'FILE:LINE: dotted.path: message' line per problem.\n";
      return kExitOk;
    } else if (a == "--strict") {
      options.strict = true;
    } else if (value("--world-size", v)) {
      int n = 0;
      auto r = std::from_chars(v.data(), v.data() + v.size(), n);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1) {
        return usage("--world-size needs a positive integer, got '" + v + "'");
      }
      options.world_size = n;
    } else if (value("--set", v)) {
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0)
        return usage("--set needs dotted.key=value, got '" + v + "'");
      options.overrides[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--world-size" || a == "--set") {
      return usage(a + " needs a value");
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      return usage("unknown option '" + a + "'");
    } else if (file.empty()) {
      file = a;
    } else {
      return usage("more than one FILE given ('" + file + "', '" + a + "')");
    }
  }
  if (file.empty()) return usage("missing FILE");
  try {
    ParsedConfig parsed = parse_config_file(file, options);
    for (const ConfigDiagnostic& w : parsed.warnings) {
      ConfigDiagnostic shown = w;
      shown.message = "warning: " + w.message;
      std::cerr << shown.to_string() << "\n";
    }
    std::cout << to_json_string(parsed.config) << "\n";
    return kExitOk;
  } catch (const ConfigFileError& e) {
    for (const ConfigDiagnostic& d : e.diagnostics()) std::cerr << d.to_string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << file << ":0: (root): " << e.what() << "\n";
  } catch (...) {
    std::cerr << file << ":0: (root): unknown error\n";
  }
  return kExitFail;
}

}  // namespace

ZERO_COMMAND("config",
             "validate a ds_config and print the resolved config: FILE [--world-size N] "
             "[--set key=value]... [--strict]",
             run_config);

}  // namespace zero::tools
