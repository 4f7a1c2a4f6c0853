// Progress of a long checkpoint operation (save, load, verify, export): on a terminal a one-line
// bar with bytes and rate; elsewhere nothing, so logs get only the caller's summary line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zero::ckpt {

std::string rate_text(int64_t bytes, double seconds);  // "380 MiB/s"

// Bytes done of a known total. On a terminal (stderr is a tty) a one-line bar with MiB and
// MiB/s, redrawn in place at most 10 times a second; elsewhere it draws nothing, so that
// logs get only the caller's summary line. finish() erases the bar.
class Progress {
 public:
  Progress(std::string label, int64_t total_bytes);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t bytes);
  void finish();
  double seconds() const;

 private:
  void draw();

  std::string label_;
  int64_t total_ = 0, done_ = 0;
  bool tty_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace zero::ckpt
