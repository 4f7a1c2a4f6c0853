// aio_bench: write then read one file of --size MiB under --dir through AioEngine with the given
// aio settings, and the same pattern with fio, side by side in GB/s (10^9 bytes/s). O_DIRECT
// bypasses the page cache, so no cache drop is needed between the passes.
#include <zero/error.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "aio_raw.h"

namespace {

constexpr const char* kUsage =
    "usage: aio_bench [--dir DIR] [--size MIB] [--block_size BYTES] [--queue_depth N]\n"
    "                 [--intra_op_parallelism N] [--single_submit] [--no_overlap_events]\n"
    "                 [--repeats N] [--buffer_mib MIB] [--no_fio] [--header]\n"
    "  defaults: --dir . --size 1024 --block_size 1M --queue_depth 8 --intra_op_parallelism 1\n"
    "            --repeats 3 (medians) --buffer_mib 256; BYTES takes K, M, G suffixes\n";

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end;
  const double mult = unit.empty()  ? 1
                      : unit == "K" ? 1024
                      : unit == "M" ? 1048576
                      : unit == "G" ? 1073741824
                                    : -1;
  ZERO_CHECK(end != s.c_str() && mult > 0 && v > 0, zero::UsageError, "aio_bench: bad size '", s,
             "' (e.g. 4096, 128K, 1M)");
  return static_cast<int64_t>(v * mult);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".";
  int64_t size_mib = 1024, buffer_mib = 256;
  int repeats = 3;
  bool fio = true, header = false;
  zero::offload::AioOptions o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        ZERO_CHECK(i + 1 < argc, zero::UsageError, "aio_bench: ", a, " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (a == "--dir") {
        dir = value();
      } else if (a == "--size") {
        size_mib = std::stoll(value());
      } else if (a == "--block_size") {
        o.block_size_bytes = parse_bytes(value());
      } else if (a == "--queue_depth") {
        o.queue_depth = std::stoi(value());
      } else if (a == "--intra_op_parallelism") {
        o.intra_op_parallelism = std::stoi(value());
      } else if (a == "--single_submit") {
        o.single_submit = true;
      } else if (a == "--no_overlap_events") {
        o.overlap_events = false;
      } else if (a == "--repeats") {
        repeats = std::max(1, std::stoi(value()));
      } else if (a == "--buffer_mib") {
        buffer_mib = std::stoll(value());
      } else if (a == "--no_fio") {
        fio = false;
      } else if (a == "--header") {
        header = true;
      } else {
        std::cerr << "aio_bench: unknown argument '" << a << "'\n" << kUsage;
        return 2;
      }
    }
    const int64_t bytes = size_mib << 20;
    std::vector<double> w1, w, r, fw, fr;
    std::string why_not = fio ? "" : "--no_fio";
    for (int k = 0; k < repeats; ++k) {
      zero::bench::RawIoResult ours = zero::bench::measure_aio_raw(dir, bytes, o, buffer_mib << 20);
      w1.push_back(ours.first_write_gbps());
      w.push_back(ours.write_gbps());
      r.push_back(ours.read_gbps());
      if (fio && why_not.empty()) {
        zero::bench::RawIoResult theirs = zero::bench::measure_fio(dir, bytes, o, &why_not);
        if (why_not.empty()) {
          fw.push_back(theirs.write_gbps());
          fr.push_back(theirs.read_gbps());
        }
      }
    }
    if (header) {
      std::printf(
          "| block | queue depth | parallelism | single submit | overlap events | MiB |"
          " aio 1st write GB/s | aio write GB/s | fio write GB/s | aio read GB/s |"
          " fio read GB/s |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    auto fio_cell = [&](const std::vector<double>& v) {
      char cell[32];
      if (v.empty()) return std::string("-");
      std::snprintf(cell, sizeof(cell), "%.2f", median(v));
      return std::string(cell);
    };
    std::printf("| %lldK | %d | %d | %s | %s | %lld | %.2f | %.2f | %s | %.2f | %s |\n",
                static_cast<long long>(o.block_size_bytes >> 10), o.queue_depth,
                o.intra_op_parallelism, o.single_submit ? "yes" : "no",
                o.overlap_events ? "yes" : "no", static_cast<long long>(size_mib), median(w1),
                median(w), fio_cell(fw).c_str(), median(r), fio_cell(fr).c_str());
    if (!why_not.empty()) std::fprintf(stderr, "aio_bench: no fio figures: %s\n", why_not.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "aio_bench: error: " << e.what() << "\n";
    return 1;
  }
}
