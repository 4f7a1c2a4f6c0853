// The checkpoint component's error type and its message builder: every message starts with
// "checkpoint: <path>: " so that a bad, corrupt or missing file is always named.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <zero/error.h>

namespace zero::ckpt {

// zero::CheckpointError (a zero::Error) under the component's namespace: one type, so that
// `catch (const zero::CheckpointError&)` in the engine sees every error thrown here.
using CheckpointError = ::zero::CheckpointError;

namespace detail {
// checkpoint_error(path, pieces...) -> CheckpointError("checkpoint: <path>: <pieces>").
template <typename... Args>
CheckpointError checkpoint_error(const std::string& path, const Args&... args) {
  return CheckpointError(::zero::detail::str("checkpoint: ", path, ": ", args...));
}

// 'name' with control characters, quotes and backslashes escaped as \xNN and names longer than
// 200 bytes cut, so that a name read from a hostile file cannot garble an error message.
inline std::string quoted(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\') {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}
}  // namespace detail

}  // namespace zero::ckpt
