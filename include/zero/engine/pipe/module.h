// A model as a list of deferred layers split over pipeline stages (DeepSpeed's PipelineModule):
// each rank builds only the layers its stage owns, layer i right after
// torch::manual_seed(base_seed + i), so its values do not depend on the number of stages, and
// registers them as layers.<i> (global names: layers.<i>.<name inside the layer>). With v
// virtual stages (the interleaved schedule) the layers are split into p v parts and stage s holds
// v model chunks, chunk c being part c p + s (Megatron's virtual pipeline).
#pragma once

#include <zero/comm/parallel_grid.h>
#include <zero/engine/activation/activation_checkpointing.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zero::pipe {

// How a tied layer's use runs the shared module (e.g. an LM head as the embedding's transpose).
using TiedForward = std::function<at::Tensor(torch::nn::AnyModule& module, const at::Tensor& x)>;

// One layer, built only where it is owned. `type_name` is what partition_method "type:REGEX"
// matches and what the printed partition shows (e.g. "TransformerLayer").
struct LayerSpec {
  LayerSpec(std::string type_name, std::function<torch::nn::AnyModule()> build)
      : type_name(std::move(type_name)), build(std::move(build)) {}
  std::string type_name;
  std::function<torch::nn::AnyModule()> build;
  std::string tie_key;       // TiedLayerSpec: the layers of one key share one module
  TiedForward tied_forward;  // TiedLayerSpec: empty runs the module's forward
};

// DeepSpeed's TiedLayerSpec: every layer of `key` uses one module (an embedding and the LM head
// that reads its weight). Each stage holding one of them builds the module once, after
// manual_seed(base_seed + the key's first layer index), and registers it as layers.<that index>,
// so the copies start equal and carry one name; the engine sums their gradients over the stages
// that hold them before the data-parallel reduction, and counts them once in the gradient norm.
struct TiedLayerSpec : LayerSpec {
  TiedLayerSpec(std::string key, std::string type_name, std::function<torch::nn::AnyModule()> build,
                TiedForward forward = {})
      : LayerSpec(std::move(type_name), std::move(build)) {
    tie_key = std::move(key);
    tied_forward = std::move(forward);
  }
};

struct PipelineOptions {
  // The last stage's loss of one micro-batch from its output and labels (a scalar).
  using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels)>;
  TORCH_ARG(int64_t, base_seed) = 1234;  // DeepSpeed's seed_layers, always on here
  // "parameters" (DeepSpeed's default), "uniform", "type:REGEX" (partition.h) or "profile"
  // (balanced by each layer's measured forward + backward time on profile_input: see
  // profile_layers).
  TORCH_ARG(std::string, partition_method) = "parameters";
  // partition_method "profile": a sample micro-batch's inputs (what the first layer takes), on
  // the device the layers will run on.
  TORCH_ARG(at::Tensor, profile_input);
  TORCH_ARG(LossFn, loss_fn);
  // Model chunks per stage: the config's pipeline.virtual_stages with the interleaved schedule
  // (zero::initialize checks that they agree), 1 otherwise.
  TORCH_ARG(int, virtual_stages) = 1;
  // DeepSpeed's activation_checkpoint_interval: every k consecutive layers of a model chunk run as
  // one zero::checkpoint (only the group's input kept; recomputed in backward). 0: none. Not
  // with the zb-h1 schedule, whose input-gradient pass cannot drive a recompute.
  TORCH_ARG(int, activation_checkpoint_interval) = 0;
};

class PipelineModuleImpl : public torch::nn::Module {
 public:
  // Collective over nothing but with partition method "profile" (then over the grid's world):
  // every rank computes the same partition from the specs (building each layer once, under a
  // saved and restored RNG state, when the method needs parameter counts). UsageError when a stage
  // (or a part, with virtual stages) would hold no layer (more parts than layers, or a partition
  // that leaves one empty), naming it and the partition.
  PipelineModuleImpl(const ParallelGrid& grid, std::vector<LayerSpec> layers,
                     PipelineOptions options = {});

  // The layers of this stage's model chunk `chunk` in order on `x` (the previous part's output,
  // or the micro-batch's inputs on the first part). UsageError naming the layer and stage when a
  // layer's output is not a tensor.
  at::Tensor forward(const at::Tensor& x, int chunk = 0);

  int stage() const { return stage_; }
  int num_stages() const { return stages_; }
  int virtual_stages() const { return static_cast<int>(chunks_.size()); }
  bool is_first_stage() const { return stage_ == 0; }
  bool is_last_stage() const { return stage_ == stages_ - 1; }
  // Chunk `chunk` of this stage is the model's first part (it takes the micro-batch's inputs) or
  // its last (its output goes to loss_fn).
  bool is_first_part(int chunk) const { return chunk == 0 && is_first_stage(); }
  bool is_last_part(int chunk) const { return chunk == virtual_stages() - 1 && is_last_stage(); }
  // Part k holds layers [parts()[k], parts()[k + 1]); it is chunk k / p of stage k % p.
  const std::vector<int>& parts() const { return parts_; }
  int num_layers() const { return static_cast<int>(specs_.size()); }
  // "stage 0: layers 0-1 (Embedding, Block); stage 1: ..." (what rank 0 prints).
  // With virtual stages: "part 0 (stage 0, chunk 0): layers 0-1 (...); ...".
  std::string partition_text() const;
  const PipelineOptions& options() const { return options_; }
  // This stage's layers, chunk by chunk: (global index, layer); a tied module once, under the
  // first index of its key on this stage.
  std::vector<std::pair<int, torch::nn::AnyModule>> owned_layers() const;
  // zero::Init: this rank's shards of each owned layer (owned_layers' order) made as it was built
  // under a live zero::Init (empty for a layer built whole: without Init, and tied layers, whose
  // copies the engine keeps whole), handed over once.
  std::vector<std::vector<at::Tensor>> take_init_shards();
  // zero::initialize: the engine's activation checkpointing settings and counters, for the
  // checkpoints of activation_checkpoint_interval.
  void attach_checkpointing(std::shared_ptr<ActivationCheckpointing> context) {
    checkpointing_ = std::move(context);
  }
  // A tie key held by more than one stage: the stages in order (the first counts the gradient
  // norm) and, on a stage that holds it, the shared module (else empty).
  struct Tie {
    std::string key;
    std::vector<int> stages;
    torch::nn::AnyModule module;
  };
  std::vector<Tie> ties() const;

 private:
  int first_of_key(const std::string& key) const;
  // Layers [begin, end) of model chunk `chunk` on x.
  at::Tensor run_layers(int chunk, size_t begin, size_t end, const at::Tensor& x);

  std::vector<LayerSpec> specs_;
  PipelineOptions options_;
  std::vector<int> parts_;
  int stage_ = 0, stages_ = 1;
  struct Owned {
    int index;  // the layer's global index
    torch::nn::AnyModule layer;
    TiedForward forward;  // a tied use's forward; empty: the layer's own
    bool first_use;       // the first use of the module on this stage (owned_layers lists it)
  };
  std::vector<std::vector<Owned>> chunks_;
  std::map<std::string, torch::nn::AnyModule> tied_;    // this stage's tied modules by key
  std::map<int, std::vector<at::Tensor>> init_shards_;  // by layer index, from zero::Init
  std::shared_ptr<ActivationCheckpointing> checkpointing_;
};
TORCH_MODULE(PipelineModule);

// Partition method "profile": each layer's forward + backward time in seconds (the best of three
// runs) on `sample`, the first layer's input, each later layer taking the one before's output;
// layers built one at a time, after the seed the model builds them with, on the sample's device,
// under a saved and restored CPU RNG state. Measured on world rank 0 and broadcast: collective
// over `world`, and every rank partitions alike.
std::vector<double> profile_layers(const std::vector<LayerSpec>& specs, const at::Tensor& sample,
                                   int64_t base_seed, Communicator& world);

// The layer index in a pipeline parameter's global name ("layers.12.fc.weight" -> 12).
// UsageError for a name of another form.
int layer_index(const std::string& name);

}  // namespace zero::pipe
