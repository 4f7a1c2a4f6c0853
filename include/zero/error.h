// Typed errors for the whole project and the two check macros.
// ZERO_CHECK validates caller input (throws the named error type with context);
// ZERO_ASSERT guards internal invariants (throws InternalError: a bug in this library).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zero {

// Base of every exception this library throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class ConfigError : public Error {  // a ds_config that cannot be honoured
 public:
  using Error::Error;
};
class CommError : public Error {  // a collective, rendezvous or transport failure
 public:
  using Error::Error;
};
class TimeoutError : public CommError {  // a collective or rendezvous that did not finish in time
 public:
  using CommError::CommError;
};
class UsageError : public Error {  // the library was called in a way it does not support
 public:
  using Error::Error;
};
class CudaError : public Error {  // a CUDA runtime / cuBLAS / NCCL call failed
 public:
  using Error::Error;
};
class CheckpointError : public Error {  // a checkpoint that cannot be written or read
 public:
  using Error::Error;
};
class IoError : public Error {  // a file read or write that failed
 public:
  using Error::Error;
};
class InternalError : public Error {  // a broken invariant: a bug in this library
 public:
  using Error::Error;
};

namespace detail {
// Builds a message from any streamable pieces: detail::str("rank ", r, ": ", msg).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace zero

// ZERO_CHECK(cond, ErrorType, pieces...): throw ErrorType(pieces...) when cond is false.
#define ZERO_CHECK(cond, ErrorType, ...)                            \
  do {                                                              \
    if (!(cond)) throw ErrorType(::zero::detail::str(__VA_ARGS__)); \
  } while (0)

// ZERO_ASSERT(cond, pieces...): an internal invariant; names the file and line.
#define ZERO_ASSERT(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond))                                                                     \
      throw ::zero::InternalError(::zero::detail::str(                               \
          __FILE__, ":", __LINE__, ": internal error: " #cond ": ", ##__VA_ARGS__)); \
  } while (0)
