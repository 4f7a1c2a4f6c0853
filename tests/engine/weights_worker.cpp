// How weights come back into a job, as real jobs started by zerorun ($ZERO_TEST_CKPT_DIR holds
// the files):
//  --suite masters: zero_optimization.load_from_fp32_weights. A bf16/fp16 checkpoint loaded with
//                   true keeps the saved fp32 masters bit for bit; with false the masters are
//                   rebuilt from the 16-bit weights (DeepSpeed's _restore_from_bit16_weights),
//                   i.e. the saved masters rounded to the 16-bit type; read back from a second
//                   save made right after the load.
//  --suite export:  the example GPT with every block in zero::Sharded(zero::Checkpointed(..))
//                   trains at stage 3 and saves a checkpoint (ck/); rank 0 writes the logits of
//                   a fixed batch (logits.safetensors) and the names of the GPT built without
//                   wrappers (names.txt). load_state_dict.sh then exports ck/ with the zero tool.
//  --suite reload:  zero::load_state_dict of the exports: into the GPT built without wrappers
//                   (a plain copy) and into the wrapped GPT after initialize at stage 3 (through
//                   the engine): bitwise the same logits; then the errors (shape, missing,
//                   unexpected, strict=false) on both paths.
#include "worker_util.h"

#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/reader.h>
#include <zero/checkpoint/safetensors.h>
#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/load_state_dict.h>
#include <zero/text.h>

#include <model.h>

#include <cstdlib>
#include <fstream>
#include <set>

using namespace zero;
using namespace zero::test;

namespace {

std::string root_dir() {
  const char* d = std::getenv("ZERO_TEST_CKPT_DIR");
  if (!d || !*d) throw UsageError("set ZERO_TEST_CKPT_DIR to the checkpoint root");
  return d;
}

// Every parameter's fp32 master, consolidated from the checkpoint at `dir`, in manifest order.
std::vector<std::pair<std::string, torch::Tensor>> saved_masters(const std::string& dir) {
  ckpt::CheckpointReader reader(dir);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const auto& params = reader.manifest().params;
  for (size_t k = 0; k < params.size(); ++k) {
    torch::Tensor t = torch::empty({params[k].numel()});
    reader.read_state("master", static_cast<int>(k), 0, t.numel(), t.data_ptr<float>());
    out.emplace_back(params[k].name, t);
  }
  return out;
}

struct MastersCase {
  int stage;
  std::string precision;  // bf16 / fp16
  bool offload;           // offload_optimizer cpu: the masters live on the host
};

void run_masters(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string root = root_dir();
  for (const MastersCase& mc : std::vector<MastersCase>{
           {1, "bf16", false}, {2, "fp16", true}, {3, "bf16", false}, {3, "fp16", false}}) {
    const std::string name =
        zero::detail::str("stage", mc.stage, "_", mc.precision, mc.offload ? "_offload" : "");
    Case c;
    c.stage = mc.stage;
    c.steps = 3;
    c.extra_top = mc.precision == "bf16"
                      ? R"(, "bf16": {"enabled": true})"
                      : R"(, "fp16": {"enabled": true, "initial_scale_power": 4})";
    const std::string offload =
        mc.offload ? R"(, "offload_optimizer": {"device": "cpu"})" : std::string();
    const auto dtype = mc.precision == "bf16" ? torch::kBFloat16 : torch::kHalf;
    std::string source;
    {
      CastNet net(42);
      Engine engine = initialize(net.ptr(), parse(config_json(c, world, offload), world), comm);
      for (int step = 0; step < c.steps; ++step) {
        auto [x, y] = samples(9, (step * world + rank) * c.micro, c.micro);
        engine.backward(torch::mse_loss(net->forward(x.to(dtype)).to(torch::kFloat), y));
        engine.step();
      }
      source = engine.save_checkpoint(root + "/" + name);
    }
    // Loads the source with the given key value and saves again at once (no step between).
    auto reload = [&](const std::string& key) {
      CastNet net(7);  // other initial values: everything must come from the checkpoint
      Engine engine =
          initialize(net.ptr(), parse(config_json(c, world, offload + key), world), comm);
      EXPECT(engine.load_checkpoint(root + "/" + name).has_value(), name, ": nothing loaded");
      const std::string dir =
          engine.save_checkpoint(root + "/" + name + "_reloaded" + std::to_string(key.size()));
      return std::make_pair(dir, engine.full_parameters());
    };
    const auto [from32, params32] = reload("");
    const auto [from16, params16] = reload(R"(, "load_from_fp32_weights": false)");
    EXPECT(bitwise_equal(params16, params32), name,
           ": the 16-bit weights differ between the two loads");
    if (rank == 0) {
      const auto saved = saved_masters(source), kept = saved_masters(from32),
                 rebuilt = saved_masters(from16);
      int64_t rounded = 0;  // masters that the rounding changed
      for (size_t k = 0; k < saved.size(); ++k) {
        const torch::Tensor& m = saved[k].second;
        EXPECT(torch::equal(kept[k].second, m), name, ": '", saved[k].first,
               "': load_from_fp32_weights true changed the saved master");
        EXPECT(torch::equal(rebuilt[k].second, m.to(dtype).to(torch::kFloat)), name, ": '",
               saved[k].first, "': load_from_fp32_weights false is not the 16-bit rounding");
        rounded += m.ne(m.to(dtype).to(torch::kFloat)).sum().item<int64_t>();
      }
      EXPECT(rounded > 0, name,
             ": no saved master differs from its 16-bit rounding (test vacuous)");
      std::printf("masters %s world %d: %lld of the saved masters rebuilt from 16-bit values\n",
                  name.c_str(), world, static_cast<long long>(rounded));
    }
    comm->barrier()->wait();
  }
}

// The GPT of the export and reload suites; `wrapped`: every block in Sharded(Checkpointed(..)).
gpt::Gpt make_gpt(int64_t seed, bool wrapped) {
  torch::manual_seed(seed);
  gpt::GptConfig c;
  c.vocab_size = 64;
  c.context = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 32;
  gpt::Gpt model(c);
  if (wrapped)
    model->wrap_blocks([](torch::nn::AnyModule block) {
      return torch::nn::AnyModule(zero::Sharded(zero::Checkpointed(block)));
    });
  return model;
}

// `extra_zero`: more zero_optimization keys (offload).
ParsedConfig gpt_config(int world, const std::string& extra_zero = "") {
  return parse(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "reduce_bucket_size": 3000, "stage3_prefetch_bucket_size": 3000)" +
                   extra_zero + "}}",
               world);
}

torch::Tensor tokens(int64_t seed, int64_t batch) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  return at::randint(0, 64, {batch, 16}, gen);
}

// The logits of the fixed evaluation batch (collective at stage 3: the blocks are gathered).
torch::Tensor eval_logits(gpt::Gpt& model) {
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor out = model->forward(tokens(99, 3)).contiguous();
  model->train();
  return out;
}

void write_tensor_file(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<ckpt::TensorToWrite> out;
  std::vector<torch::Tensor> keep;
  for (const auto& [name, t] : named) {
    keep.push_back(t.detach().to(torch::kFloat).contiguous());
    out.push_back({name, ckpt::DType::kF32,
                   std::vector<int64_t>(keep.back().sizes().begin(), keep.back().sizes().end()),
                   keep.back().data_ptr()});
  }
  ckpt::write_safetensors(path, out);
}

torch::Tensor read_logits(const std::string& dir) {
  ckpt::SafetensorsReader r(dir + "/logits.safetensors");
  const ckpt::TensorInfo* t = r.find("logits");
  torch::Tensor out = torch::empty(t->shape);
  r.read_all(*t, out.data_ptr());
  return out;
}

void run_export(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string root = root_dir();
  gpt::Gpt model = make_gpt(5, /*wrapped=*/true);
  Engine engine = initialize(model.ptr(), gpt_config(world), comm);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor t = tokens(1000 + step * world + rank, 2);
    engine.backward(model->loss(t.narrow(1, 0, 15), t.narrow(1, 1, 15)));
    engine.step();
  }
  engine.save_checkpoint(root + "/ck");
  const torch::Tensor logits = eval_logits(model);
  if (rank == 0) {
    write_tensor_file(root + "/logits.safetensors", {{"logits", logits}});
    std::ofstream names(root + "/names.txt");
    for (const auto& p : make_gpt(5, false)->named_parameters()) names << p.key() << "\n";
    std::printf("export: trained at stage 3 on %d ranks, logits %s\n", world,
                zero::detail::shape_text({logits.sizes().begin(), logits.sizes().end()}).c_str());
  }
  comm->barrier()->wait();
}

void run_reload(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string root = root_dir();
  const torch::Tensor expected = read_logits(root);
  // A model without our wrappers, for inference: a plain copy, from both export formats.
  for (const char* file : {"model.pt", "model.safetensors"}) {
    gpt::Gpt plain = make_gpt(77, /*wrapped=*/false);
    const LoadedStateDict r = load_state_dict(*plain, root + "/" + file);
    EXPECT(r.missing_keys.empty() && r.unexpected_keys.empty(), file, ": keys left over");
    EXPECT(torch::equal(eval_logits(plain), expected), file,
           ": the unwrapped GPT's logits differ from the trained one's");
  }
  // The wrapped GPT after initialize at stage 3: through the engine, every rank its shards;
  // also with the masters and the parameter shards offloaded to the host.
  for (const std::string offload :
       {"", R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})"}) {
    const std::string name = offload.empty() ? "stage 3" : "stage 3 with cpu offload";
    gpt::Gpt model = make_gpt(77, /*wrapped=*/true);
    Engine engine = initialize(model.ptr(), gpt_config(world, offload), comm);
    const LoadedStateDict r = load_state_dict(*model, root + "/model.safetensors");
    EXPECT(r.missing_keys.empty() && r.unexpected_keys.empty(), name, ": keys left over");
    EXPECT(torch::equal(eval_logits(model), expected), name,
           " after initialize: logits differ from the trained model's");
    // It trains on from there (the masters hold the loaded values).
    const torch::Tensor t = tokens(5000 + rank, 2);
    engine.backward(model->loss(t.narrow(1, 0, 15), t.narrow(1, 1, 15)));
    engine.step();
    EXPECT(!torch::equal(eval_logits(model), expected), name,
           ": a step after the load changed nothing");
  }
  // Files that do not fit: one tensor with another shape, one missing, one extra.
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& p : make_gpt(5, false)->named_parameters())
    named.emplace_back(p.key(), p.value());
  std::string bad;  // the last file `with` wrote (the writer never overwrites one)
  int written = 0;
  auto with =
      [&](const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) {
        auto copy = named;
        edit(copy);
        bad = zero::detail::str(root, "/bad_", rank, "_", written++, ".safetensors");
        write_tensor_file(bad, copy);
      };
  gpt::Gpt plain = make_gpt(77, false);
  with([](auto& v) { v[1].second = torch::zeros({3, 5}); });
  expect_throw<CheckpointError>("shape mismatch", "'" + named[1].first + "' has shape [",
                                [&] { load_state_dict(*plain, bad); });
  with([](auto& v) { v.pop_back(); });
  expect_throw<CheckpointError>("missing name",
                                "1 of the model's names missing ('" + named.back().first + "')",
                                [&] { load_state_dict(*plain, bad); });
  EXPECT(load_state_dict(*plain, bad, /*strict=*/false).missing_keys ==
             std::vector<std::string>{named.back().first},
         "strict=false: missing_keys");
  with([](auto& v) { v.emplace_back("extra.weight", torch::ones({2})); });
  expect_throw<CheckpointError>("unexpected name", "1 names not in the model ('extra.weight')",
                                [&] { load_state_dict(*plain, bad); });
  EXPECT(load_state_dict(*plain, bad, false).unexpected_keys ==
             std::vector<std::string>{"extra.weight"},
         "strict=false: unexpected_keys");
  // Through the engine, a file that does not fit on one rank fails on every rank.
  {
    gpt::Gpt model = make_gpt(77, /*wrapped=*/true);
    Engine engine = initialize(model.ptr(), gpt_config(world), comm);
    with([&](auto& v) {
      if (rank == world - 1) v[0].second = torch::zeros({7});
    });
    expect_throw<CheckpointError>("shape mismatch on one rank",
                                  zero::detail::str("failed on rank ", world - 1),
                                  [&] { load_state_dict(*model, bad); });
  }
  comm->barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"masters", run_masters}, {"export", run_export}, {"reload", run_reload}});
}
