// `zero bench comm`: collective bandwidth through our Communicator, run under zerorun; prints an
// nccl-tests style table per op (size, transport, time, algbw, busbw, and the host memcpy
// bandwidth of the same bytes measured in the same run, every rank copying at once) or, with
// --json, one JSON document. On the Gloo backend with the ranks on one host, every size is
// measured through shared memory and through Gloo's TCP, alternately.
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "command.h"

namespace zero::tools {
namespace {

const char* kUsage =
    "usage: zero bench comm [--backend gloo|nccl] [--ops "
    "all_reduce,reduce_scatter,all_gather,broadcast]\n"
    "                       [--min-bytes B] [--max-bytes B] [--factor F] [--sizes B1,B2,...]\n"
    "                       [--iters N] [--warmup N] [--transport auto|tcp|both] [--json]\n"
    "  sizes accept K/M/G suffixes (powers of 1024); --transport (gloo): auto measures the\n"
    "  job's transport (ZERO_COMM_TRANSPORT), tcp Gloo's TCP, both (the default) shared memory\n"
    "  and TCP side by side when the ranks share a host (a second rendezvous on MASTER_PORT+1);\n"
    "  run under zerorun, e.g.\n"
    "  zerorun --nproc_per_node 2 zero bench comm --sizes 1M,16M,128M\n";

struct Options {
  Backend backend = Backend::kGloo;
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  std::vector<int64_t> sizes;
  int64_t min_bytes = 1 << 20, max_bytes = 128 << 20, factor = 2;
  int iters = 20, warmup = 3;
  bool json = false;
  std::string transport = "both";
};

Options parse(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      ZERO_CHECK(i + 1 < args.size(), UsageError, a, " needs a value\n", kUsage);
      return args[++i];
    };
    if (a == "--backend") {
      const std::string& b = value();
      ZERO_CHECK(b == "gloo" || b == "nccl", UsageError, "--backend: gloo or nccl, not '", b, "'");
      o.backend = b == "gloo" ? Backend::kGloo : Backend::kNccl;
    } else if (a == "--ops") {
      o.ops = split_list(value());
      for (const auto& op : o.ops)
        ZERO_CHECK(
            op == "all_reduce" || op == "reduce_scatter" || op == "all_gather" || op == "broadcast",
            UsageError, "--ops: unknown op '", op, "'");
    } else if (a == "--min-bytes") {
      o.min_bytes = parse_bytes(value());
    } else if (a == "--max-bytes") {
      o.max_bytes = parse_bytes(value());
    } else if (a == "--factor") {
      o.factor = std::stoll(value());
    } else if (a == "--sizes") {
      for (const auto& s : split_list(value())) o.sizes.push_back(parse_bytes(s));
    } else if (a == "--iters") {
      o.iters = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--transport") {
      o.transport = value();
      ZERO_CHECK(o.transport == "auto" || o.transport == "tcp" || o.transport == "both", UsageError,
                 "--transport: auto, tcp or both, not '", o.transport, "'");
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--help" || a == "-h") {
      throw UsageError(kUsage);
    } else {
      throw UsageError(detail::str("unknown argument '", a, "'\n", kUsage));
    }
  }
  ZERO_CHECK(o.iters > 0 && o.warmup >= 0 && o.factor >= 2 && o.min_bytes > 0 &&
                 o.max_bytes >= o.min_bytes,
             UsageError, "bad --iters/--warmup/--factor/--min-bytes/--max-bytes\n", kUsage);
  if (o.sizes.empty())
    for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) o.sizes.push_back(b);
  return o;
}

struct Result {
  std::string op, transport;
  int64_t bytes;
  double time_us, algbw_gbps, busbw_gbps;
  double memcpy_gbps;  // one host memcpy of `bytes` on every rank at once (the slowest rank)
};

// The slowest rank's time in ns for `body` run iters times, every rank starting together.
template <typename Body>
double slowest_ns(Communicator& c, const at::Device& dev, int iters, Body body) {
  c.barrier()->synchronize();
  const auto start = std::chrono::steady_clock::now();
  body();
  const double elapsed_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  at::Tensor t = at::full({1}, static_cast<int64_t>(elapsed_ns),
                          at::TensorOptions().dtype(at::kLong).device(dev));
  c.all_reduce(t, ReduceOp::kMax)->wait();
  return static_cast<double>(t.cpu().item<int64_t>()) / iters;
}

double bus_factor(const std::string& op, int w) {
  if (op == "all_reduce") return 2.0 * (w - 1) / w;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(w - 1) / w;  // reduce_scatter, all_gather
}

Result measure(Communicator& c, const Options& o, const std::string& op, int64_t bytes,
               const at::Device& dev) {
  const int w = c.world_size();
  const int64_t numel = std::max<int64_t>(w, bytes / 4 / w * w);  // float32, divisible by w
  auto opts = at::TensorOptions().dtype(at::kFloat).device(dev);
  at::Tensor big = at::ones({numel}, opts), small = at::ones({numel / w}, opts);
  auto run_once = [&]() -> WorkHandle {
    if (op == "all_reduce") return c.all_reduce(big, ReduceOp::kSum);
    if (op == "reduce_scatter") return c.reduce_scatter(big, small, ReduceOp::kSum);
    if (op == "all_gather") return c.all_gather(small, big);
    return c.broadcast(big, 0);
  };
  for (int i = 0; i < o.warmup; ++i) run_once()->wait();
  const double time_us =
      slowest_ns(c, dev, o.iters,
                 [&] {
                   WorkHandle last;
                   for (int i = 0; i < o.iters; ++i) last = run_once();
                   last->wait();
                   if (dev.is_cuda())
                     big.slice(0, 0, 1).cpu();  // waits for the stream the work was ordered on
                 }) /
      1e3;
  const int64_t real_bytes = numel * 4;
  const double algbw = real_bytes / (time_us * 1e3);  // bytes/ns == GB/s
  // What moving these bytes costs without a network: a plain copy on every rank at once.
  std::vector<char> from(static_cast<size_t>(real_bytes), 1), to(static_cast<size_t>(real_bytes));
  for (int i = 0; i < o.warmup; ++i) std::memcpy(to.data(), from.data(), from.size());
  const double copy_ns = slowest_ns(c, dev, o.iters, [&] {
    for (int i = 0; i < o.iters; ++i) std::memcpy(to.data(), from.data(), from.size());
  });
  return {op,
          c.transport(),
          real_bytes,
          time_us,
          algbw,
          algbw * bus_factor(op, w),
          real_bytes / copy_ns};
}

int run(const std::vector<std::string>& args) {
  const Options o = parse(args);
  const RankEnv env = detect_rank_env();
  CommOptions copts;
  copts.backend = o.backend;
  if (o.transport == "tcp") copts.transport = Transport::kTcp;
  std::vector<std::shared_ptr<Communicator>> comms{init_communicator(env, copts)};
  if (o.backend == Backend::kGloo && o.transport == "both" &&
      std::string(comms[0]->transport()) == "shm") {
    RankEnv tcp_env = env;
    tcp_env.master_port += 1;
    copts.transport = Transport::kTcp;
    comms.push_back(init_communicator(tcp_env, copts));
  }
  Communicator& c = *comms[0];
  const at::Device dev =
      o.backend == Backend::kNccl ? at::Device(at::kCUDA, env.local_rank) : at::Device(at::kCPU);
  std::vector<Result> results;
  for (const std::string& op : o.ops) {
    if (!o.json && c.rank() == 0)
      std::printf("# %s  backend %s  world %d  float32  iters %d\n# %14s %9s %12s %12s %12s %13s\n",
                  op.c_str(), to_string(o.backend), c.world_size(), o.iters, "size(B)", "transport",
                  "time(us)", "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)");
    for (int64_t bytes : o.sizes)
      for (const auto& comm : comms) {
        Result r = measure(*comm, o, op, bytes, dev);
        results.push_back(r);
        if (!o.json && c.rank() == 0)
          std::printf("  %14lld %9s %12.1f %12.3f %12.3f %13.3f\n", static_cast<long long>(r.bytes),
                      r.transport.c_str(), r.time_us, r.algbw_gbps, r.busbw_gbps, r.memcpy_gbps);
        std::fflush(stdout);
      }
  }
  if (o.json && c.rank() == 0) {
    std::printf("{\"backend\": \"%s\", \"world_size\": %d, \"results\": [", to_string(o.backend),
                c.world_size());
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::printf(
          "%s{\"op\": \"%s\", \"transport\": \"%s\", \"bytes\": %lld, \"time_us\": %.3f, "
          "\"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"memcpy_gbps\": %.6f}",
          i ? ", " : "", r.op.c_str(), r.transport.c_str(), static_cast<long long>(r.bytes),
          r.time_us, r.algbw_gbps, r.busbw_gbps, r.memcpy_gbps);
    }
    std::printf("]}\n");
  }
  for (const auto& comm : comms) comm->barrier()->synchronize();
  return 0;
}

}  // namespace

ZERO_COMMAND("bench comm", "collective bandwidth through the Communicator (run under zerorun)",
             run);

}  // namespace zero::tools
