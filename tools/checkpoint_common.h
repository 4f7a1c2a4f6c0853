// What `zero checkpoint inspect` and `zero checkpoint export` share: their flag parser, finding
// the checkpoint directory of DIR [--tag T], byte sizes in and out, and the progress meter.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <zero/checkpoint/progress.h>
#include <zero/text.h>

namespace zero::tools {

using ckpt::Progress;
using ckpt::rate_text;

// Exit codes of the checkpoint commands: every failure (usage, missing or corrupt file) is 1.
constexpr int kCkptOk = 0;
constexpr int kCkptFail = 1;

// A sub-command's arguments: positionals in order, `--flag value` / `--flag=value` values and
// switches. Unknown options, missing values and repeated flags are UsageErrors.
struct FlagArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::set<std::string> switches;

  bool has(const std::string& flag) const { return switches.count(flag) > 0; }
  std::string value(const std::string& flag, const std::string& fallback = "") const;
};
FlagArgs parse_flag_args(const std::vector<std::string>& args,
                         const std::set<std::string>& value_flags,
                         const std::set<std::string>& switch_flags);
bool wants_help(const std::vector<std::string>& args);

// The checkpoint directory named by DIR and --tag: DIR/<tag>; with no tag, DIR/<contents of
// DIR/latest>, or DIR itself when it holds a manifest.json (a tag directory given directly).
// CheckpointError when there is none, listing the tags that DIR holds.
std::string find_checkpoint_dir(const std::string& dir, const std::string& tag);

// "5GB" (10^9), "500MB", "1GiB" (2^30), "20KB", "4096": Hugging Face's max_shard_size units,
// case-insensitive; a positive byte count or a UsageError naming `flag`.
int64_t parse_byte_size(const std::string& flag, const std::string& text);

std::string size_text(int64_t bytes);  // "12.3 MiB"; "27.6 KiB" under 1 MiB
std::string grouped(int64_t n);        // 1234567 -> "1,234,567"
// A name read from a checkpoint, as it is when printable, else quoted with \xNN escapes, so
// that a hostile manifest cannot send control sequences to the terminal.
std::string shown(const std::string& name);
// "[24, 127]"
using ::zero::detail::shape_text;

}  // namespace zero::tools
