// Whether an autograd node is a zero::checkpoint: its block's parameters are not edges of the
// graph before its backward recomputes the block.
#pragma once

#include <torch/csrc/autograd/function.h>

namespace zero::detail {

bool is_checkpoint_node(const torch::autograd::Node& node);

}  // namespace zero::detail
