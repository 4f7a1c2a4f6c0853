// The baseline for `zero bench comm`: the same ops and sizes with Gloo's own algorithms called
// directly on the main thread (no worker thread, no checks); run under zerorun the same way.
#include <zero/comm/process_group.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"

namespace {

using zero::tools::parse_bytes;
using zero::tools::split_list;

class Store : public gloo::rendezvous::Store {
 public:
  Store(c10d::TCPStore& s, std::string prefix) : s_(s), prefix_(std::move(prefix)) {}
  void set(const std::string& k, const std::vector<char>& v) override {
    s_.set(prefix_ + k, std::vector<uint8_t>(v.begin(), v.end()));
  }
  std::vector<char> get(const std::string& k) override {
    auto v = s_.get(prefix_ + k);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::seconds(300));
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    s_.wait(full, t);
  }

 private:
  c10d::TCPStore& s_;
  std::string prefix_;
};

void sum_floats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}
void max_double(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = std::max(x[i], y[i]);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  std::vector<int64_t> sizes = {1 << 20, 16 << 20, 128 << 20};
  int iters = 20, warmup = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ops" && i + 1 < argc)
      ops = split_list(argv[++i]);
    else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      for (auto& s : split_list(argv[++i])) sizes.push_back(parse_bytes(s));
    } else if (a == "--iters" && i + 1 < argc)
      iters = std::stoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc)
      warmup = std::stoi(argv[++i]);
    else if (a == "--json")
      json = true;
    else {
      std::fprintf(stderr,
                   "usage: gloo_direct_bench [--ops a,b] [--sizes 1M,16M] [--iters N] [--warmup N] "
                   "[--json]\n");
      return 2;
    }
  }
  const zero::RankEnv env = zero::detect_rank_env();
  const int w = env.world_size, rank = env.rank;
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = rank == 0;
  so.waitWorkers = false;
  c10d::TCPStore tcp(env.master_addr, so);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  // New-style algorithms on one context; the old-style ReduceScatterHalvingDoubling on its own
  // connections (docs/design.md: mixing older algorithms on a connection can stall).
  auto connect = [&](const std::string& prefix) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, w);
    Store store(tcp, prefix);
    ctx->connectFullMesh(store, dev);
    return ctx;
  };
  std::shared_ptr<gloo::Context> ctx = connect("direct/new/"), old_ctx = connect("direct/old/");
  auto slowest_us = [&](double us) {
    gloo::AllreduceOptions o(ctx);
    o.setOutput(&us, 1);
    o.setReduceFunction(max_double);
    gloo::allreduce(o);
    return us;
  };
  uint32_t tag = 1;
  if (json && rank == 0)
    std::printf("{\"backend\": \"gloo-direct\", \"world_size\": %d, \"results\": [", w);
  bool first = true;
  for (const std::string& op : ops) {
    if (!json && rank == 0)
      std::printf("# %s  gloo direct  world %d  float32  iters %d\n# %14s %12s %12s %12s\n",
                  op.c_str(), w, iters, "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    for (int64_t bytes : sizes) {
      const int64_t numel = std::max<int64_t>(w, bytes / 4 / w * w), chunk = numel / w;
      std::vector<float> big(numel, 1.0f), small(chunk, 1.0f);
      std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
      if (op == "reduce_scatter")
        rs = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
            old_ctx, std::vector<float*>{big.data()}, static_cast<int>(numel),
            std::vector<int>(w, static_cast<int>(chunk)));
      auto run_once = [&] {
        if (op == "all_reduce") {
          gloo::AllreduceOptions o(ctx);
          o.setOutput(big.data(), numel);
          o.setReduceFunction(sum_floats);
          o.setTag(tag++);
          gloo::allreduce(o);
        } else if (op == "reduce_scatter") {
          rs->run();
        } else if (op == "all_gather") {
          gloo::AllgatherOptions o(ctx);
          o.setInput(small.data(), chunk);
          o.setOutput(big.data(), numel);
          o.setTag(tag++);
          gloo::allgather(o);
        } else {
          gloo::BroadcastOptions o(ctx);
          o.setOutput(big.data(), numel);
          o.setRoot(0);
          o.setTag(tag++);
          gloo::broadcast(o);
        }
      };
      for (int i = 0; i < warmup; ++i) run_once();
      gloo::BarrierOptions b(ctx);
      b.setTag(tag++);
      gloo::barrier(b);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) run_once();
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          iters;
      us = slowest_us(us);
      const double algbw = numel * 4.0 / (us * 1e3);
      const double factor = op == "all_reduce"  ? 2.0 * (w - 1) / w
                            : op == "broadcast" ? 1.0
                                                : double(w - 1) / w;
      if (rank != 0) continue;
      if (json) {
        std::printf(
            "%s{\"op\": \"%s\", \"bytes\": %lld, \"time_us\": %.3f, \"algbw_gbps\": %.6f, "
            "\"busbw_gbps\": %.6f}",
            first ? "" : ", ", op.c_str(), static_cast<long long>(numel * 4), us, algbw,
            algbw * factor);
        first = false;
      } else {
        std::printf("  %14lld %12.1f %12.3f %12.3f\n", static_cast<long long>(numel * 4), us, algbw,
                    algbw * factor);
      }
      std::fflush(stdout);
    }
  }
  if (json && rank == 0) std::printf("]}\n");
  gloo::BarrierOptions b(ctx);
  b.setTag(tag++);
  gloo::barrier(b);
  return 0;
}
