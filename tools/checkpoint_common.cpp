// The checkpoint commands' shared helpers: flag parsing, locating a checkpoint directory (with
// the tags a directory holds in the error), byte sizes, and the terminal progress bar.
#include "checkpoint_common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <zero/checkpoint/errors.h>
#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/reader.h>
#include <zero/error.h>

namespace zero::tools {

namespace fs = std::filesystem;

std::string FlagArgs::value(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

bool wants_help(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "-h" || args[i] == "--help") return true;
  return false;
}

FlagArgs parse_flag_args(const std::vector<std::string>& args,
                         const std::set<std::string>& value_flags,
                         const std::set<std::string>& switch_flags) {
  FlagArgs out;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    if (switch_flags.count(flag)) {
      ZERO_CHECK(eq == std::string::npos, UsageError, flag, " takes no value");
      out.switches.insert(flag);
      continue;
    }
    ZERO_CHECK(value_flags.count(flag), UsageError, "unknown option '", flag, "'");
    ZERO_CHECK(!out.values.count(flag), UsageError, flag, " given twice");
    if (eq != std::string::npos) {
      out.values[flag] = a.substr(eq + 1);
    } else {
      ZERO_CHECK(i + 1 < args.size(), UsageError, flag, " needs a value");
      out.values[flag] = args[++i];
    }
  }
  return out;
}

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The tag directories under dir (those with a manifest.json), for error messages.
std::string tags_hint(const std::string& dir) {
  std::vector<std::string> tags;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos)
      continue;
    if (exists(it->path().string() + "/" + ckpt::kManifestFile)) tags.push_back(name);
  }
  if (tags.empty()) return " (it holds no checkpoint: no subdirectory with a manifest.json)";
  std::sort(tags.begin(), tags.end());
  std::string text = " (tags there: ";
  for (size_t i = 0; i < tags.size() && i < 10; ++i) text += (i ? ", " : "") + tags[i];
  return text + (tags.size() > 10 ? ", ...)" : ")");
}

}  // namespace

std::string find_checkpoint_dir(const std::string& dir, const std::string& tag) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw CheckpointError("checkpoint: " + dir + ": no such directory");
  if (tag.empty() && exists(dir + "/" + ckpt::kManifestFile) &&
      !exists(dir + "/" + ckpt::kLatestFile))
    return dir;
  std::optional<std::string> found;
  try {
    found = ckpt::resolve_checkpoint_dir(dir, tag);
  } catch (const CheckpointError& e) {
    throw CheckpointError(e.what() + tags_hint(dir));
  }
  if (!found)
    throw CheckpointError("checkpoint: " + dir + ": no '" + ckpt::kLatestFile +
                          "' file, so pass --tag" + tags_hint(dir));
  return *found;
}

int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {{"", 1},
                                               {"B", 1},
                                               {"KB", 1e3},
                                               {"MB", 1e6},
                                               {"GB", 1e9},
                                               {"TB", 1e12},
                                               {"KIB", 1024.0},
                                               {"MIB", 1048576.0},
                                               {"GIB", 1073741824.0},
                                               {"TIB", 1099511627776.0}};
  auto it = units.find(unit);
  const double bytes = it == units.end() || used == 0 ? -1 : std::floor(value * it->second);
  ZERO_CHECK(bytes >= 1 && bytes < 9e18, UsageError, flag, ": '", text,
             "' is not a size (e.g. 5GB, 500MB, 1GiB, 4096)");
  return static_cast<int64_t>(bytes);
}

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes < (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string shown(const std::string& name) {
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7F) return ckpt::detail::quoted(name);
  return name;
}

}  // namespace zero::tools
