// The Stage interface: what ZeRO stage 0, 1, 2 or 3 allocates, how gradients are reduced
// during backward and how updated shards reach the parameters. The engine talks only to this.
#pragma once

#include <zero/comm/communicator.h>
#include <zero/core/layout.h>
#include <zero/core/param_store.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zero {

// Everything a stage needs from the ds_config, in elements (config-free, so the core does not
// depend on config/).
struct StageOptions {
  int stage = 0;
  int64_t reduce_bucket_numel = 500000000;
  int64_t allgather_bucket_numel = 500000000;
  bool overlap_comm = true;  // false: buckets are reduced after backward, not during it
  // Pipelines: each micro-batch's gradients accumulate in a full gradient buffer of the stage's
  // parameters (stages 2-3 too) and nothing is reduced during backward; reduce_deferred() reduces
  // them once per batch, after tied layers' gradients were summed across pipeline stages (and
  // without a reduce-scatter per micro-batch holding the data group in step mid-schedule).
  bool defer_reduction = false;
  int64_t prefetch_numel = 50000000;              // stage3_prefetch_bucket_size
  int64_t persistence_threshold_numel = 100000;   // stage3_param_persistence_threshold
  int64_t max_live_numel = 1000000000;            // stage3_max_live_parameters
  int64_t max_reuse_distance_numel = 1000000000;  // stage3_max_reuse_distance
  int64_t align_bytes = 16;
  // Mixed precision. Gradient buffers (accumulation, the shards the optimizer reads) and the
  // buffers collectives run on; Undefined: the parameters' dtype / the gradient dtype.
  c10::ScalarType grad_dtype = c10::ScalarType::Undefined;  // data_types.grad_accum_dtype
  c10::ScalarType comm_dtype = c10::ScalarType::Undefined;  // communication_data_type
  // How gradients are averaged over ranks, as DeepSpeed splits it: multiplied by 1/world
  // before the sum (prescale_gradients), or by 1/predivide_factor before and
  // predivide_factor/world after it (gradient_predivide_factor; 1 = a plain average).
  bool prescale_gradients = false;
  double predivide_factor = 1.0;
  // offload_optimizer: the optimizer keeps the fp32 master itself (on the host or NVMe), so
  // the stage allocates none; OptimizerShard::master is then undefined.
  bool offload_optimizer = false;
  // offload_param (stage 3): where the parameter shards live between gathers; null: on the
  // device with the rest of the stage. An offloaded optimizer writes the updated values into it;
  // an optimizer on the device keeps an fp32 master there, which the stage writes into it.
  std::shared_ptr<ParamStore> param_store;
  // hpZ (zero_hpz_partition_size, stage 3): this rank's group of consecutive data ranks (a host,
  // when it holds that many). After a unit's first use each rank keeps its slice of the unit's
  // parameters over this group, and later gathers of the unit run within the group until the
  // parameters change (the optimizer step, zero_grad, a load). Null: every gather spans the data
  // group.
  std::shared_ptr<Communicator> secondary_group;
  // Stage 3: the communicator of the parameter gathers, over the stage's ranks with an order of
  // its own. A gradient bucket is reduced when its last gradient arrives, which on a rank whose
  // forward skipped a layer is the end of backward, so its reductions and the gathers of the
  // blocks backward still visits are issued in a different order on different ranks: on one
  // communicator a gather would pair with a reduction. Null: the stage's communicator.
  std::shared_ptr<Communicator> gather_group;
  // qwZ (zero_quantized_weights, stage 3): the gathers that feed forward and backward send int8
  // blocks and their scales (core/quantized_gather.h); the layout's shards are then multiples of
  // 8 elements. Gathers for the caller (gather_all: full_parameters, saving) stay exact.
  bool quantized_weights = false;
  // MiCS (mics_shard_size, stage 3): the ranks holding the same shards as this one in the other
  // shard groups (the stage's communicator is this rank's shard group). They start from the
  // first group's values, and at each accumulation boundary their gradient shards are averaged
  // over this group before the optimizer reads them. Null: the stage's group is the data group.
  std::shared_ptr<Communicator> replica_group;
  // Stages 1-3 whose ranks share a host on the shared-memory transport (host_shared_params):
  // each layout group's full parameter buffer is one copy in memory the ranks share
  // (Communicator::host_shared_tensor); each rank's optimizer writes its shard of it in place,
  // and publishing the updated parameters is a barrier instead of an all-gather. Stage 3 then
  // gathers and releases nothing (its units stay available). Not with MiCS, offload_param, hpZ
  // or qwZ, nor on a device; where the group cannot share memory the stage runs as without it.
  bool host_shared_params = false;
};

// One shard the optimizer updates: master (fp32) and its gradient (fp32, fp16 or bf16; scaled by
// the loss scale in fp16 training), same numel.
struct OptimizerShard {
  int group = -1;
  at::Tensor master;
  at::Tensor grad;
  // fp16/bf16 training: the stage's 16-bit copy of this shard (same numel, contiguous), which
  // the optimizer overwrites with the updated master in the same pass. Undefined in fp32.
  at::Tensor param16;
  // The stage's parameters of this shard in the compute dtype (fp32 too; same numel): where an
  // optimizer that keeps its own master (offload) writes the updated values.
  at::Tensor compute;
  // Stage 3 with offload_param: compute is undefined; the shard is group `group` of this store
  // (read it to fill the masters, write the updated values into it).
  ParamStore* param_store = nullptr;
};

// Called when the gradients of elements [begin, begin + numel) of group `group`'s optimizer
// shard have their final value for this accumulation boundary (a bucket's reduction landed).
using GradReadyFn = std::function<void(int group, int64_t begin, int64_t numel)>;

// Bytes this rank allocated, by category (from the tensors actually held).
struct StageMemory {
  int64_t parameters_bytes = 0;       // compute-dtype parameters kept between uses (full or shard)
  int64_t gradients_bytes = 0;        // full gradient buffer (stages 0-1) or gradient shard (2-3)
  int64_t master_params_bytes = 0;    // fp32 master copies separate from the parameters
  int64_t comm_buffers_bytes = 0;     // bucket staging and all-gather staging buffers
  int64_t gathered_params_bytes = 0;  // stage 3: gathered units right now
  int64_t peak_gathered_params_bytes = 0;  // stage 3: the most ever gathered at once
  int64_t kept_params_bytes = 0;  // stage 3: released units' memory kept for the next gathers
  int64_t unit_gathers = 0;       // stage 3: unit all-gathers started so far (a count, not bytes)
  int64_t secondary_gathers = 0;  // of those, the ones within hpZ's secondary group
  int64_t secondary_params_bytes = 0;  // hpZ: the secondary slices kept right now
  ParamStoreMemory offloaded_params;   // stage 3 offload_param: the shards' place off the device
};

// A unit of stage 3 sharding (a wrapped block, or the rest of the model).
struct UnitSpec {
  std::string name;
};

class Stage {
 public:
  // `params` are the trainable parameters in layout order (params[i] is layout.params()[i]).
  // Rank 0's values are broadcast; the parameters become views into the stage's buffers.
  // units (stage 3 only): index = ParamSpec::unit; unit 0 is the rest of the model.
  // param_shards (stage 3, zero::Init): per layout group, this rank's shard made at the block's
  // construction (undefined: cut from the parameters, which are then whole on every rank).
  static std::unique_ptr<Stage> create(const StageOptions& options, std::vector<at::Tensor> params,
                                       FlatLayout layout, std::shared_ptr<Communicator> comm,
                                       std::vector<UnitSpec> units = {},
                                       std::vector<at::Tensor> param_shards = {});
  virtual ~Stage() = default;

  virtual int stage() const = 0;
  virtual const FlatLayout& layout() const = 0;

  // Before autograd runs for one micro-step; `boundary`: this micro-step ends accumulation.
  virtual void start_backward(bool boundary) = 0;
  // After start_backward, before autograd runs: parameters this backward cannot reach (outside
  // the loss's graph, e.g. a layer a data-dependent forward skipped on this rank). Their
  // gradients count as zero now instead of at the end of backward, so each bucket fills at the
  // same point of backward on every rank whatever layers a rank skipped: a rank waiting for its
  // reductions then never waits for a peer stuck behind a collective this rank has yet to issue.
  virtual void expect_no_grad(const std::vector<int>& params) {}
  // After autograd returned: launches what the hooks did not, waits for every reduction.
  // Blocks the host until this micro-step's gradients are in their final place.
  virtual void finish_backward() = 0;
  // The shards the optimizer updates (after finish_backward on a boundary).
  virtual std::vector<OptimizerShard> optimizer_shards() = 0;
  // True when every rank holds the same full gradients (stage 0): a norm needs no all-reduce.
  virtual bool shards_replicated() const = 0;
  // StageOptions::host_shared_params in effect: the parameters are one copy the ranks share.
  virtual bool host_shared_params() const { return false; }
  // After the optimizer updated the masters: make the parameters reflect them.
  virtual void publish_parameters() = 0;
  // Zeroes the accumulated gradients.
  virtual void zero_grad() = 0;
  // defer_reduction: after the batch's last finish_backward, reduces what it accumulated (an
  // all-reduce at stages 0-1, a reduce-scatter into the shards at 2-3). Collective.
  virtual void reduce_deferred() {}
  // Parameter `param`'s (layout index) gradient accumulated on this rank and not reduced yet, a
  // view into the full gradient buffer (defer_reduction, before reduce_deferred; stages 0-1
  // also after it); undefined where there is none.
  virtual at::Tensor accumulated_grad(int param) { return {}; }
  // The parameters (indices into layout().params()) whose gradient hook has not fired on this
  // rank since the last zero_grad(): parameters the loss did not use.
  virtual std::vector<int> params_without_grad() const = 0;
  virtual StageMemory memory() const = 0;
  // Offload: the optimizer copies each reduced part of the gradient shard to the host as soon
  // as it is final, overlapping the copies with the rest of backward.
  virtual void set_grad_ready(GradReadyFn fn) {}
  // For callers that run autograd without start_backward() before it (zero::DistributedOptimizer):
  // a gradient arriving outside a pass begins one, a parameter's second gradient begins the next,
  // and every `passes_per_step`-th pass is the boundary whose buckets are reduced as they fill;
  // the caller still ends it with finish_backward(). A gradient left undefined (set to none)
  // counts as zero. 0 (the default): off.
  virtual void set_implicit_passes(int passes_per_step) {}
  // Implicit mode: the passes begun since the last boundary pass was finished.
  virtual int implicit_passes_begun() const { return 0; }

  // Stage 3 unit protocol (no-ops in stages 0-2), called by the Sharded wrapper.
  virtual void pre_forward(int unit) {}
  virtual void post_forward(int unit) {}
  virtual void pre_backward(int unit) {}
  // Stage 3: gathers every unit (to read full parameters) / releases them again. Collective.
  virtual void gather_all() {}
  virtual void release_all() {}
  // Stage 3 in a pipeline: true gathers every unit and keeps them through the batch's forwards
  // and backwards (no trace, prefetch or release); false releases the blocks again (unit 0 comes
  // back with publish_parameters). Collective.
  virtual void hold_gathered(bool hold) {}
};

}  // namespace zero
