// The Horovod-style API on real ranks: DistributedOptimizer over SGD/Adam/AdamW/RMSprop/Adagrad
// and a user subclass equals the plain optimizer on the global batch; broadcasts; allreduce.
#include "worker_util.h"

#include <zero/engine/horovod/distributed_optimizer.h>

#include <torch/torch.h>

namespace zero::test {
namespace {

constexpr int64_t kMicro = 2;
constexpr int kSteps = 4;

// A program's own optimizer: p -= lr * g / (1 + |g|), with a step counter in its state.
struct SoftSignOptions : torch::optim::OptimizerCloneableOptions<SoftSignOptions> {
  explicit SoftSignOptions(double lr = 0.01) : lr_(lr) {}
  double get_lr() const override { return lr_; }
  void set_lr(const double lr) override { lr_ = lr; }
  double lr_;
};
class SoftSign : public torch::optim::Optimizer {
 public:
  SoftSign(std::vector<torch::Tensor> params, double lr)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<SoftSignOptions>(lr)) {}
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const double lr = group.options().get_lr();
      for (auto& p : group.params())
        if (p.grad().defined()) p.sub_(lr * p.grad() / (1 + p.grad().abs()));
    }
    return {};
  }
};

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        std::vector<torch::Tensor> params) {
  namespace o = torch::optim;
  if (name == "SGD")
    return std::make_shared<o::SGD>(params, o::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
  if (name == "Adam") return std::make_shared<o::Adam>(params, o::AdamOptions(0.01).eps(1e-3));
  if (name == "AdamW")
    return std::make_shared<o::AdamW>(params, o::AdamWOptions(0.01).eps(1e-3).weight_decay(0.05));
  if (name == "RMSprop")
    return std::make_shared<o::RMSprop>(params, o::RMSpropOptions(0.002).eps(1e-3).momentum(0.5));
  if (name == "Adagrad") return std::make_shared<o::Adagrad>(params, o::AdagradOptions(0.05));
  return std::make_shared<SoftSign>(params, 0.01);
}

// Pass m of step s uses samples [(s * passes + m) * W * micro, ...); rank r its r-th micro part.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int pass, int passes, int world, int rank,
                                              int64_t count) {
  const int64_t global = world * kMicro;
  return samples(11, (step * passes + pass) * global + rank * kMicro, count);
}

Params params_of(Net& net) {
  Params out;
  for (const auto& item : net->named_parameters())
    out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

// One process on the global batch: Horovod sums the passes of a step, averages over ranks.
Params reference(const std::string& name, int passes, int world) {
  Net net(42, 2, /*wrap=*/false);
  auto opt = make_optimizer(name, net->parameters());
  for (int step = 0; step < kSteps; ++step) {
    opt->zero_grad();
    for (int m = 0; m < passes; ++m) {
      auto [x, y] = batch(step, m, passes, world, 0, world * kMicro);
      torch::mse_loss(net->forward(x), y).backward();
    }
    opt->step();
  }
  return params_of(net);
}

void golden(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  for (const std::string name : {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "SoftSign"}) {
    for (int passes : {1, 2}) {
      Net net(42, 2, /*wrap=*/false);
      auto opt = make_optimizer(name, net->parameters());
      DistributedOptions options;
      options.fusion_threshold_bytes = 4096;  // several buckets, launched during backward
      options.backward_passes_per_step = passes;
      if (name == "AdamW") {  // the same options from a ds_config (1024 fp32 elements)
        const std::string ds = zero::detail::str(
            R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": )", passes,
            R"(, "zero_optimization": {"reduce_bucket_size": 1024}})");
        options = DistributedOptions::from_config(parse(ds, world).config);
        EXPECT(options.fusion_threshold_bytes == 4096 &&
                   options.backward_passes_per_step == passes &&
                   options.compression == Compression::kNone,
               "from_config: ", options.fusion_threshold_bytes, " bytes, ",
               options.backward_passes_per_step, " passes");
        const std::string bf16 =
            R"({"train_micro_batch_size_per_gpu": 1, "communication_data_type": "bf16", "zero_optimization": {"reduce_bucket_size": 1024}})";
        const DistributedOptions wire = DistributedOptions::from_config(parse(bf16, world).config);
        EXPECT(wire.fusion_threshold_bytes == 2048 && wire.compression == Compression::kBf16,
               "from_config with bf16 on the wire: ", wire.fusion_threshold_bytes, " bytes");
      }
      DistributedOptimizer dist(opt, *net, options);
      for (int step = 0; step < kSteps; ++step) {
        dist.zero_grad();
        for (int m = 0; m < passes; ++m) {
          auto [x, y] = batch(step, m, passes, world, rank, kMicro);
          torch::mse_loss(net->forward(x), y).backward();
        }
        dist.step();
      }
      const double diff = max_rel_diff(params_of(net), reference(name, passes, world));
      EXPECT(diff < 1e-5, name, " passes=", passes, ": max relative difference ", diff);
      if (rank == 0)
        std::printf("golden %-8s passes=%d world=%d: max rel diff %.3g\n", name.c_str(), passes,
                    world, diff);
    }
  }
}

// Gradients after one averaged backward, against the fp32 average of one process.
void compression(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  Net ref(42, 2, false);
  auto [gx, gy] = batch(0, 0, 1, world, 0, world * kMicro);
  torch::mse_loss(ref->forward(gx), gy).backward();
  for (auto [c, tol, what] : {std::make_tuple(Compression::kFp16, 2e-3, "fp16"),
                              std::make_tuple(Compression::kBf16, 1.6e-2, "bf16")}) {
    Net net(42, 2, false);
    DistributedOptions options;
    options.compression = c;
    DistributedOptimizer dist(make_optimizer("SGD", net->parameters()), *net, options);
    dist.zero_grad();
    auto [x, y] = batch(0, 0, 1, world, rank, kMicro);
    torch::mse_loss(net->forward(x), y).backward();
    dist.synchronize();
    double worst = 0;
    auto mine = net->parameters(), theirs = ref->parameters();
    for (size_t i = 0; i < mine.size(); ++i)
      worst = std::max(worst, rel_diff(mine[i].grad(), theirs[i].grad()));
    EXPECT(worst < tol, what, ": gradient relative difference ", worst, " > ", tol);
    // With one rank nothing travels; with more the 16-bit wire leaves a trace.
    EXPECT(world == 1 || worst > 0, what, ": gradients equal fp32's exactly: no compression?");
    if (rank == 0) std::printf("compression %s world=%d: max rel diff %.3g\n", what, world, worst);
    dist.step();
  }
}

bool same_on_all_ranks(const torch::Tensor& t) {
  const torch::Tensor f = t.detach().to(torch::kFloat);
  return torch::equal(allreduce(f, ReduceOp::kMax), f) &&
         torch::equal(-allreduce(-f, ReduceOp::kMax), f);
}

struct WithBuffersImpl : torch::nn::Module {
  explicit WithBuffersImpl(int seed) {
    register_buffer("count", torch::full({3}, seed, torch::kLong));
    register_buffer("scale", torch::full({2}, seed * 0.25, torch::kDouble));
    register_buffer("mask", torch::full({5}, seed % 2 == 1, torch::kBool));
    register_parameter("w", torch::full({4}, seed * 1.5f));
  }
};
TORCH_MODULE(WithBuffers);

void broadcast(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank(), root = world - 1;
  Net net(100 + rank, 2, false);
  broadcast_parameters(*net, root);
  Net root_net(100 + root, 2, false);
  EXPECT(max_rel_diff(params_of(net), params_of(root_net)) == 0,
         "parameters differ from root's after broadcast_parameters");
  WithBuffers odd(rank + 1);
  broadcast_parameters(*odd, root);
  for (const auto& b : odd->named_buffers())
    EXPECT(torch::equal(b.value(), WithBuffers(root + 1)->named_buffers()[b.key()]), "buffer ",
           b.key(), " differs from root's");

  // Root trains alone for a while; the others' optimizers have no state (or another one).
  auto opt =
      std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < (rank == root ? 3 : rank); ++s) {
    opt->zero_grad();
    auto [x, y] = samples(100 + rank, s * 4, 4);
    torch::mse_loss(net->forward(x), y).backward();
    opt->step();
  }
  if (rank == root) opt->param_groups()[0].options().set_lr(0.0123);
  broadcast_parameters(*net, root);
  broadcast_optimizer_state(*opt, root);
  EXPECT(opt->param_groups()[0].options().get_lr() == 0.0123, "lr ",
         opt->param_groups()[0].options().get_lr(), " is not root's");
  opt->zero_grad();
  auto [x, y] = samples(5, 0, 4);
  torch::mse_loss(net->forward(x), y).backward();
  opt->step();  // equal only if the moments and step counts were broadcast too
  for (const auto& p : net->parameters()) EXPECT(same_on_all_ranks(p), "ranks differ after a step");
}

void allreduce_suite(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  torch::Tensor t = torch::full({2, 3}, static_cast<float>(rank + 1));
  EXPECT(torch::allclose(allreduce(t, ReduceOp::kSum),
                         torch::full({2, 3}, world * (world + 1) / 2.0f)),
         "sum");
  EXPECT(torch::allclose(allreduce(t, ReduceOp::kAvg), torch::full({2, 3}, (world + 1) / 2.0f)),
         "avg");
  EXPECT(torch::equal(allreduce(t, ReduceOp::kMax), torch::full({2, 3}, float(world))), "max");
  EXPECT(torch::equal(t, torch::full({2, 3}, float(rank + 1))), "allreduce changed its input");
}

void baduse(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  auto loss_of = [&](Net& net) {
    auto [x, y] = batch(0, 0, 1, world, rank, kMicro);
    return torch::mse_loss(net->forward(x), y);
  };
  {
    Net net(1, 2, false);
    DistributedOptimizer dist(make_optimizer("SGD", net->parameters()), *net);
    expect_throw<UsageError>("step without backward", "no gradient arrived", [&] { dist.step(); });
    loss_of(net).backward();
    expect_throw<UsageError>("zero_grad before step", "before step()", [&] { dist.zero_grad(); });
    dist.step();
  }
  {
    Net net(1, 2, false);
    DistributedOptions options;
    options.backward_passes_per_step = 2;
    DistributedOptimizer dist(make_optimizer("SGD", net->parameters()), *net, options);
    loss_of(net).backward();
    expect_throw<UsageError>("step after 1 of 2 passes", "after 1 backward pass",
                             [&] { dist.step(); });
    loss_of(net).backward();
    expect_throw<UsageError>("three passes of 2", "more than backward_passes_per_step",
                             [&] { loss_of(net).backward(); });
  }
  {
    Net net(1, 2, false), other(2, 2, false);
    expect_throw<UsageError>("foreign parameters", "not parameters of the model", [&] {
      DistributedOptimizer dist(make_optimizer("SGD", other->parameters()), *net);
    });
  }
}

}  // namespace
}  // namespace zero::test

int main(int argc, char** argv) {
  using namespace zero::test;
  return worker_main(
      argc, argv,
      {{"all",
        [](const std::shared_ptr<zero::Communicator>& comm) {
          for (auto suite : {golden, compression, broadcast, allreduce_suite, baduse}) suite(comm);
        }},
       {"golden", golden},
       {"compression", compression},
       {"broadcast", broadcast},
       {"allreduce", allreduce_suite},
       {"baduse", baduse}});
}
