// zero::parse_args (args.h): a small hand-written scanner, so training programs need no
// argument library to accept the launcher's --local_rank and a --deepspeed_config path.
#include <zero/engine/args.h>

#include <cerrno>
#include <cstdlib>
#include <limits>

#include <zero/error.h>

namespace zero {
namespace {

// If `arg` is `name` or `name=value`, returns true and sets `value` (taking the next argument
// for the separate form, advancing i). `value` stays empty only when an error was thrown.
bool take_option(const std::vector<std::string>& args, size_t& i, const std::string& name,
                 std::string& value) {
  const std::string& arg = args[i];
  if (arg == name) {
    ZERO_CHECK(i + 1 < args.size(), UsageError, name, ": missing value");
    value = args[++i];
  } else if (arg.size() > name.size() && arg.compare(0, name.size(), name) == 0 &&
             arg[name.size()] == '=') {
    value = arg.substr(name.size() + 1);
  } else {
    return false;
  }
  ZERO_CHECK(!value.empty(), UsageError, name, ": empty value");
  return true;
}

int parse_local_rank(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  ZERO_CHECK(
      errno == 0 && end && *end == '\0' && value >= 0 && value <= std::numeric_limits<int>::max(),
      UsageError, "--local_rank: '", text, "' is not a non-negative integer");
  return static_cast<int>(value);
}

}  // namespace

Args parse_args(const std::vector<std::string>& args) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.rest.insert(out.rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                      args.end());
      break;
    }
    std::string value;
    if (take_option(args, i, "--deepspeed_config", value) ||
        take_option(args, i, "--config", value)) {
      ZERO_CHECK(out.config_path.empty(), UsageError, "config given twice: '", out.config_path,
                 "' and '", value, "'");
      out.config_path = value;
    } else if (take_option(args, i, "--local_rank", value) ||
               take_option(args, i, "--local-rank", value)) {
      out.local_rank = parse_local_rank(value);
    } else if (arg == "--deepspeed") {
      // DeepSpeed's enable switch; the engine is always on here.
    } else {
      out.rest.push_back(arg);
    }
  }
  return out;
}

std::vector<std::string> drop_local_rank(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    std::string value;
    if (take_option(args, i, "--local_rank", value) || take_option(args, i, "--local-rank", value))
      parse_local_rank(value);  // validated as parse_args does, then dropped
    else
      out.push_back(args[i]);
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_args(args);
}

}  // namespace zero
