// CleanNames: the wrappers' `inner` segments go, a user's own `inner` stays, nested wrappers
// lose both segments, and the result matches the unwrapped model's own names.
#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/clean_names.h>
#include <zero/engine/sharded.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "catch_after_torch.h"

#include <string>
#include <vector>

namespace {

// A block that has a child of its own called `inner`.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    inner = register_module("inner", torch::nn::Linear(3, 3));
    out = register_module("out", torch::nn::Linear(3, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(inner(x)); }
  torch::nn::Linear inner{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

// Three blocks: plain, in Sharded, in Sharded(Checkpointed(...)); or all plain.
struct ModelImpl : torch::nn::Module {
  explicit ModelImpl(bool wrap) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    blocks->push_back(Block());
    if (wrap) {
      blocks->push_back(zero::Sharded(Block()));
      blocks->push_back(zero::Sharded(zero::Checkpointed(Block())));
    } else {
      blocks->push_back(Block());
      blocks->push_back(Block());
    }
  }
  torch::nn::ModuleList blocks;
};
TORCH_MODULE(Model);

std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  return out;
}

}  // namespace

TEST_CASE("clean names drop exactly the wrappers' segments") {
  Model wrapped(true), plain(false);
  const zero::CleanNames clean(*wrapped);
  CHECK(clean("blocks.0.inner.weight") == "blocks.0.inner.weight");  // the user's own `inner`
  CHECK(clean("blocks.1.inner.inner.weight") == "blocks.1.inner.weight");
  CHECK(clean("blocks.2.inner.inner.inner.bias") == "blocks.2.inner.bias");
  CHECK(clean("blocks.2.inner.inner.out.bias") == "blocks.2.out.bias");
  CHECK(clean.all(names_of(*wrapped)) == names_of(*plain));
}

TEST_CASE("a model without wrappers keeps every name") {
  Model plain(false);
  const zero::CleanNames clean(*plain);
  CHECK(clean.all(names_of(*plain)) == names_of(*plain));
}

TEST_CASE("two names that become one are an error naming both") {
  Model wrapped(true);
  const zero::CleanNames clean(*wrapped);
  try {
    clean.all({"blocks.1.inner.out.bias", "blocks.1.out.bias"});
    FAIL("no error");
  } catch (const zero::UsageError& e) {
    const std::string what = e.what();
    CHECK(what.find("blocks.1.inner.out.bias") != std::string::npos);
    CHECK(what.find("'blocks.1.out.bias'") != std::string::npos);
  }
}
