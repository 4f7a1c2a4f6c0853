// measure_aio_raw and measure_fio (aio_raw.h).
#include "aio_raw.h"

#include <zero/error.h>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace zero::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t pattern(uint64_t i) {  // splitmix64: random-looking, never all zeros, cheap to redo
  uint64_t z = i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One pass over the file with requests of the buffer's size, all issued before waiting.
double timed_pass(offload::AioEngine& aio, const offload::SwapFile& file, bool write, void* buf,
                  int64_t buf_bytes, int64_t bytes) {
  const double t0 = now_s();
  for (int64_t off = 0; off < bytes; off += buf_bytes) {
    const int64_t n = std::min(buf_bytes, bytes - off);
    if (write)
      aio.write(file, off, buf, n);
    else
      aio.read(file, off, buf, n);
  }
  aio.wait_all();
  return now_s() - t0;
}

}  // namespace

RawIoResult measure_aio_raw(const std::string& dir, int64_t bytes,
                            const offload::AioOptions& options, int64_t buffer_bytes) {
  static std::atomic<int> runs{0};
  bytes = offload::align_up(bytes);
  const std::string job =
      "aio_bench-" + std::to_string(::getpid()) + "-" + std::to_string(runs.fetch_add(1));
  offload::SwapDir swap(dir, job, 0, "aio_bench --dir");
  offload::SwapFile file = swap.create_file("raw.swp", bytes);
  offload::AioEngine aio(options, 0);
  const int64_t buf_bytes = offload::align_up(std::min(bytes, buffer_bytes));
  offload::AlignedBuffer buf(buf_bytes);
  auto* words = buf.as<uint64_t>();
  const int64_t nwords = buf_bytes / 8;
  for (int64_t i = 0; i < nwords; ++i) words[i] = pattern(static_cast<uint64_t>(i));

  RawIoResult r;
  r.bytes = bytes;
  r.first_write_s = timed_pass(aio, file, true, buf.data(), buf_bytes, bytes);
  r.write_s = timed_pass(aio, file, true, buf.data(), buf_bytes, bytes);
  std::memset(buf.data(), 0xEE, static_cast<size_t>(buf_bytes));
  r.read_s = timed_pass(aio, file, false, buf.data(), buf_bytes, bytes);
  // Every request wrote the same buffer, so whichever read landed last, it reads back the same.
  for (int64_t i = 0; i < nwords; ++i)
    ZERO_CHECK(words[i] == pattern(static_cast<uint64_t>(i)), Error, "aio_bench: data read from ",
               file.path(), " differs at byte ", i * 8);
  ZERO_CHECK(aio.bytes_written() == 2 * bytes && aio.bytes_read() == bytes, Error,
             "aio_bench: counted ", aio.bytes_written(), " bytes written and ", aio.bytes_read(),
             " read, expected ", 2 * bytes, " and ", bytes);
  return r;
}

namespace {
// Runs one fio job; returns its bandwidth in bytes/s, or -1 with *why_not.
double run_fio(const std::string& file, const char* rw, int64_t bytes, const offload::AioOptions& o,
               std::string* why_not) {
  const int jobs = o.intra_op_parallelism;
  const int64_t per_job = bytes / jobs / o.block_size_bytes * o.block_size_bytes;
  if (per_job == 0) {
    *why_not = "the file is smaller than one block per job";
    return -1;
  }
  const std::string err_file = file + ".stderr";
  const std::string cmd = ::zero::detail::str(
      "fio --name=aio_bench --filename=", file, " --rw=", rw, " --bs=", o.block_size_bytes,
      " --iodepth=", o.queue_depth, " --ioengine=io_uring --direct=1 --numjobs=", jobs,
      " --size=", per_job, " --offset_increment=", per_job,
      " --group_reporting --output-format=json 2>", err_file);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *why_not = "cannot start fio: " + std::string(std::strerror(errno));
    return -1;
  }
  std::string out;
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) out.append(chunk, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    std::string err;
    if (FILE* f = std::fopen(err_file.c_str(), "r")) {
      while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0) err.append(chunk, n);
      std::fclose(f);
    }
    *why_not = "fio failed (status " + std::to_string(status) + "): " + err.substr(0, 300);
    return -1;
  }
  std::remove(err_file.c_str());
  try {
    const size_t start = out.find('{');  // fio may print notes before the JSON
    auto json = nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start));
    return json.at("jobs").at(0).at(rw).at("bw_bytes").get<double>();
  } catch (const std::exception& e) {
    *why_not = std::string("cannot read fio's JSON: ") + e.what();
    return -1;
  }
}
}  // namespace

RawIoResult measure_fio(const std::string& dir, int64_t bytes, const offload::AioOptions& options,
                        std::string* why_not) {
  RawIoResult r;
  why_not->clear();
  if (std::system("command -v fio >/dev/null 2>&1") != 0) {
    *why_not = "fio is not installed (apt-get install fio)";
    return r;
  }
  const std::string sub = dir + "/aio_bench-fio-" + std::to_string(::getpid());
  if (::mkdir(sub.c_str(), 0700) != 0) {
    *why_not = "cannot create " + sub + ": " + std::strerror(errno);
    return r;
  }
  const std::string file = sub + "/fio.dat";
  const double w = run_fio(file, "write", bytes, options, why_not);
  const double rd = w > 0 ? run_fio(file, "read", bytes, options, why_not) : -1;
  std::error_code ec;
  std::filesystem::remove_all(sub, ec);
  if (w <= 0 || rd <= 0) return r;
  r.bytes = bytes;
  r.write_s = bytes / w;
  r.read_s = bytes / rd;
  return r;
}

}  // namespace zero::bench
