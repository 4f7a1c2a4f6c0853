// Activation checkpointing through the engine, started by zerorun: the example GPT with dropout
// trains bitwise the same with and without checkpoints (losses, gradient norms, parameters after
// SGD steps, so the gradients themselves) in fp32 and bf16, with zero::Checkpointed inside and
// outside zero::Sharded and with cpu_checkpointing. `--suite all_stages`: stages 0-3;
// `--suite stage3`: stage 3 only. Also checks the engine's activation and stage 3 accounting.
#include "worker_util.h"

#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/engine.h>
#include <zero/engine/sharded.h>

#include "data.h"
#include "model.h"

using namespace zero;
using namespace zero::test;

namespace {

// plain: Sharded(block); inside: Sharded(Checkpointed(block)); outside: Checkpointed(Sharded).
enum class Mode { kPlain, kInside, kOutside, kInsideCpu };
const char* name(Mode m) {
  switch (m) {
    case Mode::kPlain:
      return "plain";
    case Mode::kInside:
      return "Sharded(Checkpointed)";
    case Mode::kOutside:
      return "Checkpointed(Sharded)";
    case Mode::kInsideCpu:
      return "Sharded(Checkpointed) + cpu_checkpointing";
  }
  return "?";
}

constexpr int kSteps = 3, kGas = 2;
constexpr int64_t kMicro = 2;

struct Run {
  std::vector<double> losses, norms;
  Params params;
  MemoryReport memory;
  ActivationCheckpointStats activations;
};

Run train_gpt(const std::shared_ptr<Communicator>& comm, const gpt::GptConfig& g,
              const gpt::TextDataset& data, int stage, bool bf16, Mode mode) {
  const int world = comm->world_size(), rank = comm->rank();
  torch::manual_seed(5);
  gpt::Gpt model(g);
  model->wrap_blocks([mode](torch::nn::AnyModule block) {
    if (mode == Mode::kOutside)
      return torch::nn::AnyModule(zero::Checkpointed(zero::Sharded(block)));
    if (mode != Mode::kPlain) block = torch::nn::AnyModule(zero::Checkpointed(block));
    return torch::nn::AnyModule(zero::Sharded(block));
  });
  // SGD without momentum: the parameters after a step are p - lr * g, so equal parameters
  // mean equal gradients (Adam's first steps would hide their scale).
  const std::string json = zero::detail::str(
      R"({"train_micro_batch_size_per_gpu": )", kMicro, R"(, "gradient_accumulation_steps": )",
      kGas,
      R"(, "optimizer": {"type": "SGD", "params": {"lr": 0.5}}, "zero_optimization": {"stage": )",
      stage, R"(, "reduce_bucket_size": 5000, "allgather_bucket_size": 5000)",
      stage == 3 ? R"(, "stage3_param_persistence_threshold": 100)" : "", "}",
      bf16 ? R"(, "bf16": {"enabled": true})" : "",
      mode == Mode::kInsideCpu ? R"(, "activation_checkpointing": {"cpu_checkpointing": true})"
                               : "",
      "}");
  Engine engine = initialize(model.ptr(), parse(json, world), comm);
  // Each rank draws its own dropout masks (the same in every mode).
  torch::manual_seed(100 + rank);
  Run r;
  for (int step = 0; step < kSteps; ++step) {
    for (int m = 0; m < kGas; ++m) {
      const gpt::Batch b = data.batch(step, m, rank, world, kMicro, kGas);
      const torch::Tensor loss = model->loss(b.tokens, b.targets);
      r.losses.push_back(loss.item<double>());
      engine.backward(loss);
      engine.step();
    }
    r.norms.push_back(engine.last_grad_norm());
  }
  r.memory = engine.memory_report();
  r.activations = engine.activation_checkpointing()->stats();
  r.params = engine.full_parameters();
  return r;
}

// Values only: a wrapper adds ".inner" to the names of the parameters under it.
bool bitwise(const Params& a, const Params& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i].second, b[i].second)) return false;
  return true;
}

void run_stages(const std::shared_ptr<Communicator>& comm, const std::vector<int>& stages) {
  const std::string text = gpt::read_text_file(ZERO_GPT_DATA);
  const gpt::CharTokenizer tokenizer(text);
  gpt::GptConfig g;
  g.vocab_size = tokenizer.vocab_size();
  g.context = 16;
  g.n_layer = 3;
  g.n_head = 2;
  g.d_model = 32;
  g.dropout = 0.1;
  const gpt::TextDataset data(tokenizer.encode(text), g.context, 1234);
  const int64_t micro_steps = kSteps * kGas;
  for (int stage : stages)
    for (bool bf16 : {false, true}) {
      const Run plain = train_gpt(comm, g, data, stage, bf16, Mode::kPlain);
      EXPECT(plain.activations.checkpoints == 0, "plain run made checkpoints");
      for (Mode mode : {Mode::kInside, Mode::kOutside, Mode::kInsideCpu}) {
        if (mode == Mode::kOutside && stage != 3 && stage != 0) continue;  // same as inside
        const Run r = train_gpt(comm, g, data, stage, bf16, mode);
        const std::string what =
            zero::detail::str("stage ", stage, bf16 ? " bf16 " : " fp32 ", name(mode));
        EXPECT(r.losses == plain.losses, what, ": losses differ");
        EXPECT(r.norms == plain.norms, what, ": gradient norms differ (first ", r.norms[0], " vs ",
               plain.norms[0], ")");
        EXPECT(bitwise(r.params, plain.params), what, ": parameters differ after SGD steps");
        // Every block saved its input [micro, context, d_model] once per micro-step, recomputed
        // it once, and gave it back.
        const ActivationCheckpointStats& a = r.activations;
        const int64_t input_bytes = kMicro * g.context * g.d_model * (bf16 ? 2 : 4);
        EXPECT(a.checkpoints == g.n_layer * micro_steps, what, ": ", a.checkpoints, " checkpoints");
        EXPECT(a.recomputes == a.checkpoints, what, ": ", a.recomputes, " recomputes");
        EXPECT(a.live_bytes == 0 && a.host_live_bytes == 0, what, ": bytes still held");
        EXPECT(a.peak_live_bytes == g.n_layer * input_bytes, what, ": peak ", a.peak_live_bytes);
        EXPECT(a.moved_bytes == 0, what, ": moved bytes on the CPU");
        EXPECT(r.memory.peak_activation_checkpoint_bytes == a.peak_live_bytes, what,
               ": memory report");
        if (stage != 3) continue;
        // Inside, the recompute runs while backward has the block gathered: the same gathers as
        // without checkpoints. Outside, the forward (without autograd) releases each block, so
        // backward gathers it once more per micro-step after the first (which records the
        // order and keeps nothing either way).
        const int64_t extra = mode == Mode::kOutside ? g.n_layer * (micro_steps - 1) : 0;
        EXPECT(r.memory.unit_gathers == plain.memory.unit_gathers + extra, what, ": ",
               r.memory.unit_gathers, " gathers vs ", plain.memory.unit_gathers, " + ", extra);
        EXPECT(r.memory.peak_gathered_params_bytes <= plain.memory.peak_gathered_params_bytes, what,
               ": peak gathered ", r.memory.peak_gathered_params_bytes, " vs ",
               plain.memory.peak_gathered_params_bytes);
        if (comm->rank() == 0)
          std::printf("%-55s bitwise equal; %lld unit gathers (plain %lld)\n", what.c_str(),
                      static_cast<long long>(r.memory.unit_gathers),
                      static_cast<long long>(plain.memory.unit_gathers));
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"all_stages",
                       [](const auto& comm) {
                         run_stages(comm, {0, 1, 2, 3});
                       }},
                      {"stage3", [](const auto& comm) { run_stages(comm, {3}); }}});
}
