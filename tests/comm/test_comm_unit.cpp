// Unit tests of comm/ that need no second process: rank/env detection and its precedence,
// Slurm list expansion, ZERO_TIMEOUT, the reduction kernels, a world of one, the comms logger.
#include <catch2/catch.hpp>

#include <zero/comm/comms_log.h>
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include "job_token.h"
#include "reduce_kernels.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdlib>
#include <map>
#include <random>
#include <thread>

using namespace zero;

namespace {
RankEnv detect(const std::map<std::string, std::string>& vars) {
  return zero::detail::detect_rank_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("Slurm node lists expand like scontrol show hostnames") {
  using V = std::vector<std::string>;
  CHECK((zero::detail::expand_slurm_nodelist("node01") == V{"node01"}));
  CHECK((zero::detail::expand_slurm_nodelist("node[01-03,7]") ==
         V{"node01", "node02", "node03", "node7"}));
  CHECK((zero::detail::expand_slurm_nodelist("a[8-10],b,c[1,3]") ==
         V{"a8", "a9", "a10", "b", "c1", "c3"}));
  CHECK((zero::detail::expand_slurm_nodelist("gpu[001-002]-ib") == V{"gpu001-ib", "gpu002-ib"}));
  CHECK((zero::detail::expand_slurm_nodelist("r[1-2]n[1-2]") == V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  CHECK_THROWS_AS(zero::detail::expand_slurm_nodelist("node[1-"), ConfigError);
  CHECK_THROWS_AS(zero::detail::expand_slurm_nodelist("node[3-1]"), ConfigError);
  CHECK((zero::detail::expand_slurm_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1}));
  CHECK((zero::detail::expand_slurm_tasks_per_node("4") == std::vector<int>{4}));
}

TEST_CASE("env:// variables win over OpenMPI and Slurm") {
  std::map<std::string, std::string> vars = {{"RANK", "3"},
                                             {"WORLD_SIZE", "8"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "10.0.0.5"},
                                             {"MASTER_PORT", "29611"},
                                             {"OMPI_COMM_WORLD_RANK", "0"},
                                             {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"SLURM_PROCID", "0"},
                                             {"SLURM_NTASKS", "2"}};
  RankEnv e = detect(vars);
  CHECK(e.source == LaunchSource::kEnv);
  CHECK(e.rank == 3);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.master_addr == "10.0.0.5");
  CHECK(e.master_port == 29611);
}

TEST_CASE("OpenMPI is used without env:// and wins over Slurm") {
  RankEnv e = detect({{"OMPI_COMM_WORLD_RANK", "2"},
                      {"OMPI_COMM_WORLD_SIZE", "3"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                      {"SLURM_PROCID", "0"},
                      {"SLURM_NTASKS", "1"},
                      {"MASTER_PORT", "29612"}});
  CHECK(e.source == LaunchSource::kOpenMpi);
  CHECK(e.rank == 2);
  CHECK(e.world_size == 3);
  CHECK(e.local_rank == 2);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29612);
  // Several nodes and no MASTER_ADDR: nobody knows where rank 0 is.
  CHECK_THROWS_AS(detect({{"OMPI_COMM_WORLD_RANK", "0"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                  ConfigError);
}

TEST_CASE("Slurm: ranks, tasks per node and the first host as master") {
  RankEnv e = detect({{"SLURM_PROCID", "5"},
                      {"SLURM_NTASKS", "7"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NODEID", "2"},
                      {"SLURM_TASKS_PER_NODE", "3(x2),1"},
                      {"SLURM_JOB_NODELIST", "gpu[07-09]"},
                      {"SLURM_NODELIST", "other1"}});
  CHECK(e.source == LaunchSource::kSlurm);
  CHECK(e.rank == 5);
  CHECK(e.world_size == 7);
  CHECK(e.local_world_size == 1);
  CHECK(e.master_addr == "gpu07");
  CHECK(e.master_port == 29500);
  RankEnv f = detect({{"SLURM_PROCID", "1"},
                      {"SLURM_NTASKS", "2"},
                      {"SLURM_NODELIST", "n[3-4]"},
                      {"MASTER_ADDR", "head"}});
  CHECK(f.master_addr == "head");
}

TEST_CASE("no launcher variables: a single process; bad values are ConfigErrors") {
  RankEnv e = detect({});
  CHECK(e.source == LaunchSource::kSingle);
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK_THROWS_AS(detect({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), ConfigError);
  CHECK_THROWS_AS(detect({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), ConfigError);
  CHECK_THROWS_AS(detect({{"RANK", "0"}}), ConfigError);
  CHECK_THROWS_AS(detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
                  ConfigError);
}

TEST_CASE("ZERO_TIMEOUT overrides the 10 minute default") {
  unsetenv("ZERO_TIMEOUT");
  CHECK(default_timeout() == std::chrono::minutes(10));
  setenv("ZERO_TIMEOUT", "2.5", 1);
  CHECK(default_timeout() == std::chrono::milliseconds(2500));
  setenv("ZERO_TIMEOUT", "-1", 1);
  CHECK_THROWS_AS(default_timeout(), ConfigError);
  unsetenv("ZERO_TIMEOUT");
}

TEST_CASE("job token: read in every launch mode, at least 16 characters, tagged by SHA-256") {
  CHECK(detect({}).job_token.empty());
  const std::string token = "0123456789abcdef0123456789abcdef";
  CHECK(
      detect({{"ZERO_JOB_TOKEN", token}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}).job_token ==
      token);
  CHECK(detect({{"ZERO_JOB_TOKEN", token}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}).job_token == token);
  CHECK_THROWS_AS(detect({{"ZERO_JOB_TOKEN", "short"}}), ConfigError);
  // FIPS 180-2 test vectors.
  CHECK(zero::detail::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(zero::detail::sha256_hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(zero::detail::sha256_hex(std::string(1000, 'a')) ==
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  CHECK(zero::detail::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(zero::detail::job_tag("") == "none");
  CHECK(zero::detail::job_tag(token).size() == 16);
  CHECK(zero::detail::job_tag(token) != zero::detail::job_tag(token + "0"));
}

TEST_CASE("reduction kernels round like LibTorch's scalar types") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  const size_t n = 1003;  // a vector body and a scalar tail
  std::vector<c10::Half> ha(n), hb(n), hout(n);
  std::vector<c10::BFloat16> ba(n), bb(n), bout(n);
  for (size_t i = 0; i < n; ++i) {
    ha[i] = c10::Half(dist(rng)), hb[i] = c10::Half(dist(rng));
    ba[i] = c10::BFloat16(dist(rng)), bb[i] = c10::BFloat16(dist(rng));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    zero::detail::reduce_fn(at::kHalf, op)(hout.data(), ha.data(), hb.data(), n);
    zero::detail::reduce_fn(at::kBFloat16, op)(bout.data(), ba.data(), bb.data(), n);
    for (size_t i = 0; i < n; ++i) {
      float h =
          op == ReduceOp::kSum ? float(ha[i]) + float(hb[i]) : std::max(float(ha[i]), float(hb[i]));
      float b =
          op == ReduceOp::kSum ? float(ba[i]) + float(bb[i]) : std::max(float(ba[i]), float(bb[i]));
      REQUIRE(hout[i].x == c10::Half(h).x);
      REQUIRE(bout[i].x == c10::BFloat16(b).x);
    }
  }
  std::vector<int64_t> li = {7, -7, 9}, lo(3);
  zero::detail::reduce_fn(at::kLong, ReduceOp::kMax)(lo.data(), li.data(),
                                                     std::vector<int64_t>{1, 2, 30}.data(), 3);
  CHECK((lo == std::vector<int64_t>{7, 2, 30}));
  zero::detail::divide_inplace(li.data(), 3, at::kLong, 2);
  CHECK((li == std::vector<int64_t>{3, -3, 4}));
  CHECK_THROWS_AS(zero::detail::reduce_fn(at::kDouble, ReduceOp::kSum), UsageError);
}

TEST_CASE("a world of one: every collective is a local identity, no port needed") {
  RankEnv env;  // kSingle
  auto c = init_communicator(env);
  REQUIRE(c->world_size() == 1);
  at::Tensor t = at::arange(10, at::kFloat);
  c->all_reduce(t, ReduceOp::kAvg)->wait();
  CHECK(at::equal(t, at::arange(10, at::kFloat)));
  at::Tensor out = at::zeros({10}, at::kFloat);
  c->reduce_scatter(t, out, ReduceOp::kSum)->wait();
  CHECK(at::equal(out, t));
  at::Tensor g = at::zeros({10}, at::kFloat);
  c->all_gather_v(t, g, {10})->wait();
  CHECK(at::equal(g, t));
  c->broadcast(t, 0)->wait();
  auto sub = c->new_group({0});
  REQUIRE(sub);
  sub->barrier()->wait();
  CHECK_THROWS_AS(c->broadcast(t, 1), UsageError);
  CHECK_THROWS_AS(c->new_group({0, 0}), UsageError);
  at::Tensor d = at::zeros({2}, at::kDouble);
  CHECK_THROWS_AS(c->all_reduce(d, ReduceOp::kSum), UsageError);
  auto node = node_group(*c, env);
  REQUIRE(node);
  CHECK(node->world_size() == 1);
}

// DeepSpeed's calc_bw_log (deepspeed/utils/comms_logging.py), transcribed: size in bytes,
// duration in ms, result in Gbps.
namespace {
std::pair<double, double> deepspeed_calc_bw_log(const std::string& comm_op, double size,
                                                double duration, int n) {
  double tput = 0, busbw = 0;
  if (comm_op == "all_gather" || comm_op == "reduce_scatter") {
    size *= n;
    tput = size / duration;
    busbw = (size / duration) * ((n - 1.0) / n);
  } else if (comm_op == "all_reduce") {
    tput = size * 2 / duration;
    busbw = (size / duration) * (2.0 * (n - 1) / n);
  } else {  // broadcast, barrier, send, recv, ...
    tput = size / duration;
    busbw = tput;
  }
  tput *= 8;
  busbw *= 8;
  tput /= 1e6;
  busbw /= 1e6;
  return {tput, busbw};
}
}  // namespace

TEST_CASE("comms logger: DeepSpeed's bandwidth formulas, counts per op and message size") {
  for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier"})
    for (int n : {1, 2, 3, 8})
      for (double ms : {0.25, 3.0}) {
        const auto ours = comm_bandwidth_gbps(op, 1 << 20, n, ms);
        const auto ds = deepspeed_calc_bw_log(op, 1 << 20, ms, n);
        CHECK(ours.first == Approx(ds.first).epsilon(1e-12));
        CHECK(ours.second == Approx(ds.second).epsilon(1e-12));
      }
  CHECK(trim_mean({1, 2, 3, 4, 100, 5, 6, 7, 8, 9}, 0.1) == Approx(5.5));  // drops 1 and 100
  CHECK(convert_size(0) == "0B");
  CHECK(convert_size(1536) == "1.5 KB");
  CHECK(convert_size(4 << 20) == "4 MB");

  CommsLogOptions o;
  o.prof_all = false;
  o.prof_ops = {"all_gather", "reduce_scatter"};
  o.debug = true;
  CommsLog log(o);
  CHECK(log.wants("all_gather"));
  CHECK_FALSE(log.wants("all_reduce"));
  {
    CommsLog::CallerScope caller("backward");
    // A reduce-scatter's buffer is the whole input: the message is one rank's part.
    log.record("reduce_scatter", 4000, 4, 2.0, CommsLog::caller());
    // As autograd's device thread sees it on CUDA (gradient hooks run there during backward).
    std::thread([&] { log.record("reduce_scatter", 4000, 4, 4.0, CommsLog::caller()); }).join();
  }
  CHECK(std::string(CommsLog::caller()).empty());
  log.record("all_gather", 800, 2, 1.0, CommsLog::caller());
  const auto entries = log.entries();
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].name == "all_gather");
  CHECK(entries[0].msg_bytes == 400);
  CHECK(entries[1].name == "reduce_scatter | [Caller: backward]");
  CHECK(entries[1].msg_bytes == 1000);
  CHECK(entries[1].count == 2);
  CHECK(entries[1].total_bytes == 2000);
  CHECK(entries[1].total_ms == Approx(6.0));
  CHECK(entries[1].avg_ms == Approx(3.0));
  CHECK(entries[1].busbw == Approx((deepspeed_calc_bw_log("reduce_scatter", 1000, 2.0, 4).second +
                                    deepspeed_calc_bw_log("reduce_scatter", 1000, 4.0, 4).second) /
                                   2));
  const std::string summary = log.summary();
  CHECK(summary.rfind("Comm. Op", 0) == 0);
  CHECK(summary.find("Total Latency(ms)") != std::string::npos);
  CHECK(summary.find("reduce_scatter | [Caller: backward]\n") != std::string::npos);
  log.reset();
  CHECK(log.entries().empty());
}
