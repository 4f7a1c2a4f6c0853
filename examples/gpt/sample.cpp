// gpt::generate: the autoregressive loop over the model's forward, with a private CPU generator.
#include "sample.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/activation.h>

#include <algorithm>

namespace gpt {

std::vector<int64_t> generate(Gpt& model, std::vector<int64_t> prompt, int64_t n,
                              double temperature, uint64_t seed) {
  TORCH_CHECK(!prompt.empty(), "generate: the prompt is empty");
  const bool was_training = model->is_training();
  model->eval();
  at::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto device = model->parameters().front().device();
  const int64_t context = model->config().context;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t begin = std::max<int64_t>(0, static_cast<int64_t>(prompt.size()) - context);
    std::vector<int64_t> window(prompt.begin() + begin, prompt.end());
    at::Tensor tokens = at::tensor(window, at::kLong).view({1, -1}).to(device);
    at::Tensor logits = model->forward(tokens).select(1, -1).squeeze(0).to(at::kFloat).cpu();
    int64_t next = 0;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      at::Tensor probs = at::softmax(logits / temperature, 0);
      next = at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
    }
    prompt.push_back(next);
  }
  if (was_training) model->train();
  return prompt;
}

}  // namespace gpt
