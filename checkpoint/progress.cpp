// Progress: the in-place bar of long checkpoint operations (see progress.h).
#include <zero/checkpoint/progress.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace zero::ckpt {

std::string rate_text(int64_t bytes, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f MiB/s",
                static_cast<double>(bytes) / 1048576.0 / std::max(seconds, 1e-6));
  return buf;
}

Progress::Progress(std::string label, int64_t total_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  finish();
}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::advance(int64_t bytes) {
  done_ += bytes;
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw();
}

void Progress::draw() {
  constexpr int kWidth = 30;
  const double frac =
      total_ > 0 ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %3.0f%%  %.1f / %.1f MiB  %s\033[K", label_.c_str(), bar.c_str(),
               frac * 100, static_cast<double>(done_) / 1048576.0,
               static_cast<double>(total_) / 1048576.0, rate_text(done_, seconds()).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (!tty_ || !drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace zero::ckpt
