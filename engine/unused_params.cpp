// zero_optimization.ignore_unused_parameters false: a trainable parameter that took no part in
// any loss of an accumulation window stops the job at the step, on every rank, naming it.
// DeepSpeed makes the same check only at stages 1-2 with offload_optimizer (the assert in its
// complete_grad_norm_calculation_for_cpu_offload); here it holds at every stage, since the key's
// purpose is to catch a model whose forward skips a parameter.
#include "activation/checkpoint_node.h"
#include "engine_impl.h"
#include "save_load/io.h"

#include <zero/error.h>

#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace zero {

std::vector<int> Engine::Impl::params_outside_graph(const at::Tensor& loss) const {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack{
      torch::autograd::impl::gradient_edge(loss).function.get()};
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    // A checkpoint's block joins the graph only when its backward recomputes it: nothing is
    // known to be out of reach.
    if (detail::is_checkpoint_node(*node)) return {};
    for (const torch::autograd::Edge& edge : node->next_edges())
      if (edge.function) stack.push_back(edge.function.get());
  }
  std::vector<int> outside;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto accumulator = torch::autograd::impl::try_get_grad_accumulator(params[i]);
    if (!accumulator || !seen.count(accumulator.get())) outside.push_back(static_cast<int>(i));
  }
  return outside;
}

void Engine::Impl::check_unused_parameters() const {
  const std::vector<int> unused = stage->params_without_grad();
  const int64_t mine = static_cast<int64_t>(unused.size());
  // Unused on one rank only (a data-dependent forward) must stop every rank, not leave the
  // others waiting in the next collective.
  const std::vector<int64_t> counts =
      detail::all_gather_values(*comm, {mine}, params.front().device());
  if (std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c == 0; })) return;
  std::ostringstream msg;
  msg << "step " << global_steps + 1
      << ": zero_optimization.ignore_unused_parameters is false and ";
  if (mine > 0) {
    msg << mine << " trainable parameter(s) got no gradient on rank " << comm->rank()
        << " since the last step: ";
    for (size_t i = 0; i < unused.size() && i < 5; ++i)
      msg << (i ? ", " : "") << "'" << names[unused[i]] << "'";
    if (unused.size() > 5) msg << ", ...";
  } else {
    msg << "trainable parameters got no gradient on rank(s)";
    for (size_t r = 0; r < counts.size(); ++r)
      if (counts[r] > 0) msg << " " << r << " (" << counts[r] << ")";
    msg << " since the last step (their logs name them)";
  }
  msg << ". Make every trainable parameter take part in the loss, freeze the ones that should "
         "not train (requires_grad false before initialize), or set ignore_unused_parameters "
         "true (their gradients then count as zeros)";
  throw UsageError(msg.str());
}

}  // namespace zero
