// The checkpoint tools' test helper, two modes:
//   make --dir D --stage S --precision fp32|bf16 --steps N --ref REF  (under zerorun, 1-4 ranks)
//     trains the engine test net (plus two buffers) and saves a checkpoint to D; rank 0 writes
//     the truth to REF: Engine::full_parameters() as F32 and the buffers in their own dtype
//     (metadata "buffers" lists their names), keyed by the names of the same net built without
//     zero::Sharded (exports carry the model's own names).
//   compare REF EXPORT DTYPE [exact]  (one process)
//     checks an export (.safetensors, sharded .index.json or torch .pt) against REF: the same
//     names, parameters in DTYPE, buffers bit-identical; parameters bit-identical with `exact`,
//     else equal once both are rounded to bf16. Exit 0 when all match.
#include "test_model.h"

#include <zero/checkpoint/safetensors.h>
#include <zero/comm/process_group.h>
#include <zero/engine/engine.h>

#include <torch/serialize.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

using namespace zero;
using namespace zero::test;

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::cerr << "FAILED: " << what << std::endl;
}

// AdamW at ZeRO `stage`, micro-batch 2, small buckets so that stage 3 splits parameters.
std::string config_json(int stage, const std::string& precision) {
  return zero::detail::str(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,)",
      R"( "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.8, 0.99],)",
      R"( "eps": 0.001, "weight_decay": 0.05}}, "zero_optimization": {"stage": )", stage,
      R"(, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000)",
      stage == 3 ? R"(, "stage3_param_persistence_threshold": 30)" : "", "}",
      precision == "bf16" ? R"(, "bf16": {"enabled": true})" : "", "}");
}

// The test net with two buffers, so that exports carry `module:` tensors of two dtypes.
struct MakerNetImpl : NetImpl {
  explicit MakerNetImpl(int64_t seed, bool wrap = true) : NetImpl(seed, 2, wrap) {
    register_buffer("running_mean", torch::linspace(-1.0, 1.0, 6));
    register_buffer("seen", torch::tensor({int64_t{3}, int64_t{-5}}));
  }
};
TORCH_MODULE(MakerNet);

std::string flag(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == name) return args[i + 1];
  throw UsageError("checkpoint_maker: missing " + name);
}

at::ScalarType scalar_type(ckpt::DType d) {
  switch (d) {
    case ckpt::DType::kF32:
      return at::kFloat;
    case ckpt::DType::kBF16:
      return at::kBFloat16;
    case ckpt::DType::kF16:
      return at::kHalf;
    case ckpt::DType::kI64:
      return at::kLong;
    default:
      throw UsageError(std::string("checkpoint_maker: unexpected dtype ") + dtype_name(d));
  }
}

ckpt::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ckpt::DType::kF32;
    case at::kBFloat16:
      return ckpt::DType::kBF16;
    case at::kHalf:
      return ckpt::DType::kF16;
    case at::kLong:
      return ckpt::DType::kI64;
    default:
      throw UsageError("checkpoint_maker: unexpected tensor dtype");
  }
}

int make(const std::vector<std::string>& args) {
  const int stage = std::stoi(flag(args, "--stage"));
  const std::string precision = flag(args, "--precision");
  const int steps = std::stoi(flag(args, "--steps"));
  const std::string dir = flag(args, "--dir"), ref = flag(args, "--ref");
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  auto comm = world_communicator();
  const int world = comm->world_size(), rank = comm->rank();
  ZERO_CHECK(precision == "bf16" || precision == "fp32", UsageError, "precision ", precision);
  ConfigOptions options;
  options.world_size = world;
  MakerNet net(42);
  Engine engine =
      initialize(net.ptr(), parse_config_string(config_json(stage, precision), options), comm);
  const auto dtype = net->input->weight.scalar_type();
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = samples(7, (step * world + rank) * 2, 2);
    engine.backward(torch::mse_loss(net->forward(x.to(dtype)).to(torch::kFloat), y));
    engine.step();
  }
  engine.save_checkpoint(dir, "", {{"epoch", 1}, {"note", "checkpoint_maker"}});
  const auto truth = engine.full_parameters();  // collective
  if (rank == 0) {
    std::vector<at::Tensor> keep;
    std::vector<ckpt::TensorToWrite> tensors;
    std::string buffers;
    auto add = [&](const std::string& name, at::Tensor t) {
      keep.push_back(t.contiguous());
      tensors.push_back({name, dtype_of(keep.back()),
                         std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                         keep.back().data_ptr()});
    };
    // The unwrapped net's names: this net's only `inner` segments are zero::Sharded's.
    std::set<std::string> plain;
    for (const auto& p : MakerNet(42, /*wrap=*/false)->named_parameters()) plain.insert(p.key());
    for (const auto& [registered, t] : truth) {
      const std::string name = without_inner(registered);
      expect(plain.count(name) > 0, name + " is not a name of the unwrapped net");
      add(name, t.detach().to(torch::kFloat));
    }
    for (const auto& item : net->named_buffers()) {
      add(item.key(), item.value().detach());
      buffers += (buffers.empty() ? "" : ",") + item.key();
    }
    std::filesystem::remove(ref);
    ckpt::write_safetensors(ref, tensors, {{"buffers", buffers}});
    std::printf("checkpoint_maker: stage %d %s, %d rank(s), %d steps -> %s\n", stage,
                precision.c_str(), world, steps, dir.c_str());
  }
  comm->barrier()->wait();
  return 0;
}

using Tensors = std::map<std::string, at::Tensor>;

Tensors read_safetensors(const std::string& path, std::map<std::string, std::string>* meta) {
  ckpt::SafetensorsReader r(path);
  Tensors out;
  for (const ckpt::TensorInfo& t : r.tensors()) {
    at::Tensor x = at::empty(t.shape, at::TensorOptions().dtype(scalar_type(t.dtype)));
    r.read_all(t, x.data_ptr());
    out[t.name] = x;
  }
  if (meta) *meta = r.metadata();
  return out;
}

Tensors read_export(const std::string& path) {
  const auto ends_with = [&](const std::string& s) {
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".pt")) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Tensors out;
    for (const auto& item : torch::pickle_load(bytes).toGenericDict())
      out[item.key().toStringRef()] = item.value().toTensor();
    return out;
  }
  if (!ends_with(".index.json")) return read_safetensors(path, nullptr);
  std::ifstream in(path);
  const nlohmann::json index = nlohmann::json::parse(in);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  Tensors out;
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file);
  for (const std::string& file : files)
    for (const auto& [name, t] : read_safetensors(dir + "/" + file, nullptr)) {
      expect(index["weight_map"].value(name, "") == file,
             name + " is in " + file + " but the index says " +
                 index["weight_map"].value(name, "(nothing)"));
      out[name] = t;
    }
  return out;
}

int compare(const std::vector<std::string>& args) {
  ZERO_CHECK(args.size() >= 4, UsageError, "compare REF EXPORT DTYPE [exact]");
  const bool exact = args.size() > 4 && args[4] == "exact";
  const at::ScalarType want = args[3] == "bf16" ? at::kBFloat16 : at::kFloat;
  std::map<std::string, std::string> meta;
  const Tensors ref = read_safetensors(args[1], &meta);
  std::set<std::string> buffers;
  std::stringstream list(meta["buffers"]);
  for (std::string b; std::getline(list, b, ',');) buffers.insert(b);
  const Tensors got = read_export(args[2]);
  expect(got.size() == ref.size(),
         zero::detail::str("export has ", got.size(), " tensors, reference ", ref.size()));
  for (const auto& [name, r] : ref) {
    auto it = got.find(name);
    if (it == got.end()) {
      expect(false, name + " missing from " + args[2]);
      continue;
    }
    const at::Tensor& g = it->second;
    expect(g.sizes() == r.sizes(), name + ": shape differs from the reference's");
    if (g.sizes() != r.sizes()) continue;
    if (buffers.count(name)) {
      expect(g.scalar_type() == r.scalar_type() && torch::equal(g, r), name + ": buffer differs");
    } else if (exact) {
      expect(g.scalar_type() == want && torch::equal(g, r.to(want)), name + ": not bit-identical");
    } else {
      expect(g.scalar_type() == want && torch::equal(g.to(at::kBFloat16), r.to(at::kBFloat16)),
             name + ": differs after rounding to bf16 (or is not " + args[3] + ")");
    }
  }
  if (!g_failures)
    std::printf("compare: %zu tensors of %s match %s\n", ref.size(), args[2].c_str(),
                args[1].c_str());
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && args[0] == "make") return make(args);
    if (!args.empty() && args[0] == "compare") return compare(args);
    std::cerr << "usage: checkpoint_maker make ... | compare REF EXPORT DTYPE [exact]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_maker: " << e.what() << std::endl;
    return 1;
  }
}
