// SplitBackward (zb-h1's B and W passes) against one whole backward of the same graph: the same
// gradients bit for bit, parameters untouched by B, and W not running the input path again
// (a counting operation on that path runs once), or running all of it where branches meet.
#include "pipe/split_backward.h"

#include <torch/torch.h>

#include "catch_after_torch.h"

namespace {

// The identity, counting its backward runs: a node on the path to the stage's input.
struct Counted : torch::autograd::Function<Counted> {
  static int backwards;
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) {
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    ++backwards;
    return grads;
  }
};
int Counted::backwards = 0;

struct Net {
  torch::nn::Linear first{torch::nn::LinearOptions(6, 8)};
  torch::nn::LayerNorm norm{torch::nn::LayerNormOptions({8})};
  torch::nn::Linear second{torch::nn::LinearOptions(8, 3)};
  bool shared = false;  // the first layer used twice (its weight in two branches)

  Net() {
    torch::manual_seed(3);
    first = torch::nn::Linear(torch::nn::LinearOptions(6, 8));
    norm = torch::nn::LayerNorm(torch::nn::LayerNormOptions({8}));
    second = torch::nn::Linear(torch::nn::LinearOptions(8, 3));
  }
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> out;
    for (const auto& m : {first->parameters(), norm->parameters(), second->parameters()})
      out.insert(out.end(), m.begin(), m.end());
    return out;
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = Counted::apply(torch::gelu(first->forward(x)));
    if (shared) h = first(torch::tanh(h).narrow(1, 0, 6)) + h;
    return second->forward(norm->forward(h)).pow(2).sum();
  }
  void zero_grad() const {
    for (at::Tensor p : parameters()) p.mutable_grad() = at::Tensor();
  }
};

at::Tensor input_of(bool grad) {
  torch::manual_seed(5);
  return torch::randn({4, 6}).requires_grad_(grad);
}

// Each parameter's gradient and the input's, from one whole backward.
std::vector<at::Tensor> whole_backward(Net& net, bool input_grad) {
  net.zero_grad();
  at::Tensor x = input_of(input_grad);
  net.forward(x).backward();
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : net.parameters()) out.push_back(p.grad().clone());
  if (input_grad) out.push_back(x.grad().clone());
  return out;
}

// The parameters' gradients, then `input_grad` when defined.
std::vector<at::Tensor> grads_of(const Net& net, const at::Tensor& input_grad = {}) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : net.parameters()) out.push_back(p.grad());
  if (input_grad.defined()) out.push_back(input_grad);
  return out;
}

void check_bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i);
    REQUIRE(a[i].defined());
    CHECK(at::equal(a[i], b[i]));
  }
}

// One micro-batch's forward and input pass on `net`, after the whole backward's gradients were
// taken as the expectation.
struct InputPassed {
  std::vector<at::Tensor> expected;
  zero::pipe::SplitBackward split;
  at::Tensor root, grad;
  explicit InputPassed(Net& net) : expected(whole_backward(net, true)) {
    net.zero_grad();
    at::Tensor x = input_of(true);
    root = net.forward(x);
    Counted::backwards = 0;
    grad = split.input_pass(root, at::ones_like(root), x);
  }
};

}  // namespace

TEST_CASE("B gives the input's gradient alone, W the parameters' without the input path") {
  Net net;
  InputPassed run(net);
  CHECK(Counted::backwards == 1);
  CHECK_FALSE(run.split.repeats_input_pass());
  for (const at::Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
  run.split.weight_pass();
  CHECK(Counted::backwards == 1);  // the input path ran once, in B
  check_bitwise(grads_of(net, run.grad), run.expected);
}

TEST_CASE("a parameter in two branches: W runs the whole backward, with the same gradients") {
  Net net;
  net.shared = true;
  InputPassed run(net);
  CHECK(run.split.repeats_input_pass());
  run.split.weight_pass();
  CHECK(Counted::backwards == 2);
  check_bitwise(grads_of(net, run.grad), run.expected);
}

TEST_CASE("the first stage's input takes no gradient: B does nothing, W is the backward") {
  Net net;
  const std::vector<at::Tensor> expected = whole_backward(net, false);
  net.zero_grad();
  at::Tensor root = net.forward(input_of(false));
  zero::pipe::SplitBackward split;
  Counted::backwards = 0;
  CHECK_FALSE(split.input_pass(root, at::ones_like(root), at::Tensor()).defined());
  CHECK(Counted::backwards == 0);
  split.weight_pass();
  CHECK(Counted::backwards == 1);
  check_bitwise(grads_of(net), expected);
}

TEST_CASE("gradients accumulate over micro-batches as a whole backward's do") {
  Net net;
  net.zero_grad();
  for (int i = 0; i < 2; ++i) net.forward(input_of(true) * (i + 1)).backward();
  std::vector<at::Tensor> expected;
  for (const at::Tensor& p : net.parameters()) expected.push_back(p.grad().clone());
  net.zero_grad();
  std::vector<zero::pipe::SplitBackward> splits(2);
  std::vector<at::Tensor> roots;
  for (int i = 0; i < 2; ++i) {  // both B passes first, then both W, as zb-h1 orders them
    at::Tensor x = (input_of(true) * (i + 1)).detach().requires_grad_(true);
    roots.push_back(net.forward(x));
    splits[i].input_pass(roots[i], at::ones_like(roots[i]), x);
  }
  for (auto& s : splits) s.weight_pass();
  check_bitwise(grads_of(net), expected);
}
