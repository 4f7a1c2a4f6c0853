// libFuzzer target for the ds_config parser: any input must either parse or throw
// zero::ConfigError; anything else escaping (or a round trip that changes the config) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <zero/config/config.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  zero::ConfigOptions options;
  options.world_size = 1 + static_cast<int>(size % 8);
  zero::ParsedConfig parsed;
  try {
    parsed = zero::parse_config_string(text, options, "fuzz");
  } catch (const zero::ConfigError&) {
    return 0;
  }
  // The printed config must read back into the same config.
  std::string printed = zero::to_json_string(parsed.config);
  try {
    zero::ParsedConfig again = zero::parse_config_string(printed, options, "printed");
    if (zero::to_json_string(again.config) != printed) std::abort();
  } catch (const zero::ConfigError&) {
    std::abort();
  }
  return 0;
}
