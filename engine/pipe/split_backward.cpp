// SplitBackward: the graph walk that finds the input nodes and their weight branches, and the
// two engine passes of split_backward.h.
#include "pipe/split_backward.h"

#include <zero/error.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace zero::pipe {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Keeps the gradients a node receives (all its inputs, as the engine hands them over).
struct KeepGradients : torch::autograd::FunctionPreHook {
  explicit KeepGradients(std::shared_ptr<variable_list> into) : into_(std::move(into)) {}
  variable_list operator()(const variable_list& grads) override {
    *into_ = grads;
    return grads;
  }
  std::shared_ptr<variable_list> into_;
};

// Every node reachable from `from` through next edges, `from` first; iterative (graphs of deep
// models are thousands of nodes long).
std::vector<Node*> reachable(Node* from) {
  std::vector<Node*> order, todo{from};
  std::unordered_set<Node*> seen{from};
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges())
      if (e.function && seen.insert(e.function.get()).second) todo.push_back(e.function.get());
  }
  return order;
}

// Whether each node reachable from `root` has a path to `target` (target itself included).
std::unordered_map<Node*, bool> reaches(Node* root, Node* target) {
  std::unordered_map<Node*, bool> memo;
  // Post-order without recursion: a node is decided once all its children are.
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  memo[root] = root == target;
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    const edge_list& edges = n->next_edges();
    if (next < edges.size()) {
      Node* child = edges[next++].function.get();
      if (child && !memo.count(child)) {
        memo[child] = child == target;
        stack.emplace_back(child, 0);
      }
      continue;
    }
    bool on = n == target;
    for (const Edge& e : edges)
      if (e.function && memo.at(e.function.get())) on = true;
    memo[n] = on;
    stack.pop_back();
  }
  return memo;
}

}  // namespace

void SplitBackward::plan(const Edge& root, const Edge& input) {
  Node* target = input.function.get();
  const std::unordered_map<Node*, bool> on_input = reaches(root.function.get(), target);
  ZERO_ASSERT(on_input.at(root.function.get()),
              "split backward: the root does not reach the input");
  // Which branch owns each node off the input path; a node two branches reach means they meet.
  std::unordered_map<Node*, size_t> owner;
  // Branches in the order a whole backward reaches them (latest operation first): each sums
  // into leaves of its own, so the order only makes the runs alike.
  std::vector<Node*> starts;
  for (const auto& [node, on] : on_input)
    if (on && node != target) starts.push_back(node);
  std::sort(starts.begin(), starts.end(),
            [](Node* a, Node* b) { return a->sequence_nr() > b->sequence_nr(); });
  for (Node* node : starts) {
    Branch branch;
    for (const Edge& e : node->next_edges()) {
      if (!e.function || on_input.at(e.function.get())) continue;
      for (Node* n : reachable(e.function.get())) {
        auto [it, fresh] = owner.emplace(n, branches_.size());
        if (!fresh) {
          if (it->second == branches_.size()) continue;  // two edges of this node into one branch
          branches_.clear();
          return;  // branches meet: whole_ stays true
        }
        if (n->next_edges().empty()) branch.ends.emplace_back(n->shared_from_this(), 0);
      }
    }
    if (branch.ends.empty()) continue;
    branch.node = node->shared_from_this();
    branch.kept = std::make_shared<variable_list>();
    branches_.push_back(std::move(branch));
  }
  whole_ = false;
}

at::Tensor SplitBackward::input_pass(const at::Tensor& root, const at::Tensor& seed,
                                     const at::Tensor& input) {
  root_ = torch::autograd::impl::gradient_edge(root);
  seed_ = seed;
  whole_ = true;
  branches_.clear();
  if (!input.defined() || !input.requires_grad()) return {};
  const Edge input_edge = torch::autograd::impl::gradient_edge(input);
  plan(root_, input_edge);
  for (Branch& b : branches_) b.node->add_pre_hook(std::make_unique<KeepGradients>(b.kept));
  at::Tensor grad;
  try {
    grad = torch::autograd::Engine::get_default_engine().execute(
        {root_}, {seed_}, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false,
        {input_edge})[0];
  } catch (...) {
    for (Branch& b : branches_) b.node->pre_hooks().pop_back();
    throw;
  }
  for (Branch& b : branches_) {
    b.node->pre_hooks().pop_back();      // ours, added last: the engine adds none while running
    if (b.kept->empty()) whole_ = true;  // not run in B (cannot happen on the input path)
  }
  if (whole_) branches_.clear();
  return grad;
}

void SplitBackward::weight_pass() {
  auto& engine = torch::autograd::Engine::get_default_engine();
  if (whole_) {
    engine.execute({root_}, {seed_}, /*keep_graph=*/false, /*create_graph=*/false,
                   /*accumulate_grad=*/true, {});
  } else {
    // One engine run per branch: with several roots the engine would also run the input nodes
    // between them, on the way to the branches further back.
    for (Branch& b : branches_) {
      edge_list roots;
      variable_list grads;
      for (size_t i = 0; i < b.kept->size(); ++i)
        if ((*b.kept)[i].defined()) {
          roots.emplace_back(b.node, static_cast<uint32_t>(i));
          grads.push_back((*b.kept)[i]);
        }
      if (roots.empty()) continue;
      engine.execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                     /*accumulate_grad=*/true, b.ends);
    }
  }
  branches_.clear();
  root_ = Edge();
  seed_ = at::Tensor();
}

}  // namespace zero::pipe
