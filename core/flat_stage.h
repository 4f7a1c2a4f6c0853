// FlatStage: what stages 0-3 share: flat buffers per layout group, gradient hooks on each
// parameter's grad accumulator, bucket arrival counting and the asynchronous bucket reductions.
#pragma once

#include <zero/comm/hierarchical_communicator.h>
#include <zero/core/stage.h>
#include <zero/core/storage.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace zero::detail {

// How a bucket's gradients are reduced.
enum class GradReduction {
  kAllReduce,      // in place in the full gradient buffer (stages 0-1)
  kReduceScatter,  // staged, reduce-scattered, added into the owner's gradient shard (2-3)
};

struct GroupBuffers {
  at::Tensor flat;           // full compute-dtype parameters; params are views into it
  at::Tensor flat_grad;      // kAllReduce: full gradients (params' .grad are views into it when
                             // the gradient dtype is the parameters')
  at::Tensor param_shard;    // stage 3 (non-persistent groups): this rank's parameter shard
  at::Tensor grad_shard;     // kReduceScatter: this rank's gradient shard
  at::Tensor master;         // fp32 master shard (an alias when the parameters are fp32;
                             // undefined when the optimizer is offloaded and keeps it)
  at::Tensor compute_shard;  // what the master mirrors in the parameters' dtype (stage 0: flat)
  bool master_is_alias = true;
  bool grad_is_view = false;    // kAllReduce with the parameters' dtype: .grad views flat_grad
  bool sharded_params = false;  // stage 3 non-persistent: flat's storage comes and goes
};

class FlatStage : public Stage {
 public:
  FlatStage(const StageOptions& options, std::vector<at::Tensor> params, FlatLayout layout,
            std::shared_ptr<Communicator> comm, GradReduction reduction);
  ~FlatStage() override;

  const FlatLayout& layout() const override { return layout_; }
  void start_backward(bool boundary) override;
  void expect_no_grad(const std::vector<int>& params) override;
  void finish_backward() override;
  void zero_grad() override;  // nothing to do when no backward ran since the last one
  void reduce_deferred() override;
  at::Tensor accumulated_grad(int param) override;
  std::vector<int> params_without_grad() const override;
  StageMemory memory() const override;
  void set_grad_ready(GradReadyFn fn) override { grad_ready_ = std::move(fn); }
  void set_implicit_passes(int passes_per_step) override;
  int implicit_passes_begun() const override { return implicit_begun_; }
  bool host_shared_params() const override { return shared_params_; }

 protected:
  // Allocates the buffers, broadcasts rank 0's values, makes the parameters views and
  // registers the hooks. `sharded_group(g)`: stage 3 keeps only the shard of group g.
  // param_shards[g], when defined: group g's shard made by zero::Init (its parameters hold no
  // memory; the flat buffer is not filled, nor broadcast).
  void setup(const std::vector<bool>& sharded_group,
             const std::vector<at::Tensor>& param_shards = {});
  // Called after a parameter's gradient was taken in (stage 3 counts arrivals per unit).
  virtual void after_grad(int param) {}
  // All-gathers this rank's compute-dtype shard of group g into its full flat buffer (after
  // casting the master when it is not an alias). Blocks until done.
  void all_gather_shard_into_flat(int group);
  // After the optimizer wrote this rank's shards: every group's flat buffer (with `sharded_too`,
  // stage 3's sharded groups as well) holds every rank's updated values. Collective.
  void publish_groups(bool sharded_too);
  OptimizerShard shard_of(int group, const at::Tensor& grad) const;
  void note_gathered_bytes(int64_t delta);

  StageOptions options_;
  std::vector<at::Tensor> params_;
  FlatLayout layout_;
  std::shared_ptr<Communicator> comm_;
  GradReduction reduction_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<GroupBuffers> groups_;
  int64_t gathered_bytes_ = 0;
  int64_t peak_gathered_bytes_ = 0;
  // StageOptions::host_shared_params in effect: every group's flat buffer is memory the ranks
  // share, written only by the optimizer (each rank its shard) between the gradient norm's
  // all-reduce (every rank finished its backward) and publish_groups' barrier.
  bool shared_params_ = false;

 private:
  struct Slot {
    at::Tensor staging;  // gradient staging of the buckets that need it (grown on demand)
    at::Tensor input;    // what the bucket's reduce-scatter consumes: staging, or one gradient
    bool busy = false;
  };
  struct Pending {
    int bucket;
    int slot;
    WorkHandle work;
    at::Tensor shard;    // kReduceScatter: this rank's part, reduced in place in the slot's input
    at::Tensor reduced;  // kAllReduce: what the collective reduced in place
    at::Tensor target;   // kAllReduce: where the result belongs (reduced itself, or cast back)
  };
  struct BucketState {
    int arrived = 0;
    bool launched = false;
    int slot = -1;
  };

  void on_grad(int param);
  // One more of `param`'s bucket in (a gradient, or one expect_no_grad said will not come).
  void count_arrival(int param);
  void begin_implicit_pass(int param);  // implicit mode: a new pass starts with this gradient
  Slot new_slot() const;                // staging in the communication dtype
  c10::ScalarType grad_dtype_of(const Group& g) const;  // gradient buffers of group g
  // A free slot for `bucket`; use_staging: its staging is sized and zeroed for the bucket.
  int acquire_slot(int bucket, bool use_staging = true);
  // The first `numel` elements of `slot`'s staging buffer, grown when needed.
  at::Tensor grown_staging(int slot, int64_t numel);
  void launch_bucket(int bucket);
  void launch_remaining();   // every bucket not launched yet, in the launch order
  void report_unbucketed();  // grad_ready for the shard parts no bucket covers (padding)
  // Launches the filled buckets at the head of launch_order_ (overlap: during backward).
  void launch_filled_in_order();
  // At the first reducing backward: rank 0's fill order (then the unfilled buckets, last first)
  // becomes every rank's launch order. Collective.
  void learn_launch_order();
  void finish_pending();                         // the oldest in-flight bucket
  void finish_pending_holding_gradients();       // until no autograd gradient is in flight
  ShardRange bucket_in_shard(int bucket) const;  // the part of a bucket in this rank's shard
  void notify_grad_ready(int bucket);
  // MiCS, at an accumulation boundary: averages every gradient shard over the replica group,
  // then reports each shard whole to grad_ready.
  void reduce_over_replicas();
  void find_unbucketed();

  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::vector<BucketState> buckets_;
  std::vector<std::vector<int64_t>> bucket_counts_;
  std::vector<Slot> slots_;
  at::Tensor convert_scratch_;  // a gradient of another dtype, converted before it is added
  // The largest bucket that is always staged (of several parameters, or cast for an all-reduce;
  // reduce-scatters take a one-parameter bucket from autograd's tensor): a staging buffer that must
  // grow grows to at least this at once, so that the slots stop growing within the first step.
  int64_t staged_numel_ = 0;
  std::deque<Pending> pending_;
  at::Tensor gather_out_;  // all-gather staging (publish in pieces of allgather_bucket_size)
  c10::ScalarType comm_dtype_ = c10::ScalarType::Undefined;
  bool average_op_ = true;   // the reduction is ReduceOp::kAvg; else kSum with the scales below
  double pre_scale_ = 1.0;   // gradients *= this before the sum
  double post_scale_ = 1.0;  // and *= this after it
  bool reduce_now_ = true;   // this micro-step's buckets are reduced
  bool in_backward_ = false;
  bool boundary_backward_ = true;  // this backward ends an accumulation
  GradReadyFn grad_ready_;
  std::vector<std::vector<ShardRange>> unbucketed_;  // per group: shard parts in no bucket
  // qgZ: the communicator that quantizes the reduce-scatters (comm_ itself), and per bucket the
  // gradients it sends exactly (those of 1-dimensional parameters). Null / empty: off.
  HierarchicalCommunicator* qgz_ = nullptr;
  std::vector<at::Tensor> bucket_exact_;
  bool grads_zero_ = true;         // no backward since the gradient buffers were made or zeroed
  int implicit_passes_ = 0;        // set_implicit_passes; 0: the caller starts passes
  int implicit_begun_ = 0;         // passes begun since the last boundary finished
  std::vector<uint8_t> arrived_;   // implicit mode: parameters seen in this pass
  std::vector<uint8_t> got_grad_;  // per parameter: a gradient arrived since the last zero_grad
  std::vector<uint8_t> no_grad_;   // per parameter: expect_no_grad said so for this backward
  // Every rank launches its buckets' collectives in one order, whatever order its gradients
  // arrive in: a parameter that one rank's loss did not use (a data-dependent forward) leaves
  // that rank's bucket unfilled until the end of backward, and launching in fill order would
  // then pair different buckets across ranks (wrong sums, or a transport error).
  // Before the first reducing backward has taught the order, layout order (the engine lays out
  // parameters in reverse registration order, roughly the order their gradients arrive): the
  // first step overlaps too, except behind a bucket whose last gradient comes late (stage 3's
  // rest of the model: the head's gradients first, the input layer's last), where the buckets
  // wait in staging buffers of their own; start_backward frees those once the order is learned.
  std::vector<int> launch_order_;
  bool order_learned_ = false;
  bool first_slots_dropped_ = false;  // the first backward's extra staging buffers freed
  size_t next_launch_ = 0;            // launch_order_[next_launch_]: the next bucket to launch
  std::vector<int> filled_;           // this backward's buckets in the order they filled
};

}  // namespace zero::detail
