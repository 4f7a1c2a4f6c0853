// FlatStage: buffers per layout group, rank 0's broadcast, gradient post-hooks on the grad
// accumulators, bucket launches (all-reduce or reduce-scatter) and the publish all-gather.
#include "flat_stage.h"

#include <zero/core/float_type_torch.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <numeric>

namespace zero::detail {

void free_storage(const at::Tensor& tensor) {
  take_storage(tensor);  // the returned DataPtr frees the memory
}

void allocate_storage(const at::Tensor& tensor, int64_t nbytes) {
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  ZERO_ASSERT(impl->allocator() != nullptr, "storage without allocator");
  put_storage(tensor, impl->allocator()->allocate(static_cast<size_t>(nbytes)), nbytes);
}

at::DataPtr take_storage(const at::Tensor& tensor) {
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  at::DataPtr data = impl->set_data_ptr(at::DataPtr(nullptr, tensor.device()));
  impl->set_nbytes(static_cast<size_t>(0));
  return data;
}

void put_storage(const at::Tensor& tensor, at::DataPtr data, int64_t nbytes) {
  c10::StorageImpl* impl = tensor.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(data));
  impl->set_nbytes(static_cast<size_t>(nbytes));
}

bool storage_allocated(const at::Tensor& tensor) {
  return tensor.storage().nbytes() > 0;
}

FlatStage::FlatStage(const StageOptions& options, std::vector<at::Tensor> params, FlatLayout layout,
                     std::shared_ptr<Communicator> comm, GradReduction reduction)
    : options_(options),
      params_(std::move(params)),
      layout_(std::move(layout)),
      comm_(std::move(comm)),
      reduction_(reduction) {
  ZERO_ASSERT(comm_, "no communicator");
  ZERO_ASSERT(params_.size() == layout_.params().size(), "params and layout disagree");
  rank_ = comm_->rank();
  world_ = comm_->world_size();
  ZERO_ASSERT(world_ == layout_.world_size(), "layout world size ", layout_.world_size());
  ZERO_ASSERT(!options_.replica_group ||
                  (reduction_ == GradReduction::kReduceScatter && !options_.defer_reduction),
              "replica groups need reduce-scattered gradients reduced during backward");
  ZERO_CHECK(options_.predivide_factor > 0, ConfigError,
             "gradient_predivide_factor must be > 0, got ", options_.predivide_factor);
  // DeepSpeed's split of the average: prescale divides by the world size before the sum;
  // otherwise 1/predivide before and predivide/world after (a plain average for predivide 1).
  if (options_.prescale_gradients) {
    pre_scale_ = 1.0 / world_;
    post_scale_ = 1.0;
  } else {
    pre_scale_ = 1.0 / options_.predivide_factor;
    post_scale_ = options_.predivide_factor / world_;
  }
  average_op_ = !options_.prescale_gradients && options_.predivide_factor == 1.0;
}

FlatStage::~FlatStage() {
  for (size_t i = 0; i < accumulators_.size(); ++i)
    if (accumulators_[i]) accumulators_[i]->del_post_hook(hook_keys_[i]);
  try {
    while (!pending_.empty()) finish_pending();
  } catch (const std::exception& e) {  // a destructor must not throw; the error must not vanish
    spdlog::error(
        "[rank {}] a gradient reduction still in flight when the stage was destroyed "
        "failed: {}",
        rank_, e.what());
  }
}

c10::ScalarType FlatStage::grad_dtype_of(const Group& g) const {
  return options_.grad_dtype == c10::ScalarType::Undefined ? to_scalar_type(g.dtype)
                                                           : options_.grad_dtype;
}

void FlatStage::setup(const std::vector<bool>& sharded_group,
                      const std::vector<at::Tensor>& param_shards) {
  const auto& lgroups = layout_.groups();
  // One communication dtype for the shared staging buffers (the engine gives every group the
  // same parameter dtype).
  if (!lgroups.empty())
    comm_dtype_ = options_.comm_dtype == c10::ScalarType::Undefined ? grad_dtype_of(lgroups[0])
                                                                    : options_.comm_dtype;
  groups_.resize(lgroups.size());
  const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_[0].device();
  // Every rank of the group decides alike (the same options; the group shares memory or not).
  shared_params_ = options_.host_shared_params && options_.stage >= 1 && world_ > 1 &&
                   device.is_cpu() && !options_.replica_group && !options_.param_store &&
                   !options_.secondary_group && !options_.quantized_weights;
  for (size_t gi = 0; gi < lgroups.size(); ++gi) {
    const Group& g = lgroups[gi];
    GroupBuffers& b = groups_[gi];
    auto opts = at::TensorOptions().dtype(to_scalar_type(g.dtype)).device(device);
    const bool presharded = gi < param_shards.size() && param_shards[gi].defined();
    if (shared_params_) {
      b.flat = comm_->host_shared_tensor(g.padded_numel, to_scalar_type(g.dtype));
      shared_params_ = b.flat.defined();  // the first group's answer is every group's
    }
    const BufferRange shard = g.shard(rank_);
    auto fill_from_params = [&] {
      at::NoGradGuard no_grad;
      for (int pi : g.params) {
        const BufferRange r = layout_.slots()[pi].buffer;
        b.flat.narrow(0, r.begin, r.numel()).copy_(params_[pi].detach().reshape({-1}));
      }
    };
    if (shared_params_) {
      // Rank 0's values (what the broadcast below gives the others), or each rank's own shard;
      // nobody reads before everybody wrote.
      if (presharded)
        b.flat.narrow(0, shard.begin, shard.numel()).copy_(param_shards[gi]);
      else if (rank_ == 0)
        fill_from_params();
      comm_->barrier()->wait();
    } else {
      // Presharded: memory is reserved, never touched, and released below.
      b.flat = presharded ? at::empty({g.padded_numel}, opts) : at::zeros({g.padded_numel}, opts);
      if (!presharded) {
        fill_from_params();
        // MiCS: the first shard group's values into every group, then within each group.
        if (options_.replica_group) options_.replica_group->broadcast(b.flat, 0)->wait();
        if (world_ > 1) comm_->broadcast(b.flat, 0)->wait();
      }
    }
    for (int pi : g.params) {
      const BufferRange r = layout_.slots()[pi].buffer;
      params_[pi].set_data(b.flat.narrow(0, r.begin, r.numel()).view(params_[pi].sizes()));
    }
    // Shared: the flat buffer stays, and this rank's shard is its part of it.
    b.sharded_params = sharded_group[gi] && !shared_params_;
    at::Tensor compute_shard;
    ZERO_ASSERT(!presharded || b.sharded_params || shared_params_,
                "a presharded group must stay sharded");
    if (b.sharded_params) {
      b.param_shard = presharded ? param_shards[gi].to(device)
                                 : b.flat.narrow(0, shard.begin, shard.numel()).clone();
      if (presharded && options_.replica_group)
        options_.replica_group->broadcast(b.param_shard, 0)->wait();
      if (presharded) free_storage(b.flat);
      compute_shard = b.param_shard;
    } else {
      compute_shard = b.flat.narrow(0, shard.begin, shard.numel());
    }
    const c10::ScalarType grad_dtype = grad_dtype_of(g);
    if (reduction_ == GradReduction::kAllReduce) {
      b.flat_grad = at::zeros({g.padded_numel}, opts.dtype(grad_dtype));
      b.grad_is_view = grad_dtype == to_scalar_type(g.dtype);
      for (int pi : g.params) {
        const BufferRange r = layout_.slots()[pi].buffer;
        if (b.grad_is_view)
          params_[pi].mutable_grad() =
              b.flat_grad.narrow(0, r.begin, r.numel()).view(params_[pi].sizes());
        else
          params_[pi].mutable_grad().reset();
      }
    } else {
      b.grad_shard = at::zeros({g.shard_numel}, opts.dtype(grad_dtype));
      // Deferred: the micro-batches accumulate here, and the buckets reduce-scatter from it.
      if (options_.defer_reduction)
        b.flat_grad = at::zeros({g.padded_numel}, opts.dtype(grad_dtype));
      for (int pi : g.params) params_[pi].mutable_grad().reset();
    }
    // Stage 0 optimizes the whole buffer; the others this rank's shard.
    if (options_.stage == 0) compute_shard = b.flat;
    // With offload_param and the optimizer on the device, the master is the shard's only copy on
    // the device: the parameter shard itself moves to the store.
    const bool shard_leaves = options_.param_store && b.sharded_params;
    b.master_is_alias =
        g.dtype == FloatType::kFloat32 && !options_.offload_optimizer && !shard_leaves;
    if (b.master_is_alias)
      b.master = compute_shard;
    else if (!options_.offload_optimizer)
      b.master = compute_shard.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    b.compute_shard = compute_shard;
  }

  // Bucket bookkeeping and staging.
  const auto& lbuckets = layout_.buckets();
  buckets_.assign(lbuckets.size(), BucketState{});
  bucket_counts_.clear();
  for (size_t bi = 0; bi < lbuckets.size(); ++bi) {
    bucket_counts_.push_back(layout_.bucket_counts(static_cast<int>(bi)));
  }
  // qgZ: the reducing communicator quantizes reduce-scatters; the gradients of 1-dimensional
  // parameters (biases, norms) stay exact, as DeepSpeed's qgZ reduce-scatters those plainly.
  auto* quantizing = dynamic_cast<HierarchicalCommunicator*>(comm_.get());
  if (reduction_ == GradReduction::kReduceScatter && quantizing &&
      quantizing->quantized_block() > 0) {
    qgz_ = quantizing;
    for (const Bucket& b : lbuckets) {
      at::Tensor exact = at::zeros({b.buffer.numel()}, at::kBool);
      for (int pi : b.params)
        if (params_[pi].dim() <= 1) {
          const BufferRange& r = layout_.slots()[pi].buffer;
          exact.narrow(0, r.begin - b.buffer.begin, r.numel()).fill_(true);
        }
      bucket_exact_.push_back(exact);
    }
  }

  // Two staging buffers: one bucket fills while the previous one is reduced.
  if (reduction_ == GradReduction::kReduceScatter && !lbuckets.empty())
    for (int i = 0; i < 2; ++i) slots_.push_back(new_slot());
  // All-reduced buckets stage only to change dtype, and then every one of them.
  for (const Bucket& b : lbuckets)
    if (b.params.size() > 1 || reduction_ == GradReduction::kAllReduce)
      staged_numel_ = std::max(staged_numel_, b.buffer.numel());
  // Until the first backward shows the order, launch each bucket when its last gradient is
  // expected: the layout lists parameters in the order backward produces them (the model's own
  // order reversed), so a bucket is complete when its parameter of highest index arrives. Layout
  // order instead put stage 3's bucket of the rest of the model first, whose input layer's
  // gradient comes last, and every other bucket waited in a staging buffer of its own.
  for (int b = 0; b < static_cast<int>(lbuckets.size()); ++b) launch_order_.push_back(b);
  auto last_param = [&](int b) {
    const std::vector<int>& ps = lbuckets[b].params;
    return ps.empty() ? -1 : *std::max_element(ps.begin(), ps.end());
  };
  std::stable_sort(launch_order_.begin(), launch_order_.end(),
                   [&](int a, int b) { return last_param(a) < last_param(b); });

  find_unbucketed();

  // Hooks run after AccumulateGrad has put the gradient into param.grad.
  accumulators_.resize(params_.size());
  hook_keys_.resize(params_.size());
  got_grad_.assign(params_.size(), 0);
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    accumulators_[pi] = torch::autograd::impl::grad_accumulator(params_[pi]);
    ZERO_ASSERT(accumulators_[pi], "no grad accumulator for ", layout_.params()[pi].name);
    const int index = static_cast<int>(pi);
    hook_keys_[pi] =
        accumulators_[pi]->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, index](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list&) {
              on_grad(index);
              return outputs;
            }));
  }
}

void FlatStage::start_backward(bool boundary) {
  ZERO_ASSERT(pending_.empty(), "buckets still in flight at the start of backward");
  boundary_backward_ = boundary;
  reduce_now_ =
      !options_.defer_reduction && (boundary || reduction_ == GradReduction::kReduceScatter);
  for (auto& b : buckets_) b = BucketState{};
  // The first backward launched in layout order, so buckets that filled before their turn each
  // waited in a staging buffer of its own (stage 3: behind the rest of the model, whose input
  // layer's gradient comes last). With the order learned two slots take turns: free the others,
  // once (a later step that needs a third keeps it and allocates nothing new after).
  if (order_learned_ && !first_slots_dropped_) {
    if (slots_.size() > 2) slots_.resize(2);
    first_slots_dropped_ = true;
  }
  next_launch_ = 0;
  filled_.clear();
  no_grad_.assign(params_.size(), 0);
  in_backward_ = true;
  grads_zero_ = false;
  if (reduction_ == GradReduction::kAllReduce) {
    // Someone (model->zero_grad(true), the user) may have replaced .grad: restore the views.
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      if (!groups_[gi].grad_is_view) continue;
      for (int pi : layout_.groups()[gi].params) {
        const BufferRange r = layout_.slots()[pi].buffer;
        at::Tensor view = groups_[gi].flat_grad.narrow(0, r.begin, r.numel());
        at::Tensor& grad = params_[pi].mutable_grad();
        if (!grad.defined() || grad.data_ptr() != view.data_ptr()) {
          if (grad.defined()) view.copy_(grad.reshape({-1}));
          grad = view.view(params_[pi].sizes());
        }
      }
    }
  }
}

void FlatStage::set_implicit_passes(int passes_per_step) {
  ZERO_CHECK(passes_per_step >= 0, UsageError, "backward_passes_per_step must be >= 1, got ",
             passes_per_step);
  ZERO_CHECK(!in_backward_, UsageError, "set_implicit_passes during a backward pass");
  implicit_passes_ = passes_per_step;
  implicit_begun_ = 0;
  arrived_.assign(params_.size(), 0);
}

void FlatStage::begin_implicit_pass(int param) {
  if (in_backward_ && !arrived_[param]) return;  // the same pass goes on
  if (in_backward_) {  // a parameter's second gradient: the previous pass has ended
    ZERO_CHECK(!boundary_backward_, UsageError, "backward ran more than backward_passes_per_step (",
               implicit_passes_,
               ") times before step(); call step() (or synchronize()) after every ",
               implicit_passes_, " backward passes");
    finish_backward();
  }
  if (implicit_begun_ == 0) {
    // The first pass after a step: a gradient someone set to none is zero, not the old buffer.
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      if (!groups_[gi].grad_is_view) continue;
      for (int pi : layout_.groups()[gi].params) {
        const at::Tensor& grad = params_[pi].grad();
        const BufferRange r = layout_.slots()[pi].buffer;
        at::Tensor view = groups_[gi].flat_grad.narrow(0, r.begin, r.numel());
        if (!grad.defined() || grad.data_ptr() != view.data_ptr()) view.zero_();
      }
    }
  }
  ++implicit_begun_;
  std::fill(arrived_.begin(), arrived_.end(), 0);
  start_backward(implicit_begun_ == implicit_passes_);
}

void FlatStage::on_grad(int param) {
  if (implicit_passes_ > 0) {
    begin_implicit_pass(param);
    arrived_[param] = 1;
  }
  ZERO_ASSERT(no_grad_.empty() || !no_grad_[param], "parameter '", layout_.params()[param].name,
              "' got a gradient although it is outside the loss's autograd graph");
  got_grad_[param] = 1;
  const ParamSlot& ps = layout_.slots()[param];
  at::Tensor& grad = params_[param].mutable_grad();
  ZERO_ASSERT(grad.defined(), "hook without gradient for ", layout_.params()[param].name);
  if (reduction_ == GradReduction::kAllReduce || options_.defer_reduction) {
    const GroupBuffers& b = groups_[ps.group];
    at::Tensor view = b.flat_grad.narrow(0, ps.buffer.begin, ps.buffer.numel());
    if (!b.grad_is_view) {  // another dtype: accumulate into the buffer, drop autograd's tensor
      // Converted into a kept buffer first: an add_ across dtypes would allocate the converted
      // copy for every parameter of every step.
      const int64_t n = grad.numel();
      if (convert_scratch_.numel() < n) convert_scratch_ = at::empty({n}, view.options());
      at::Tensor converted = convert_scratch_.narrow(0, 0, n);
      converted.copy_(grad.reshape({-1}));
      view.add_(converted);
      grad.reset();
    } else if (grad.data_ptr() != view.data_ptr()) {  // AccumulateGrad replaced our view
      view.add_(grad.reshape({-1}));
      grad = view.view(params_[param].sizes());
    }
  } else {
    const Bucket& bucket = layout_.buckets()[ps.bucket];
    // A bucket that is exactly one parameter's gradient is reduced from autograd's tensor itself:
    // no staging copy, and no staging buffer of the largest parameter's size.
    const bool whole = bucket.params.size() == 1 && grad.is_contiguous() &&
                       grad.scalar_type() == comm_dtype_ && grad.numel() == bucket.buffer.numel();
    // At most one such gradient in flight: each is a whole parameter, larger than a bucket, and
    // autograd's tensor lives until its reduction ends (two would hold two blocks' gradients
    // beside the block that backward has gathered).
    if (whole) finish_pending_holding_gradients();
    const int slot = acquire_slot(ps.bucket, /*use_staging=*/!whole);
    if (whole)
      slots_[slot].input = grad.reshape({-1});
    else
      slots_[slot]
          .staging.narrow(0, ps.buffer.begin - bucket.buffer.begin, ps.buffer.numel())
          .add_(grad.reshape({-1}));
    grad.reset();
  }
  count_arrival(param);
}

void FlatStage::count_arrival(int param) {
  const int bucket = layout_.slots()[param].bucket;
  BucketState& bs = buckets_[bucket];
  ++bs.arrived;
  after_grad(param);
  if (bs.arrived == static_cast<int>(layout_.buckets()[bucket].params.size())) {
    filled_.push_back(bucket);
    if (reduce_now_ && options_.overlap_comm) launch_filled_in_order();
  }
}

void FlatStage::expect_no_grad(const std::vector<int>& params) {
  ZERO_ASSERT(in_backward_ && implicit_passes_ == 0, "expect_no_grad outside a started backward");
  // A staged bucket's slot is zeroed when taken and a kept gradient buffer holds what earlier
  // micro-steps accumulated: either way nothing is added for these.
  for (int param : params) {
    ZERO_ASSERT(!no_grad_[param], "expect_no_grad: parameter ", param, " given twice");
    no_grad_[param] = 1;
    count_arrival(param);
  }
}

void FlatStage::launch_filled_in_order() {
  while (next_launch_ < launch_order_.size()) {
    const int b = launch_order_[next_launch_];
    if (buckets_[b].arrived != static_cast<int>(layout_.buckets()[b].params.size())) return;
    ++next_launch_;
    launch_bucket(b);
  }
}

void FlatStage::learn_launch_order() {
  const int n = static_cast<int>(buckets_.size());
  std::vector<char> seen(n, 0);
  std::vector<int64_t> order;
  for (int b : filled_)
    if (!seen[b]) order.push_back(b), seen[b] = 1;
  for (int b = n - 1; b >= 0; --b)
    if (!seen[b]) order.push_back(b);
  if (world_ > 1 && n > 0) {
    at::Tensor t =
        at::tensor(order, at::TensorOptions().dtype(at::kLong)).to(groups_[0].flat.device());
    comm_->broadcast(t, 0)->wait();
    t = t.cpu();
    for (int i = 0; i < n; ++i) order[i] = t[i].item<int64_t>();
  }
  launch_order_.assign(order.begin(), order.end());
}

void FlatStage::finish_pending_holding_gradients() {
  auto holds = [this](const Pending& p) {
    return p.slot >= 0 && slots_[p.slot].input.defined() &&
           !slots_[p.slot].input.is_alias_of(slots_[p.slot].staging);
  };
  while (std::any_of(pending_.begin(), pending_.end(), holds)) finish_pending();
}

FlatStage::Slot FlatStage::new_slot() const {
  const auto opts = groups_[0].flat.options().dtype(comm_dtype_);
  Slot s;
  s.staging = at::empty({0}, opts);  // grown to the buckets that need it
  return s;
}

int FlatStage::acquire_slot(int bucket, bool use_staging) {
  BucketState& bs = buckets_[bucket];
  if (bs.slot >= 0) return bs.slot;
  int free_slot = -1;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].busy) free_slot = static_cast<int>(i);
  if (free_slot < 0 && slots_.size() >= 2 && !pending_.empty()) {
    finish_pending();
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].busy) free_slot = static_cast<int>(i);
  }
  if (free_slot < 0) {
    slots_.push_back(new_slot());
    free_slot = static_cast<int>(slots_.size()) - 1;
    if (slots_.size() > 2)
      spdlog::debug("[rank {}] gradient buckets filled out of order: staging buffer {} allocated",
                    rank_, slots_.size());
  }
  Slot& slot = slots_[free_slot];
  slot.busy = true;
  if (use_staging) {
    slot.input = grown_staging(free_slot, layout_.buckets()[bucket].buffer.numel());
    slot.input.zero_();
  }
  bs.slot = free_slot;
  return free_slot;
}

at::Tensor FlatStage::grown_staging(int slot, int64_t numel) {
  at::Tensor& staging = slots_[slot].staging;
  if (staging.numel() < numel)
    staging = at::empty({std::max(numel, staged_numel_)}, staging.options());
  return staging.narrow(0, 0, numel);
}

void FlatStage::launch_bucket(int bucket) {
  BucketState& bs = buckets_[bucket];
  ZERO_ASSERT(!bs.launched, "bucket ", bucket, " launched twice");
  bs.launched = true;
  const Bucket& b = layout_.buckets()[bucket];
  if (reduction_ == GradReduction::kAllReduce) {
    if (world_ == 1) {
      notify_grad_ready(bucket);
      return;
    }
    at::Tensor view = groups_[b.group].flat_grad.narrow(0, b.buffer.begin, b.buffer.numel());
    if (!average_op_) view.mul_(pre_scale_);
    int slot = -1;
    at::Tensor reduced = view;
    if (view.scalar_type() != comm_dtype_) {  // cast into a staging buffer, reused every step
      slot = acquire_slot(bucket, /*use_staging=*/false);
      reduced = grown_staging(slot, b.buffer.numel());
      reduced.copy_(view);
      slots_[slot].input = reduced;
    }
    WorkHandle work = comm_->all_reduce(reduced, average_op_ ? ReduceOp::kAvg : ReduceOp::kSum);
    pending_.push_back(Pending{bucket, slot, std::move(work), {}, reduced, view});
  } else {
    const int slot = acquire_slot(bucket, /*use_staging=*/!options_.defer_reduction);
    // Deferred: the accumulated gradients themselves (consumed; zero_grad clears them).
    if (options_.defer_reduction)
      slots_[slot].input = groups_[b.group].flat_grad.narrow(0, b.buffer.begin, b.buffer.numel());
    const auto& counts = bucket_counts_[bucket];
    at::Tensor input = slots_[slot].input;
    // This rank's part is reduced in place, in its own chunk of the input (as NCCL's in-place
    // reduce-scatter): no receive buffer beside the input.
    const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, int64_t{0});
    at::Tensor shard = input.narrow(0, offset, counts[rank_]);
    WorkHandle work;
    if (world_ > 1) {
      if (!average_op_) input.mul_(pre_scale_);
      // The input is a staging buffer or autograd's gradient, both dropped after the reduction.
      const ReduceOp op = average_op_ ? ReduceOp::kAvg : ReduceOp::kSum;
      if (qgz_)
        work = qgz_->quantized_reduce_scatter_v(input, shard, counts, op, bucket_exact_[bucket]);
      else
        work = comm_->reduce_scatter_v(input, shard, counts, op, InputUse::kConsume);
    }
    pending_.push_back(Pending{bucket, slot, std::move(work), shard, {}, {}});
  }
}

void FlatStage::finish_pending() {
  Pending p = pending_.front();
  pending_.pop_front();
  if (p.work) p.work->wait();
  const bool post_scale = world_ > 1 && !average_op_ && post_scale_ != 1.0;
  if (p.reduced.defined()) {
    if (post_scale) p.reduced.mul_(post_scale_);
    if (!p.reduced.is_same(p.target)) p.target.copy_(p.reduced);
    notify_grad_ready(p.bucket);
  } else if (p.slot >= 0) {
    const ShardRange r = layout_.bucket_shard_range(p.bucket, rank_);
    const int group = layout_.buckets()[p.bucket].group;
    if (!r.empty()) {
      if (post_scale) p.shard.mul_(post_scale_);
      groups_[group].grad_shard.narrow(0, r.begin, r.numel()).add_(p.shard);
    }
    notify_grad_ready(p.bucket);
  }
  if (p.slot >= 0) {
    slots_[p.slot].busy = false;
    slots_[p.slot].input = at::Tensor();
    buckets_[p.bucket].slot = -1;
  }
}

// The part of `bucket` inside this rank's optimizer shard, once it is final (the reduction
// of the accumulation boundary's micro-step), in shard coordinates.
ShardRange FlatStage::bucket_in_shard(int bucket) const {
  const Bucket& b = layout_.buckets()[bucket];
  if (reduction_ == GradReduction::kReduceScatter) return layout_.bucket_shard_range(bucket, rank_);
  const BufferRange shard = layout_.groups()[b.group].shard(rank_);
  return b.buffer.intersect(shard).relative_to<ShardSpace>(shard.begin);
}

void FlatStage::notify_grad_ready(int bucket) {
  // MiCS: a shard is final only after the replicas' average (reduce_over_replicas).
  if (!grad_ready_ || !boundary_backward_ || options_.replica_group) return;
  const ShardRange r = bucket_in_shard(bucket);
  if (!r.empty()) grad_ready_(layout_.buckets()[bucket].group, r.begin, r.numel());
}

// The parts of each group's shard that no bucket covers (padding): their gradients stay zero,
// and reporting them once per boundary lets the receiver count every element exactly once.
void FlatStage::find_unbucketed() {
  const auto& lgroups = layout_.groups();
  std::vector<std::vector<ShardRange>> covered(lgroups.size());
  for (size_t bi = 0; bi < layout_.buckets().size(); ++bi) {
    const ShardRange r = bucket_in_shard(static_cast<int>(bi));
    if (!r.empty()) covered[layout_.buckets()[bi].group].push_back(r);
  }
  unbucketed_.assign(lgroups.size(), {});
  for (size_t g = 0; g < lgroups.size(); ++g) {
    std::sort(covered[g].begin(), covered[g].end(),
              [](const ShardRange& a, const ShardRange& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const ShardRange& r : covered[g]) {
      if (r.begin > at) unbucketed_[g].push_back({at, r.begin});
      at = std::max(at, r.end);
    }
    if (at < lgroups[g].shard_numel) unbucketed_[g].push_back({at, lgroups[g].shard_numel});
  }
}

void FlatStage::launch_remaining() {
  while (next_launch_ < launch_order_.size()) launch_bucket(launch_order_[next_launch_++]);
  // After the launches: they went in the provisional order, which every rank used.
  if (!order_learned_ && !buckets_.empty()) learn_launch_order();
  order_learned_ = true;
}

void FlatStage::report_unbucketed() {
  if (!grad_ready_ || options_.replica_group) return;  // reduce_over_replicas reported all
  for (size_t g = 0; g < unbucketed_.size(); ++g)
    for (const ShardRange& r : unbucketed_[g]) grad_ready_(static_cast<int>(g), r.begin, r.numel());
}

void FlatStage::reduce_over_replicas() {
  std::vector<WorkHandle> works;
  for (GroupBuffers& b : groups_)
    if (b.grad_shard.numel() > 0)
      works.push_back(options_.replica_group->all_reduce(b.grad_shard, ReduceOp::kAvg));
  for (WorkHandle& w : works) w->wait();
  if (!grad_ready_) return;
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].grad_shard.numel() > 0)
      grad_ready_(static_cast<int>(g), 0, groups_[g].grad_shard.numel());
}

void FlatStage::finish_backward() {
  if (reduce_now_) launch_remaining();
  while (!pending_.empty()) finish_pending();
  if (reduce_now_ && boundary_backward_ && options_.replica_group) reduce_over_replicas();
  if (reduce_now_ && boundary_backward_) report_unbucketed();
  in_backward_ = false;
  if (boundary_backward_) implicit_begun_ = 0;
}

void FlatStage::reduce_deferred() {
  ZERO_ASSERT(options_.defer_reduction && !in_backward_ && boundary_backward_,
              "reduce_deferred outside a deferred boundary");
  reduce_now_ = true;
  launch_remaining();
  while (!pending_.empty()) finish_pending();
  report_unbucketed();
  reduce_now_ = false;
}

at::Tensor FlatStage::accumulated_grad(int param) {
  const ParamSlot& ps = layout_.slots()[param];
  const at::Tensor& flat_grad = groups_[ps.group].flat_grad;
  if (!flat_grad.defined()) return {};
  return flat_grad.narrow(0, ps.buffer.begin, ps.buffer.numel());
}

void FlatStage::zero_grad() {
  std::fill(got_grad_.begin(), got_grad_.end(), 0);
  // Only backward writes the gradient buffers: a second zero_grad (after a step, before a load)
  // would fill a full gradient buffer with zeros again for nothing.
  if (grads_zero_) return;
  for (auto& b : groups_) {
    if (b.flat_grad.defined()) b.flat_grad.zero_();
    if (b.grad_shard.defined()) b.grad_shard.zero_();
  }
  grads_zero_ = true;
}

std::vector<int> FlatStage::params_without_grad() const {
  std::vector<int> out;
  for (size_t i = 0; i < got_grad_.size(); ++i)
    if (!got_grad_[i]) out.push_back(static_cast<int>(i));
  return out;
}

OptimizerShard FlatStage::shard_of(int group, const at::Tensor& grad) const {
  const GroupBuffers& b = groups_[group];
  const bool own_master = b.master.defined() && !b.master_is_alias;
  return OptimizerShard{group, b.master, grad, own_master ? b.compute_shard : at::Tensor(),
                        b.compute_shard};
}

void FlatStage::publish_groups(bool sharded_too) {
  if (shared_params_) {  // every rank wrote its shard into the one copy: wait for the others
    comm_->barrier()->wait();
    return;
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    if (sharded_too || !groups_[g].sharded_params) all_gather_shard_into_flat(static_cast<int>(g));
}

void FlatStage::all_gather_shard_into_flat(int group) {
  GroupBuffers& b = groups_[group];
  const Group& g = layout_.groups()[group];
  const BufferRange shard = g.shard(rank_);
  // The optimizer wrote the updated master into `own` (OptimizerShard::param16).
  at::Tensor own = b.sharded_params ? b.param_shard : b.flat.narrow(0, shard.begin, shard.numel());
  if (b.sharded_params) {
    ZERO_ASSERT(storage_allocated(b.flat), "gathering into a released buffer");
    if (world_ == 1)
      b.flat.copy_(own);
    else
      comm_->all_gather(own, b.flat)->wait();
    return;
  }
  if (world_ == 1) return;
  // The own shard is already in place inside the flat buffer: it is the all-gather's input
  // (a collective gathering in place skips copying it), with no staging copy of it.
  const int64_t S = g.shard_numel;
  const int64_t chunk =
      std::min<int64_t>(S, std::max<int64_t>(1, options_.allgather_bucket_numel / world_));
  if (chunk == S) {  // one collective straight into the flat buffer
    comm_->all_gather(own, b.flat)->wait();
    return;
  }
  if (!gather_out_.defined() || gather_out_.numel() < chunk * world_ ||
      gather_out_.scalar_type() != to_scalar_type(g.dtype))
    gather_out_ = at::empty({chunk * world_}, b.flat.options());
  for (int64_t c = 0; c < S; c += chunk) {
    const int64_t n = std::min(chunk, S - c);
    at::Tensor out = gather_out_.narrow(0, 0, n * world_);
    comm_->all_gather(own.narrow(0, c, n), out)->wait();
    for (int r = 0; r < world_; ++r)
      if (r != rank_) b.flat.narrow(0, r * S + c, n).copy_(out.narrow(0, r * n, n));
  }
}

void FlatStage::note_gathered_bytes(int64_t delta) {
  gathered_bytes_ += delta;
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

StageMemory FlatStage::memory() const {
  StageMemory m;
  for (const auto& b : groups_) {
    if (shared_params_)  // one copy for the ranks sharing it: this rank's share
      m.parameters_bytes += b.flat.nbytes() / world_;
    else if (!b.sharded_params)
      m.parameters_bytes += b.flat.nbytes();
    else if (b.param_shard.defined())  // undefined when offloaded (between gathers)
      m.parameters_bytes += b.param_shard.nbytes();
    if (b.flat_grad.defined()) m.gradients_bytes += b.flat_grad.nbytes();
    if (b.grad_shard.defined()) m.gradients_bytes += b.grad_shard.nbytes();
    if (!b.master_is_alias && b.master.defined()) m.master_params_bytes += b.master.nbytes();
  }
  for (const auto& s : slots_) m.comm_buffers_bytes += s.staging.nbytes();
  if (convert_scratch_.defined()) m.comm_buffers_bytes += convert_scratch_.nbytes();
  if (gather_out_.defined()) m.comm_buffers_bytes += gather_out_.nbytes();
  m.gathered_params_bytes = gathered_bytes_;
  m.peak_gathered_params_bytes = peak_gathered_bytes_;
  return m;
}

}  // namespace zero::detail
