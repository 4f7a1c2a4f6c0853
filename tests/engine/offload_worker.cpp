// Optimizer offload against the same run without it, started by zerorun on 1-4 ranks:
// `--suite equal` (stages 1-3 x {cpu, nvme} x {fp32, bf16}, sub-groups, the NVMe pipeline's
// settings; bitwise equal parameters, memory in the right place) and `--suite faults` (bad
// offload settings and nvme paths: clear errors at initialize). ZERO_TEST_SWAP_DIR is the
// nvme_path (a fresh directory from with_temp_dir.sh).
#include "worker_util.h"

#include <zero/engine/engine.h>
#include <zero/engine/init.h>
#include <zero/engine/sharded.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

using namespace zero;
using namespace zero::test;

namespace {

std::string swap_dir() {
  const char* dir = std::getenv("ZERO_TEST_SWAP_DIR");
  return dir ? dir : "";
}

struct OffloadCase {
  std::string device;  // "cpu" | "nvme" | "none" (the optimizer on the device)
  int64_t sub_group = 1000000000;
  int buffer_count = 4;
  bool pipeline = false;  // pipeline_read and pipeline_write
  bool fast_init = false;
  std::string param_device;  // offload_param: "" (none), "cpu" or "nvme"
  int param_buffers = 5;
  int64_t param_buffer_numel = 100000000;
  int64_t max_in_cpu = 0;  // nvme: every shard swapped
};

std::string offload_json(const OffloadCase& o) {
  return zero::detail::str(
      R"(, "sub_group_size": )", o.sub_group,
      o.device == "none"
          ? std::string()
          : zero::detail::str(R"(, "offload_optimizer": {"device": ")", o.device,
                              R"(", "nvme_path": ")", swap_dir(), R"(", "buffer_count": )",
                              o.buffer_count, R"(, "pipeline_read": )",
                              o.pipeline ? "true" : "false", R"(, "pipeline_write": )",
                              o.pipeline ? "true" : "false", R"(, "fast_init": )",
                              o.fast_init ? "true" : "false", R"(, "pin_memory": true})"),
      o.param_device.empty()
          ? std::string()
          : zero::detail::str(R"(, "offload_param": {"device": ")", o.param_device,
                              R"(", "nvme_path": ")", swap_dir(), R"(", "buffer_count": )",
                              o.param_buffers, R"(, "buffer_size": )", o.param_buffer_numel,
                              R"(, "max_in_cpu": )", o.max_in_cpu, R"(, "pin_memory": true})"));
}

// train() of worker_util.h with the inputs in the parameters' dtype (bf16 runs).
void train_as(Engine& engine, Net& net, const Case& c, int world, int rank, torch::Dtype dtype) {
  const int64_t global = c.micro * c.gas * world;
  for (int step = 0; step < c.steps; ++step)
    for (int m = 0; m < c.gas; ++m) {
      auto [x, y] = samples(7, step * global + (m * world + rank) * c.micro, c.micro);
      engine.backward(torch::mse_loss(net->forward(x.to(dtype)).to(torch::kFloat), y));
      engine.step();
    }
}

void run_equal(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string bf16 = R"(, "bf16": {"enabled": true})";
  struct Row {
    int stage;
    bool bf16;
    OffloadCase o;
    int gas;
    double clip;
  };
  std::vector<Row> rows;
  for (int stage = 1; stage <= 3; ++stage)
    for (bool half : {false, true}) {
      rows.push_back({stage, half, {"cpu"}, 1, 0.0});
      rows.push_back({stage, half, {"cpu", 300}, 2, 0.05});
      rows.push_back({stage, half, {"nvme", 300, 2, true}, 2, 0.05});
      rows.push_back({stage, half, {"nvme"}, 1, 0.0});
    }
  rows.push_back({3, false, {"nvme", 257, 1, false, true}, 2, 0.0});  // one buffer, fast_init
  rows.push_back({2, true, {"nvme", 100, 3, true, false}, 2, 0.05});
  rows.push_back({1, false, {"nvme", 1000, 8, false, true}, 1, 0.05});
  // Parameter offload (stage 3): shards in host memory or swapped (max_in_cpu 0: all of them;
  // a max_in_cpu that keeps some in memory; one swap-in buffer).
  for (bool half : {false, true}) {
    rows.push_back({3, half, {"cpu", 1000000000, 4, false, false, "cpu"}, 1, 0.0});
    rows.push_back({3, half, {"nvme", 300, 2, true, false, "nvme"}, 2, 0.05});
    rows.push_back({3, half, {"cpu", 300, 4, false, false, "nvme", 1}, 2, 0.0});
  }
  rows.push_back({3, false, {"nvme", 5000, 3, true, true, "nvme", 2, 100000000, 600}, 1, 0.05});
  // Parameter offload with the optimizer on the device (as DeepSpeed allows): the fp32 master
  // stays on the device, the updated parameters go to the store after each step.
  for (bool half : {false, true}) {
    rows.push_back({3, half, {"none", 1000000000, 4, false, false, "cpu"}, 2, 0.05});
    rows.push_back({3, half, {"none", 1000000000, 4, false, false, "nvme", 1}, 1, 0.0});
  }
  for (const Row& row : rows) {
    Case c;
    c.stage = row.stage;
    c.gas = row.gas;
    c.clip = row.clip;
    c.micro = row.gas == 1 ? 2 : 1;
    if (row.bf16) c.extra_top = bf16;
    const std::string name = zero::detail::str(
        "stage ", c.stage, row.bf16 ? " bf16" : " fp32", " ", row.o.device, " sub_group ",
        row.o.sub_group, " buffers ", row.o.buffer_count, row.o.pipeline ? " pipelined" : "",
        row.o.fast_init ? " fast_init" : "",
        row.o.param_device.empty()
            ? std::string()
            : zero::detail::str(" params ", row.o.param_device, " buffers ", row.o.param_buffers,
                                " max_in_cpu ", row.o.max_in_cpu),
        " gas ", c.gas, " clip ", c.clip);
    Net plain_net(42, 2, /*wrap=*/true);
    Engine plain = initialize(plain_net.ptr(), parse(config_json(c, world), world), comm);
    const torch::Dtype dtype = row.bf16 ? torch::kBFloat16 : torch::kFloat;
    train_as(plain, plain_net, c, world, rank, dtype);
    const Params expected = plain.full_parameters();

    Net net(42, 2, /*wrap=*/true);
    Engine engine =
        initialize(net.ptr(), parse(config_json(c, world, offload_json(row.o)), world), comm);
    const MemoryReport before = engine.memory_report();
    train_as(engine, net, c, world, rank, dtype);
    const Params got = engine.full_parameters();
    EXPECT(bitwise_equal(got, expected), name, ": parameters differ from the run without offload ",
           "(max rel diff ", max_rel_diff(got, expected), ")");
    EXPECT(engine.global_steps() == plain.global_steps(), name, ": steps");

    // Where the memory is: nothing of the optimizer on the device; the master and moments
    // (12 bytes per shard element) in host memory or in the swap file.
    const MemoryReport m = engine.memory_report();
    const MemoryReport p = plain.memory_report();
    const int64_t shard_numel = p.optimizer_states_bytes / 8;
    if (row.o.device == "none") {
      // The optimizer as without offload; the master is the device's only copy of an offloaded
      // shard (in fp32 a master of its own, where the run without offload aliases the shard).
      const int64_t own_masters = row.bf16 ? 0 : p.parameters_bytes - m.parameters_bytes;
      EXPECT(m.optimizer_states_bytes == p.optimizer_states_bytes &&
                 m.master_params_bytes == p.master_params_bytes + own_masters &&
                 m.host_optimizer_states_bytes == 0 && m.host_master_params_bytes == 0,
             name, ": optimizer on the device: ", m.to_string(), " vs ", p.to_string());
    } else {
      EXPECT(m.optimizer_states_bytes == 0 && m.master_params_bytes == 0, name,
             ": optimizer states or masters on the device: ", m.to_string());
    }
    if (row.o.device == "cpu") {
      EXPECT(m.host_optimizer_states_bytes == 8 * shard_numel &&
                 m.host_master_params_bytes == 4 * shard_numel,
             name, ": host bytes ", m.to_string(), " for ", shard_numel, " shard elements");
      if (row.o.param_device != "nvme")
        EXPECT(m.nvme_bytes == 0, name, ": nvme bytes ", m.nvme_bytes);
    } else if (row.o.device == "nvme") {
      EXPECT(m.host_optimizer_states_bytes == 0 && m.host_master_params_bytes == 0, name,
             ": states in host memory with nvme: ", m.to_string());
      EXPECT(m.nvme_bytes >= 12 * shard_numel, name, ": swap file ", m.nvme_bytes, " bytes for ",
             shard_numel, " elements");
      EXPECT(before.nvme_bytes == m.nvme_bytes, name, ": the swap file changed size");
    }
    // The buffers: buffer_count optimizer sub-groups of 3 x 4 bytes (page-rounded; sub-groups
    // start on 4096-byte blocks of the parameter swap file with nvme parameters), plus
    // buffer_count parameter shards and two write buffers.
    const int64_t page = 4096;
    const int64_t align = row.o.param_device == "nvme" ? page / (row.bf16 ? 2 : 4) : 64;
    const int64_t sub = (row.o.sub_group + align - 1) / align * align;
    const int64_t per_buffer = 3 * ((std::min(sub, shard_numel) * 4 + page - 1) / page * page);
    int64_t buffers = row.o.device == "nvme" ? row.o.buffer_count * per_buffer : 0;
    if (row.o.param_device == "nvme")
      buffers += (row.o.param_buffers + 2) * ((p.parameters_bytes + page - 1) / page * page);
    EXPECT(m.host_buffers_bytes <= buffers + (row.bf16 ? shard_numel * 2 : 0), name, ": buffers ",
           m.host_buffers_bytes, " bytes, expected at most ", buffers);
    // Parameter shards: off the device, in host memory or the swap file; the persistent small
    // parameters stay.
    if (!row.o.param_device.empty()) {
      const int64_t offloaded = p.parameters_bytes - m.parameters_bytes;
      EXPECT(offloaded > 0, name, ": no parameter bytes left the device: ", m.to_string());
      if (row.o.param_device == "cpu")
        EXPECT(m.host_parameters_bytes == offloaded, name, ": host parameters ",
               m.host_parameters_bytes, " bytes, ", offloaded, " offloaded");
      else
        EXPECT(m.host_parameters_bytes <= row.o.max_in_cpu * (row.bf16 ? 2 : 4) &&
                   m.nvme_bytes >= offloaded - m.host_parameters_bytes,
               name, ": nvme parameters: ", m.to_string());
    } else {
      EXPECT(m.parameters_bytes == p.parameters_bytes && m.host_parameters_bytes == 0, name,
             ": parameter bytes moved without offload_param");
    }
    if (rank == 0)
      std::printf("offload world %d %-70s equal: %s; %s\n", world, name.c_str(),
                  bitwise_equal(got, expected) ? "bitwise" : "NO", m.to_string().c_str());
  }
  // The engine's swap folders are gone once the engines are.
  comm->barrier()->wait();
  if (rank == 0) {
    int left = 0;
    for (const auto& e : std::filesystem::directory_iterator(swap_dir())) {
      ++left;
      std::fprintf(stderr, "left behind: %s\n", e.path().c_str());
    }
    EXPECT(left == 0, left, " entries left in the nvme_path after the engines were destroyed");
  }
}

// zero::Init: blocks partitioned as they are built train exactly as the model built whole
// (same seed), with and without optimizer offload; the blocks' parameters hold no memory between
// construction and initialize; a config at another stage is refused.
void run_init(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  struct Row {
    bool bf16;
    std::string offload;
    std::string params;   // offload_param
    bool shared = false;  // host_shared_params: each rank writes its shard into the one copy
  };
  for (const Row& row : std::vector<Row>{{false, ""},
                                         {true, ""},
                                         {true, "cpu"},
                                         {false, "nvme"},
                                         {true, "cpu", "cpu"},
                                         {false, "nvme", "nvme"},
                                         {true, "", "nvme"},
                                         {false, "", "", true},
                                         {true, "cpu", "", true}}) {
    Case c;
    c.stage = 3;
    c.gas = 2;
    c.micro = 1;
    c.clip = 0.05;
    c.host_shared = row.shared;
    if (row.bf16) c.extra_top = R"(, "bf16": {"enabled": true})";
    OffloadCase o;
    o.device = row.offload.empty() ? "none" : row.offload;
    o.param_device = row.params;
    const bool any = !row.offload.empty() || !row.params.empty();
    const std::string json = config_json(c, world, any ? offload_json(o) : "");
    const std::string name = zero::detail::str("stage 3", row.bf16 ? " bf16" : " fp32",
                                               row.offload.empty() ? "" : " offload ", row.offload,
                                               row.params.empty() ? "" : " params ", row.params,
                                               row.shared ? " host-shared" : "");
    const torch::Dtype dtype = row.bf16 ? torch::kBFloat16 : torch::kFloat;
    Net whole_net(42, 2, /*wrap=*/true);
    Engine whole = initialize(whole_net.ptr(), parse(json, world), comm);
    train_as(whole, whole_net, c, world, rank, dtype);
    const Params expected = whole.full_parameters();

    const ParsedConfig parsed = parse(json, world);
    std::optional<Net> net;
    {
      Init init(parsed);
      net.emplace(42, 2, /*wrap=*/true);
    }
    int64_t held = 0, blocks = 0;
    for (const auto& m : (*net)->modules(/*include_self=*/false))
      if (auto* w = dynamic_cast<ShardedImpl*>(m.get())) {
        ++blocks;
        EXPECT(w->partitioned(), name, ": a block built under zero::Init was not partitioned");
        for (const auto& p : w->parameters())
          if (p.numel() > 30) held += static_cast<int64_t>(p.storage().nbytes());
      }
    EXPECT(blocks > 0 && held == 0, name, ": ", held,
           " bytes of block parameters held after "
           "zero::Init (",
           blocks, " blocks)");
    Engine engine = initialize(net->ptr(), parsed, comm);
    train_as(engine, *net, c, world, rank, dtype);
    const Params got = engine.full_parameters();
    EXPECT(bitwise_equal(got, expected), name,
           ": zero::Init run differs from the whole build (max ", "rel diff ",
           max_rel_diff(got, expected), ")");
    EXPECT(engine.memory_report().parameters_bytes == whole.memory_report().parameters_bytes, name,
           ": parameter bytes ", engine.memory_report().parameters_bytes, " vs ",
           whole.memory_report().parameters_bytes);
    if (rank == 0)
      std::printf("init world %d %-28s equal to the whole build: %s\n", world, name.c_str(),
                  bitwise_equal(got, expected) ? "bitwise" : "NO");
  }
  Case stage2;
  stage2.stage = 2;
  expect_throw<ConfigError>("zero::Init at stage 2", "stage 3",
                            [&] { Init init(parse(config_json(stage2, world), world)); });
  // Partitioned for stage 3, initialized at stage 2.
  Case stage3;
  stage3.stage = 3;
  std::optional<Net> net;
  {
    Init init(parse(config_json(stage3, world), world));
    net.emplace(42, 2, /*wrap=*/true);
  }
  expect_throw<UsageError>("Init blocks at stage 2", "zero::Init", [&] {
    initialize(net->ptr(), parse(config_json(stage2, world), world), comm);
  });
}

void run_faults(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  Case c;
  c.stage = 3;
  auto init = [&](const Case& cc, const std::string& zero_extra) {
    Net net(42, 2, /*wrap=*/true);
    initialize(net.ptr(), parse(config_json(cc, world, zero_extra), world), comm);
  };
  auto oo = [](const std::string& body) {
    return zero::detail::str(R"(, "offload_optimizer": {)", body, "}");
  };
  expect_throw<ConfigError>("ratio 0.5", "ratio",
                            [&] { init(c, oo(R"("device": "cpu", "ratio": 0.5)")); });
  expect_throw<ConfigError>("super_offload", "super_offload",
                            [&] { init(c, oo(R"("device": "cpu", "super_offload": true)")); });
  // Where offload has no effect DeepSpeed ignores it and the parser warned: the run trains as
  // without it (stage 0: no optimizer partition; offload_param below stage 3).
  for (const auto& [stage, extra] : std::vector<std::pair<int, std::string>>{
           {0, oo(R"("device": "cpu")")}, {2, R"(, "offload_param": {"device": "cpu"})"}}) {
    Case cc = c;
    cc.stage = stage;
    ParsedConfig parsed = parse(config_json(cc, world, extra), world);
    EXPECT(!parsed.warnings.empty(), "stage ", stage, ": no warning for ", extra);
    Net net(42, 2, /*wrap=*/true);
    Engine engine = initialize(net.ptr(), parsed, comm);
    EXPECT(engine.memory_report().host_bytes() == 0, "stage ", stage, ": offloaded anyway");
  }
  const std::string cpu_optimizer = oo(R"("device": "cpu")");
  expect_throw<ConfigError>("offload_param nvme without path", "offload_param.device", [&] {
    init(c, cpu_optimizer + R"(, "offload_param": {"device": "nvme"})");
  });
  const std::string missing_params = swap_dir() + "/no/such/dir";
  expect_throw<ConfigError>("offload_param nvme_path missing", "offload_param.nvme_path", [&] {
    init(c, cpu_optimizer + zero::detail::str(R"(, "offload_param": {"device": "nvme", )",
                                              R"("nvme_path": ")", missing_params, R"("})"));
  });
  // A shard larger than a swap-in buffer: DeepSpeed asserts; we name the key and the size.
  expect_throw<ConfigError>(
      "offload_param buffer_size too small", "offload_param.buffer_size", [&] {
        init(c, cpu_optimizer + zero::detail::str(R"(, "offload_param": {"device": "nvme", )",
                                                  R"("nvme_path": ")", swap_dir(),
                                                  R"(", "buffer_size": 8, "max_in_cpu": 0})"));
      });
  Case sgd = c;
  sgd.optimizer = "SGD";
  expect_throw<ConfigError>("SGD offloaded", "SGD", [&] { init(sgd, oo(R"("device": "cpu")")); });
  expect_throw<ConfigError>("nvme without path", "nvme_path",
                            [&] { init(c, oo(R"("device": "nvme")")); });
  const std::string missing = swap_dir() + "/does/not/exist";
  expect_throw<ConfigError>("nvme_path missing", missing, [&] {
    init(c, oo(zero::detail::str(R"("device": "nvme", "nvme_path": ")", missing, R"(")")));
  });
  // A regular file where a directory is expected (each rank its own, made before the check).
  const std::string file = zero::detail::str(swap_dir(), "/a-file-", comm->rank());
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (f) std::fclose(f);
  expect_throw<ConfigError>("nvme_path is a file", "not a directory", [&] {
    init(c, oo(zero::detail::str(R"("device": "nvme", "nvme_path": ")", file, R"(")")));
  });
  std::remove(file.c_str());

  // A swap file that loses its data mid-run (here: truncated behind the engine's back): the next
  // step fails with an IoError naming the file, the offset and the rank; no step is silently
  // computed from missing state.
  {
    Case cc = c;
    OffloadCase o;
    o.device = "nvme";
    o.sub_group = 500;
    Net net(42, 2, /*wrap=*/true);
    Engine engine =
        initialize(net.ptr(), parse(config_json(cc, world, offload_json(o)), world), comm);
    cc.steps = 1;
    train_as(engine, net, cc, world, comm->rank(), torch::kFloat);
    std::string swap_file;
    for (const auto& e : std::filesystem::recursive_directory_iterator(swap_dir()))
      if (e.path().filename() == "optimizer.swap" &&
          e.path().parent_path().filename() == zero::detail::str("rank", comm->rank()))
        swap_file = e.path();
    EXPECT(!swap_file.empty(), "no swap file of rank ", comm->rank(), " under ", swap_dir());
    EXPECT(::truncate(swap_file.c_str(), 0) == 0, "truncate ", swap_file);
    expect_throw<IoError>(
        "swap file truncated",
        zero::detail::str("rank ", comm->rank(), ": io_uring read of ", swap_file, " at offset "),
        [&] { train_as(engine, net, cc, world, comm->rank(), torch::kFloat); });
  }
}

// nvme_path on a full filesystem (ZERO_TEST_SWAP_DIR is a 16 KiB tmpfs: with_small_tmpfs.sh):
// initialize fails while preallocating the swap file, naming it, its size and the rank, and
// leaves nothing behind.
void run_nvme_full(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  Case c;
  c.stage = 3;
  OffloadCase o;
  o.device = "nvme";
  expect_throw<IoError>("nvme_path full", "No space left on device", [&] {
    Net net(42, 2, /*wrap=*/true);
    initialize(net.ptr(), parse(config_json(c, world, offload_json(o)), world), comm);
  });
  // Nothing of the failed start is left behind.
  comm->barrier()->wait();
  if (comm->rank() == 0)
    for (const auto& e : std::filesystem::directory_iterator(swap_dir()))
      EXPECT(false, "left in the full nvme_path: ", e.path().string());
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"equal", run_equal},
                      {"init", run_init},
                      {"faults", run_faults},
                      {"nvme_full", run_nvme_full}});
}
