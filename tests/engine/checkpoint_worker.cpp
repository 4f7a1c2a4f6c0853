// Checkpoint tests as real jobs, started by zerorun (checkpoint_resume.sh runs them in order):
//  --suite save:    for stages 0-3 x {fp32, bf16, fp16}, train K steps and save_checkpoint.
//  --suite resume:  a new job: for each case, train N steps straight, then load the saved
//                   checkpoint into a fresh engine and train the remaining N - K: every loss and
//                   every parameter must be bitwise equal (dropout on the inputs, gradient
//                   accumulation, a warm-up schedule and fp16 overflows make the RNG, the
//                   counters, the schedule and the loss scaler matter).
//  --suite reshard_save / reshard_load: saved at (world, stage) W/S, loaded at another W'/S' and
//                   trained on to the end, equal to one plain LibTorch process within the golden
//                   tolerance (the global batch is the same in both jobs).
//  --suite faults:  corrupt, truncated and mismatching checkpoints give clear errors.
// The checkpoint root is $ZERO_TEST_CKPT_DIR.
#include "worker_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/safetensors.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace zero;
using namespace zero::test;

namespace {

constexpr int kSaveAt = 3;  // K: steps before the checkpoint
constexpr int kSteps = 6;   // N: steps in all
constexpr int kGas = 2;
constexpr int64_t kMicro = 2;

std::string root_dir() {
  const char* d = std::getenv("ZERO_TEST_CKPT_DIR");
  if (!d || !*d) throw UsageError("set ZERO_TEST_CKPT_DIR to the checkpoint root");
  return d;
}

struct ResumeCase {
  int stage;
  std::string precision;  // fp32 / bf16 / fp16
  std::string offload;    // "" / "cpu" / "nvme": offload_optimizer.device
  std::string params;     // "" / "cpu" / "nvme": offload_param.device
  std::string name() const {
    return zero::detail::str("stage", stage, "_", precision, offload.empty() ? "" : "_", offload,
                             params.empty() ? "" : "_params_", params);
  }
};

std::vector<ResumeCase> resume_cases() {
  std::vector<ResumeCase> out;
  for (int stage = 0; stage <= 3; ++stage)
    for (const char* p : {"fp32", "bf16", "fp16"}) out.push_back({stage, p, ""});
  // Offloaded masters and moments are saved from (and loaded into) host memory or swap files.
  out.push_back({1, "fp16", "cpu"});
  out.push_back({2, "bf16", "nvme"});
  out.push_back({3, "fp32", "cpu"});
  out.push_back({3, "fp16", "nvme"});
  // Offloaded parameter shards: saved through the masters, refilled from the loaded ones.
  out.push_back({3, "fp16", "cpu", "cpu"});
  out.push_back({3, "bf16", "nvme", "nvme"});
  // Offloaded parameter shards with the optimizer on the device (fp16: a skipped step too).
  out.push_back({3, "fp16", "", "nvme"});
  return out;
}

// The nvme_path of the offload cases: a folder beside the checkpoints.
std::string swap_dir() {
  const std::string dir = root_dir() + "/swap";
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

ParsedConfig resume_config(const ResumeCase& rc, int world) {
  Case c;
  c.stage = rc.stage;
  c.gas = kGas;
  c.micro = kMicro;
  c.clip = 1.0;
  c.scheduler =
      R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.02, "warmup_num_steps": 10, "warmup_type": "linear"}})";
  if (rc.precision == "bf16") c.extra_top = R"(, "bf16": {"enabled": true})";
  if (rc.precision == "fp16")
    c.extra_top =
        R"(, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 8, "loss_scale_window": 2, "hysteresis": 2, "min_loss_scale": 1})";
  std::string offload;
  if (!rc.offload.empty())
    offload = zero::detail::str(R"(, "sub_group_size": 200, "offload_optimizer": {"device": ")",
                                rc.offload, R"(", "nvme_path": ")", swap_dir(),
                                R"(", "pipeline_read": true, "pipeline_write": true})");
  if (!rc.params.empty())
    offload += zero::detail::str(R"(, "offload_param": {"device": ")", rc.params,
                                 R"(", "nvme_path": ")", swap_dir(), R"(", "max_in_cpu": 0})");
  return parse(config_json(c, world, offload), world);
}

// One optimizer step (kGas micro-steps) of step `step`; returns the micro-batch losses. Dropout
// on the inputs draws from the CPU generator; in fp16, step 1's first micro-batch overflows on
// rank 0 (a skipped step and a scale change before the checkpoint).
std::vector<float> train_step(Engine& engine, CastNet& net, int step, bool fp16) {
  const int world = engine.world_size(), rank = engine.rank();
  const int64_t global = kMicro * kGas * world;
  std::vector<float> losses;
  for (int m = 0; m < kGas; ++m) {
    auto [x, y] = samples(11, step * global + (m * world + rank) * kMicro, kMicro);
    x = torch::dropout(x, 0.2, /*train=*/true);
    const auto dtype = net->input->weight.scalar_type();
    torch::Tensor out = net->forward(x.to(dtype));
    if (fp16 && step == 1 && m == 0 && rank == 0)
      out.register_hook([](const torch::Tensor& g) {
        return torch::full_like(g, std::numeric_limits<double>::infinity());
      });
    torch::Tensor loss = torch::mse_loss(out.to(torch::kFloat), y);
    losses.push_back(loss.item<float>());
    engine.backward(loss);
    engine.step();
  }
  return losses;
}

void run_save(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  for (const ResumeCase& rc : resume_cases()) {
    torch::manual_seed(1234);
    CastNet net(42);
    Engine engine = initialize(net.ptr(), resume_config(rc, world), comm);
    for (int step = 0; step < kSaveAt; ++step)
      train_step(engine, net, step, rc.precision == "fp16");
    const std::string path = engine.save_checkpoint(root_dir() + "/" + rc.name(), "",
                                                    {{"next_step", kSaveAt}, {"case", rc.name()}});
    EXPECT(path == root_dir() + "/" + rc.name() + "/global_step3", rc.name(), ": saved at ", path);
  }
}

void run_resume(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  for (const ResumeCase& rc : resume_cases()) {
    const bool fp16 = rc.precision == "fp16";
    // Straight: N steps in one engine.
    torch::manual_seed(1234);
    CastNet net(42);
    Engine straight = initialize(net.ptr(), resume_config(rc, world), comm);
    std::vector<float> straight_losses;
    for (int step = 0; step < kSteps; ++step) {
      auto l = train_step(straight, net, step, fp16);
      if (step >= kSaveAt) straight_losses.insert(straight_losses.end(), l.begin(), l.end());
    }
    const Params straight_params = straight.full_parameters();

    // Resumed: a fresh model with other initial values and another RNG state, then the load.
    torch::manual_seed(999);
    CastNet other(7);
    Engine resumed = initialize(other.ptr(), resume_config(rc, world), comm);
    auto loaded = resumed.load_checkpoint(root_dir() + "/" + rc.name());
    EXPECT(loaded.has_value(), rc.name(), ": no checkpoint found");
    if (!loaded) continue;
    EXPECT(loaded->client_state.value("next_step", -1) == kSaveAt, rc.name(), ": client state ",
           loaded->client_state.dump());
    EXPECT(resumed.global_steps() == kSaveAt, rc.name(), ": global_steps ", resumed.global_steps());
    EXPECT(resumed.skipped_steps() == (fp16 ? 1 : 0), rc.name(), ": skipped ",
           resumed.skipped_steps());
    const int first = loaded->client_state.value("next_step", kSaveAt);
    std::vector<float> resumed_losses;
    for (int step = first; step < kSteps; ++step) {
      auto l = train_step(resumed, other, step, fp16);
      resumed_losses.insert(resumed_losses.end(), l.begin(), l.end());
    }
    const Params resumed_params = resumed.full_parameters();
    EXPECT(resumed_losses == straight_losses, rc.name(), ": the losses after the resume differ");
    EXPECT(bitwise_equal(resumed_params, straight_params), rc.name(),
           ": parameters differ from the straight run by ",
           max_rel_diff(resumed_params, straight_params));
    EXPECT(resumed.loss_scale() == straight.loss_scale(), rc.name(), ": loss scale ",
           resumed.loss_scale(), " vs ", straight.loss_scale());
    EXPECT(resumed.lr() == straight.lr(), rc.name(), ": lr ", resumed.lr(), " vs ", straight.lr());
    if (comm->rank() == 0)
      std::printf("resume world %d %-12s bitwise %s, loss scale %g, skipped %lld\n", world,
                  rc.name().c_str(), bitwise_equal(resumed_params, straight_params) ? "yes" : "NO",
                  resumed.loss_scale(), (long long)resumed.skipped_steps());
  }
}

// Resharding: the global batch (kReshardGlobal samples a step, gas 1) is the same for every
// world size, so a run that changes world size and stage half way is one training run.
constexpr int64_t kReshardGlobal = 12;

Case reshard_case(int stage, int world) {
  Case c;
  c.stage = stage;
  c.micro = kReshardGlobal / world;
  c.steps = kSteps;
  c.clip = 0.5;
  return c;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) throw UsageError(zero::detail::str("set ", name));
  return std::atoi(v);
}

// ZERO_TEST_STAGE: this job's stage. Trains kSaveAt steps and saves as from_w<W>s<S>.
void run_reshard_save(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), stage = env_int("ZERO_TEST_STAGE");
  const Case c = reshard_case(stage, world);
  Net net(42);
  Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
  Case first = c;
  first.steps = kSaveAt;
  train(engine, net, first, world, comm->rank());
  engine.save_checkpoint(root_dir() + zero::detail::str("/from_w", world, "s", stage));
}

// Loads every from_w<W>s<S> named in ZERO_TEST_SOURCES (space separated) into this job's
// (world, stage), trains to kSteps and compares with one plain LibTorch process.
void run_reshard_load(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), stage = env_int("ZERO_TEST_STAGE");
  const Case c = reshard_case(stage, world);
  const ParsedConfig parsed = parse(config_json(c, world), world);
  Case plain = c;
  plain.micro = kReshardGlobal;  // reference() runs the whole global batch in one process
  const auto expected = reference(plain, 1, parsed.config);
  std::istringstream sources(std::getenv("ZERO_TEST_SOURCES") ? std::getenv("ZERO_TEST_SOURCES")
                                                              : "");
  std::string source;
  int loads = 0;
  while (sources >> source) {
    Net net(99);  // other initial values: everything must come from the checkpoint
    Engine engine = initialize(net.ptr(), parsed, comm);
    LoadOptions strict;
    strict.allow_reshard = false;
    const bool same = source == zero::detail::str("from_w", world, "s", stage);
    if (!same)
      expect_throw<CheckpointError>("strict load of " + source, "allow_reshard is false", [&] {
        engine.load_checkpoint(root_dir() + "/" + source, "", strict);
      });
    auto loaded = engine.load_checkpoint(root_dir() + "/" + source);
    EXPECT(loaded && engine.global_steps() == kSaveAt, source, ": loaded at step ",
           engine.global_steps());
    train(engine, net, c, world, comm->rank(), kSaveAt);
    const Params got = engine.full_parameters();
    double worst = 0;
    for (const auto& [name, t] : got) worst = std::max(worst, rel_diff(t, expected.at(name)));
    EXPECT(worst <= 1e-6, source, " -> w", world, "s", stage, ": differs from plain LibTorch by ",
           worst);
    if (comm->rank() == 0)
      std::printf("reshard %s -> w%ds%d: max rel diff vs plain LibTorch %.3g\n", source.c_str(),
                  world, stage, worst);
    ++loads;
  }
  EXPECT(loads > 0, "no ZERO_TEST_SOURCES");
}

// Crash safety, the job to be killed: a good checkpoint at step kSaveAt, one more step, then
// saves of that state in a loop (alternating tags, so `latest` keeps changing) until killed.
void run_crash_save(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  const ResumeCase rc{3, "fp32"};
  torch::manual_seed(1234);
  CastNet net(42);
  Engine engine = initialize(net.ptr(), resume_config(rc, world), comm);
  for (int step = 0; step < kSaveAt; ++step) train_step(engine, net, step, false);
  engine.save_checkpoint(root_dir(), "", {{"next_step", kSaveAt}});
  train_step(engine, net, kSaveAt, false);
  if (comm->rank() == 0) {
    std::printf("saving in a loop\n");
    std::fflush(stdout);
  }
  for (int i = 0;; ++i)
    engine.save_checkpoint(root_dir(), i % 2 ? "loop_b" : "loop_a", {{"next_step", kSaveAt + 1}});
}

// After the crashes: for every directory in $ZERO_TEST_TRIALS, `latest` loads and the run
// resumed from it equals the straight run bitwise; no temporary directory is visible as a tag.
void run_crash_check(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  const ResumeCase rc{3, "fp32"};
  torch::manual_seed(1234);
  CastNet net(42);
  Engine straight = initialize(net.ptr(), resume_config(rc, world), comm);
  for (int step = 0; step < kSteps; ++step) train_step(straight, net, step, false);
  const Params expected = straight.full_parameters();
  std::istringstream trials(std::getenv("ZERO_TEST_TRIALS") ? std::getenv("ZERO_TEST_TRIALS") : "");
  std::string trial;
  int checked = 0, at_step[2] = {0, 0};
  while (trials >> trial) {
    torch::manual_seed(5);
    CastNet other(8);
    Engine resumed = initialize(other.ptr(), resume_config(rc, world), comm);
    std::optional<LoadedCheckpoint> loaded;
    try {
      loaded = resumed.load_checkpoint(trial);
    } catch (const Error& e) {
      EXPECT(false, trial, ": the checkpoint left by the crash does not load: ", e.what());
      continue;
    }
    EXPECT(loaded.has_value(), trial, ": no `latest` after the crash");
    if (!loaded) continue;
    const int first = loaded->client_state.value("next_step", -1);
    EXPECT(first == kSaveAt || first == kSaveAt + 1, trial, ": next_step ", first);
    if (first != kSaveAt && first != kSaveAt + 1) continue;
    ++at_step[first - kSaveAt];
    for (int step = first; step < kSteps; ++step) train_step(resumed, other, step, false);
    EXPECT(bitwise_equal(resumed.full_parameters(), expected), trial, " (", loaded->path,
           "): the resumed run differs from the straight one");
    ++checked;
  }
  if (comm->rank() == 0)
    std::printf(
        "crash check: %d trials resumed bit-exact (%d from the step-%d checkpoint, %d from "
        "a loop save)\n",
        checked, at_step[0], kSaveAt, at_step[1]);
}

// Disk full: $ZERO_TEST_CKPT_DIR is a small tmpfs. A good checkpoint, then a filler file leaves
// too little space for the next: its save fails on every rank with an error naming the path,
// `latest` and the good checkpoint stay, no temporary directory is left, and it loads.
void run_disk_full(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  const ResumeCase rc{2, "fp32"};
  torch::manual_seed(1234);
  CastNet net(42);
  Engine engine = initialize(net.ptr(), resume_config(rc, world), comm);
  train_step(engine, net, 0, false);
  const std::string good = engine.save_checkpoint(root_dir());
  const Params saved = engine.full_parameters();
  comm->barrier()->wait();
  if (comm->rank() == 0) {  // fill all but ~16 KiB
    std::ofstream filler(root_dir() + "/filler", std::ios::binary);
    std::vector<char> block(16384, 'x');
    while (filler.write(block.data(), block.size())) {
    }
  }
  comm->barrier()->wait();
  train_step(engine, net, 1, false);
  expect_throw<CheckpointError>("save on a full disk", root_dir(),
                                [&] { engine.save_checkpoint(root_dir()); });
  comm->barrier()->wait();
  EXPECT(ckpt::list_temp_dirs(root_dir()).empty(), "a temporary directory was left behind");
  EXPECT(ckpt::read_small_file(root_dir() + "/latest", 100) == "global_step1\n",
         "latest changed to ", ckpt::read_small_file(root_dir() + "/latest", 100));
  if (comm->rank() == 0) std::remove((root_dir() + "/filler").c_str());
  comm->barrier()->wait();
  CastNet other(9);
  Engine fresh = initialize(other.ptr(), resume_config(rc, world), comm);
  auto loaded = fresh.load_checkpoint(root_dir());
  EXPECT(loaded && loaded->path == good, "loaded ", loaded ? loaded->path : "nothing");
  EXPECT(bitwise_equal(fresh.full_parameters(), saved), "the good checkpoint changed");
}

// A model whose parameter shapes depend on `width`, for "another model's checkpoint".
struct TinyImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  explicit TinyImpl(int width) { fc = register_module("fc", torch::nn::Linear(kIn, width)); }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x).sum(-1); }
};
TORCH_MODULE(Tiny);

// Bad checkpoints: each load fails on every rank with an error naming the file or tensor, and
// the engine is still usable afterwards.
void run_faults(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  const std::string root = root_dir();
  Case c;
  c.stage = 1;
  const ParsedConfig parsed = parse(config_json(c, world), world);
  Net net(42);
  Engine engine = initialize(net.ptr(), parsed, comm);
  Case one = c;
  one.steps = 1;
  train(engine, net, one, world, comm->rank());
  const std::string good = engine.save_checkpoint(root + "/good");
  comm->barrier()->wait();

  EXPECT(!engine.load_checkpoint(root + "/none").has_value(), "a directory without latest");
  expect_throw<CheckpointError>("missing tag", "no such checkpoint directory",
                                [&] { engine.load_checkpoint(root + "/good", "global_step9"); });
  expect_throw<CheckpointError>("tag with ..", "not a plain directory name",
                                [&] { engine.load_checkpoint(root + "/good", "../good"); });
  expect_throw<UsageError>("save tag with /", "plain directory name",
                           [&] { engine.save_checkpoint(root + "/bad", "a/b"); });

  // Copies of the good checkpoint, each broken one way by rank 0.
  auto broken = [&](const std::string& name, const std::function<void(const std::string&)>& harm) {
    const std::string dir = root + "/" + name;
    if (comm->rank() == 0) {
      std::filesystem::create_directories(dir);
      std::filesystem::copy(good, dir + "/global_step1", std::filesystem::copy_options::recursive);
      ckpt::atomic_write_file(dir + "/latest", "global_step1\n");
      harm(dir + "/global_step1");
    }
    comm->barrier()->wait();
    return dir;
  };
  const std::string rank1 = world > 1 ? "rank00001.safetensors" : "rank00000.safetensors";
  const std::string missing =
      broken("missing", [&](const std::string& d) { std::filesystem::remove(d + "/" + rank1); });
  expect_throw<CheckpointError>("missing rank file", rank1,
                                [&] { engine.load_checkpoint(missing); });
  const std::string truncated = broken("truncated", [&](const std::string& d) {
    std::filesystem::resize_file(d + "/" + rank1, std::filesystem::file_size(d + "/" + rank1) - 7);
  });
  expect_throw<CheckpointError>("truncated rank file", rank1,
                                [&] { engine.load_checkpoint(truncated); });
  const std::string flipped = broken("flipped", [&](const std::string& d) {
    std::fstream f(d + "/" + rank1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-9, std::ios::end);
    f.put('\x5a');
  });
  LoadOptions verify;
  verify.verify_checksums = true;
  expect_throw<CheckpointError>("corrupted byte, verified", "checksum mismatch",
                                [&] { engine.load_checkpoint(flipped, "", verify); });
  const std::string newer = broken("newer", [&](const std::string& d) {
    auto j = nlohmann::json::parse(ckpt::read_small_file(d + "/manifest.json", 1 << 20));
    j["format_version"] = 99;
    std::filesystem::remove(d + "/manifest.json");
    ckpt::atomic_write_file(d + "/manifest.json", j.dump());
  });
  expect_throw<CheckpointError>("newer format", "format version 99 is newer",
                                [&] { engine.load_checkpoint(newer); });
  // Exports key tensors by clean name: two parameters with one are refused, naming both.
  const std::string same_clean = broken("same_clean", [&](const std::string& d) {
    auto j = nlohmann::json::parse(ckpt::read_small_file(d + "/manifest.json", 1 << 20));
    j["params"][1]["clean_name"] =
        j["params"][0].value("clean_name", j["params"][0]["name"].get<std::string>());
    std::filesystem::remove(d + "/manifest.json");
    ckpt::atomic_write_file(d + "/manifest.json", j.dump());
  });
  expect_throw<CheckpointError>("two parameters with one clean name", "have the same clean name",
                                [&] { engine.load_checkpoint(same_clean); });
  const std::string escape = broken("escape", [&](const std::string& d) {
    auto j = nlohmann::json::parse(ckpt::read_small_file(d + "/manifest.json", 1 << 20));
    j["files"][0]["name"] = "../../good/global_step1/rank00000.safetensors";
    std::filesystem::remove(d + "/manifest.json");
    ckpt::atomic_write_file(d + "/manifest.json", j.dump());
  });
  expect_throw<CheckpointError>("file name outside the directory", "not a plain file name",
                                [&] { engine.load_checkpoint(escape); });
  const std::string outside = broken("outside", [&](const std::string& d) {
    ckpt::atomic_write_file(root + "/outside/latest", "../good\n");
  });
  expect_throw<CheckpointError>("latest pointing outside", "not a plain directory name",
                                [&] { engine.load_checkpoint(outside); });

  // Another model: other names, then the same names with other shapes.
  Net smaller(42, /*num_blocks=*/1);
  Engine e1 = initialize(smaller.ptr(), parsed, comm);
  expect_throw<CheckpointError>("another model (names)",
                                "'blocks.1.inner.fc1.weight' is not in the model",
                                [&] { e1.load_checkpoint(root + "/good"); });
  LoadOptions loose;
  loose.load_module_strict = false;
  EXPECT(e1.load_checkpoint(root + "/good", "", loose).has_value(), "non-strict load");
  Tiny t4(4), t5(5);
  Engine e4 = initialize(t4.ptr(), parsed, comm);
  e4.save_checkpoint(root + "/tiny");
  Engine e5 = initialize(t5.ptr(), parsed, comm);
  expect_throw<CheckpointError>("another model (shapes)",
                                "'fc.weight' has shape [5, 127] in the model but [4, 127]",
                                [&] { e5.load_checkpoint(root + "/tiny"); });

  // save_16bit_model: rank 0's one file holds the full parameters, equal to the engine's, under
  // the names of the same net built without zero::Sharded (this net's only `inner` segments are
  // Sharded's).
  EXPECT(engine.save_16bit_model(root + "/export"), "save_16bit_model returned false");
  const Params full = engine.full_parameters();
  std::set<std::string> plain_names;
  for (const auto& p : Net(42, 2, /*wrap=*/false)->named_parameters()) plain_names.insert(p.key());
  if (comm->rank() == 0) {
    ckpt::SafetensorsReader model(root + "/export/model.safetensors");
    EXPECT(model.tensors().size() == full.size(), "save_16bit_model wrote ", model.tensors().size(),
           " tensors for ", full.size(), " parameters");
    for (const auto& [registered, t] : full) {
      const std::string name = without_inner(registered);
      EXPECT(plain_names.count(name), "'", name, "' (from '", registered,
             "') is not a name of the unwrapped net");
      const ckpt::TensorInfo* info = model.find(name);
      EXPECT(info && info->nbytes() == static_cast<int64_t>(t.nbytes()),
             "save_16bit_model: ", name);
      if (!info || info->nbytes() != static_cast<int64_t>(t.nbytes())) continue;
      torch::Tensor read = torch::empty_like(t);
      model.read_all(*info, read.data_ptr());
      EXPECT(torch::equal(read, t), "save_16bit_model: ", name, " differs");
    }
    for (const ckpt::TensorInfo& info : model.tensors())
      EXPECT(info.name.find(".inner.") == std::string::npos, "a wrapper's segment in ", info.name);
  }

  // At stage 3 with stage3_gather_16bit_weights_on_model_save false, DeepSpeed's
  // save_16bit_model saves nothing and returns False: so does ours, on every rank.
  {
    Case c3 = c;
    c3.stage = 3;
    Net net3(42);
    Engine e3 = initialize(
        net3.ptr(),
        parse(config_json(c3, world, R"(, "stage3_gather_16bit_weights_on_model_save": false)"),
              world),
        comm);
    EXPECT(!e3.save_16bit_model(root + "/export_off"),
           "save_16bit_model returned true with the gather off");
    comm->barrier()->wait();
    EXPECT(::access((root + "/export_off").c_str(), F_OK) != 0, "save_16bit_model wrote ", root,
           "/export_off with the gather off");
  }

  // Still usable: the good checkpoint loads and training goes on.
  auto loaded = engine.load_checkpoint(root + "/good");
  EXPECT(loaded && loaded->path == good, "the good checkpoint after the faults");
  Case two = c;
  two.steps = 2;
  train(engine, net, two, world, comm->rank(), 1);
}

// checkpoint.use_node_local_storage on two simulated nodes (ranks 0-1 and 2-3, LOCAL_RANK 0-1):
// each node sees its own directory at the same path. Each node's local rank 0 publishes a
// complete manifest and `latest`; a node holds only its ranks' files; a load at the same world
// reads only those and restores the parameters bitwise: at stage 3, and at stage 1, where the
// load all-gathers the parameters (on one node it would read them from every rank's file).
void node_local_case(const std::shared_ptr<Communicator>& comm, int stage) {
  const int world = comm->world_size(), rank = comm->rank();
  Case c;
  c.stage = stage;
  c.steps = 2;
  c.extra_top = R"(, "checkpoint": {"use_node_local_storage": true})";
  const ParsedConfig parsed = parse(config_json(c, world), world);
  const std::string root = zero::detail::str(root_dir(), "/stage", stage);
  Net net(42);
  net->register_buffer("seen", torch::arange(5, torch::kLong) * 3);  // read from the own file
  Engine engine = initialize(net.ptr(), parsed, comm);
  train(engine, net, c, world, rank);
  const std::string dir = engine.save_checkpoint(root);
  const Params saved = engine.full_parameters();
  const int local = detect_rank_env().local_rank, per_node = detect_rank_env().local_world_size;
  const int node_first = rank - local;
  for (int r = 0; r < world; ++r) {
    const bool here =
        std::filesystem::exists(zero::detail::str(dir, "/rank0000", r, ".safetensors"));
    EXPECT(here == (r >= node_first && r < node_first + per_node), "rank ", r, "'s file is ",
           here ? "" : "not ", "on the node of rank ", rank);
  }
  EXPECT(
      std::filesystem::exists(dir + "/manifest.json") && std::filesystem::exists(root + "/latest"),
      "the node has no manifest or latest");
  Net other(5);
  other->register_buffer("seen", torch::zeros({5}, torch::kLong));
  Engine fresh = initialize(other.ptr(), parsed, comm);
  auto loaded = fresh.load_checkpoint(root);
  EXPECT(loaded && bitwise_equal(fresh.full_parameters(), saved), "stage ", stage,
         ": the node-local checkpoint did not restore the parameters");
  EXPECT(torch::equal(other->named_buffers()["seen"], torch::arange(5, torch::kLong) * 3), "stage ",
         stage, ": the buffer was not restored");
}

void run_node_local(const std::shared_ptr<Communicator>& comm) {
  for (int stage : {3, 1}) node_local_case(comm, stage);
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"save", run_save},
                      {"resume", run_resume},
                      {"reshard_save", run_reshard_save},
                      {"reshard_load", run_reshard_load},
                      {"crash_save", run_crash_save},
                      {"crash_check", run_crash_check},
                      {"disk_full", run_disk_full},
                      {"faults", run_faults},
                      {"node_local", run_node_local}});
}
