// The offloaded Adam/AdamW: one pass over the sub-groups per step. Gradients come from host
// copies made while backward ran (cpu) or straight from the stage's shard (nvme, where host
// memory holds only the pipeline's buffers); the updated master goes into the stage's
// compute-dtype shard in the same kernel pass when that shard is host memory, or into the
// parameter store (offload_param) sub-group by sub-group.
#include "grad_copy.h"
#include "state_store.h"

#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>

#include <ATen/ATen.h>

namespace zero::offload {

std::unique_ptr<StateStore> make_nvme_store(const NvmeOptions& options, bool fast_init);

namespace {

bool is_16bit(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16;
}

class OffloadAdam : public ShardOptimizer {
 public:
  OffloadAdam(const OffloadOptimizerOptions& o, std::unique_ptr<StateStore> store)
      : options_(o), store_(std::move(store)) {
    ZERO_CHECK(o.optimizer.kind != OptimizerKind::kSgd, ConfigError,
               "zero_optimization.offload_optimizer: the offloaded optimizer is the CPU "
               "Adam/AdamW (DeepSpeed's DeepSpeedCPUAdam); optimizer.type SGD cannot be offloaded");
  }

  void init_state(const std::vector<OptimizerShard>& shards) override {
    shards_ = shards;
    std::vector<int64_t> numels;
    for (size_t i = 0; i < shards.size(); ++i) {
      const OptimizerShard& s = shards[i];
      ZERO_ASSERT((s.param_store || s.compute.defined()) && s.grad.defined() &&
                      (s.param_store || s.compute.numel() == s.grad.numel()),
                  "offload: shard ", i, " without compute/grad tensors");
      ZERO_ASSERT(!s.master.defined(), "offload: the stage kept a master for shard ", i);
      if (s.group >= static_cast<int>(shard_of_group_.size()))
        shard_of_group_.resize(s.group + 1, -1);
      shard_of_group_[s.group] = static_cast<int>(i);
      numels.push_back(s.grad.numel());
      if (s.param_store) {
        ZERO_ASSERT(!param_store_ || param_store_ == s.param_store,
                    "offload: two parameter stores");
        param_store_ = s.param_store;
      }
    }
    // Sub-groups written into an NVMe parameter store start on its O_DIRECT blocks.
    const int64_t align =
        std::max(kSubGroupAlignNumel, param_store_ ? param_store_->write_align_numel() : 1);
    sub_groups_ = split_sub_groups(numels, options_.sub_group_numel, align);
    copy_grads_ = !options_.nvme;
    grads_.clear();
    ready_numel_.assign(shards.size(), 0);
    if (copy_grads_)
      for (int64_t n : numels)
        grads_.push_back(host_empty(n, at::kFloat, options_.pin_memory).zero_());
    store_->init(numels, sub_groups_, [&](size_t k, const at::Tensor& master) {
      const SubGroup& g = sub_groups_[k];
      const OptimizerShard& s = shards_[g.shard];
      if (!s.param_store) {
        master.copy_(s.compute.narrow(0, g.begin, g.numel));
        return;
      }
      master.copy_(s.param_store->acquire(s.group).narrow(0, g.begin, g.numel));
      s.param_store->release(s.group);
    });
  }

  void step(const std::vector<OptimizerShard>& shards, double lr, int64_t step,
            double grad_scale) override {
    ZERO_ASSERT(shards.size() == shards_.size(), "offload: optimizer state not initialised");
    const kernels::AdamParams p = adam_params(options_.optimizer, lr, step, grad_scale);
    if (copy_grads_) {  // parts the stage did not report (or all, after a skipped step)
      for (size_t i = 0; i < shards.size(); ++i)
        if (ready_numel_[i] != shards[i].grad.numel()) copier_.copy(grads_[i], shards[i].grad);
      copier_.wait();
    }
    for (size_t k = 0; k < sub_groups_.size(); ++k) {
      const SubGroup& g = sub_groups_[k];
      const SubGroupState st = store_->begin(k);
      at::Tensor grad = copy_grads_ ? grads_[g.shard].narrow(0, g.begin, g.numel)
                                    : shards[g.shard].grad.narrow(0, g.begin, g.numel);
      if (!grad.is_cpu()) grad = grad.to(at::kCPU);
      const OptimizerShard& shard = shards[g.shard];
      // Where the updated parameters go: the stage's shard, or the parameter store (offload_param).
      at::Tensor compute;
      if (!shard.param_store) compute = shard.compute.narrow(0, g.begin, g.numel);
      const at::ScalarType dtype =
          shard.param_store ? shard.param_store->dtype() : compute.scalar_type();
      at::Tensor out;  // where the kernel writes the 16-bit parameters
      if (is_16bit(dtype))
        out = compute.defined() && compute.is_cpu() && compute.is_contiguous()
                  ? compute
                  : staging16(dtype, g.numel);
      ZERO_CHECK(adam_step_host(p, st.master, grad, st.exp_avg, st.exp_avg_sq, out), UsageError,
                 "offload: sub-group ", k, " cannot run on the CPU Adam (gradients of dtype ",
                 grad.scalar_type(), ")");
      if (shard.param_store)
        shard.param_store->write(shard.group, g.begin, out.defined() ? out : st.master);
      else if (!out.defined())
        compute.copy_(st.master);
      else if (!out.is_same(compute))
        compute.copy_(out);
      store_->end(k);
    }
    store_->finish();
    if (param_store_) param_store_->flush();
    drop_gradients();
  }

  bool wants_grad_copies() const override { return copy_grads_; }
  void grad_ready(int group, int64_t begin, int64_t numel) override {
    const int i = shard_of_group_.at(group);
    ZERO_ASSERT(i >= 0, "offload: no shard for group ", group);
    copier_.copy(grads_[i].narrow(0, begin, numel), shards_[i].grad.narrow(0, begin, numel));
    ready_numel_[i] += numel;
  }
  void drop_gradients() override {
    copier_.wait();
    std::fill(ready_numel_.begin(), ready_numel_.end(), 0);
  }

  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<at::Tensor> state(size_t shard) const override {
    const SubGroupState s = store_->shard_state(shard);
    return {s.exp_avg, s.exp_avg_sq};
  }
  at::Tensor master(size_t shard) const override { return store_->shard_state(shard).master; }
  // A checkpoint load wrote the masters (and moments): store them and refresh the parameters.
  void masters_changed() override {
    for (size_t i = 0; i < shards_.size(); ++i) {
      const OptimizerShard& s = shards_[i];
      const at::Tensor master = store_->shard_state(i).master;
      if (s.param_store)
        s.param_store->write(s.group, 0, master.to(s.param_store->dtype()));
      else
        s.compute.copy_(master);
    }
    if (param_store_) param_store_->flush();
    store_->commit();
  }
  int64_t state_bytes() const override { return 0; }  // none on the device: offload_memory()
  bool set_betas(double beta1, double beta2) override {
    options_.optimizer.beta1 = beta1;
    options_.optimizer.beta2 = beta2;
    return true;
  }
  OffloadMemory offload_memory() const override {
    OffloadMemory m = store_->memory();
    for (const auto& g : grads_) m.host_grads_bytes += g.nbytes();
    if (staging16_.defined()) m.host_buffers_bytes += staging16_.nbytes();
    return m;
  }
  std::string location() const override { return store_->location(); }

 private:
  // A host buffer for the 16-bit parameters of a sub-group whose shard is not host memory.
  at::Tensor staging16(at::ScalarType dtype, int64_t numel) {
    if (!staging16_.defined() || staging16_.numel() < numel || staging16_.scalar_type() != dtype)
      staging16_ = host_empty(numel, dtype, options_.pin_memory);
    return staging16_.narrow(0, 0, numel);
  }

  OffloadOptimizerOptions options_;
  std::unique_ptr<StateStore> store_;
  std::vector<OptimizerShard> shards_;
  std::vector<int> shard_of_group_;
  ParamStore* param_store_ = nullptr;  // stage 3 offload_param: where the parameters are
  std::vector<SubGroup> sub_groups_;
  bool copy_grads_ = true;
  std::vector<at::Tensor> grads_;  // fp32 host copies of the gradient shards (cpu)
  std::vector<int64_t> ready_numel_;
  GradCopier copier_;  // the copies into grads_ (a copy stream on a GPU)
  at::Tensor staging16_;
};

}  // namespace

std::unique_ptr<ShardOptimizer> make_offload_optimizer(const OffloadOptimizerOptions& options) {
  std::unique_ptr<StateStore> store = options.nvme
                                          ? make_nvme_store(options.nvme_options, options.fast_init)
                                          : make_host_store(options.pin_memory);
  return std::make_unique<OffloadAdam>(options, std::move(store));
}

}  // namespace zero::offload
