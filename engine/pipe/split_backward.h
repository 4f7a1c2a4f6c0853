// zb-h1's backward of one micro-batch in two passes over one autograd graph.
//
// The input pass (B) runs the autograd engine from the stage's root to its input only: just the
// nodes on a path to the input run ("input nodes"), and each computes only the gradients that
// flow toward the input (an addmm or mm skips its weight's matmul, a layer norm its weight's and
// bias's sums). Where an input node also feeds parameters, the gradients it received are kept.
// The weight pass (W) then runs the engine from each such node, with the gradients it kept,
// restricted to the branch behind its other edges: the weight-gradient work B skipped, accumulated
// as a whole backward would, and nothing on the input path again. This is what the zero-bubble
// paper's B/W split means (torch.distributed.pipelining's stage_backward_input/_weight do the
// same in Python).
//
// Where two such branches meet (one parameter used by two operations of a stage), W runs the
// whole backward again from the root instead: correct, at the cost of repeating B.
#pragma once

#include <ATen/Tensor.h>
#include <torch/csrc/autograd/edge.h>

#include <memory>
#include <vector>

namespace zero::pipe {

class SplitBackward {
 public:
  // B: the gradient of `input` (a leaf that requires grad; undefined for the first stage, whose
  // input takes none, and then B does nothing) from `root`, whose gradient is `seed`. The graph
  // is kept for weight_pass.
  at::Tensor input_pass(const at::Tensor& root, const at::Tensor& seed, const at::Tensor& input);
  // W: accumulates the gradients of every other leaf (the parameters), once, freeing the graph.
  void weight_pass();
  // Whether weight_pass runs the whole backward (branches meet, or the stage had no input).
  bool repeats_input_pass() const { return whole_; }

 private:
  struct Branch {
    std::shared_ptr<torch::autograd::Node> node;    // the input node where the branch starts
    std::shared_ptr<std::vector<at::Tensor>> kept;  // the gradients it received in B
    torch::autograd::edge_list ends;                // the branch's leaves (its nodes without edges)
  };
  void plan(const torch::autograd::Edge& root, const torch::autograd::Edge& input);

  torch::autograd::Edge root_;
  at::Tensor seed_;
  std::vector<Branch> branches_;
  bool whole_ = true;
};

}  // namespace zero::pipe
