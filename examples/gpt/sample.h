// Text generation from the trained GPT: continues a prompt one character at a time, greedily
// or by sampling from a generator of its own seed (the training's random stream is untouched).
#pragma once

#include <cstdint>
#include <vector>

#include "model.h"

namespace gpt {

// Appends n tokens to `prompt` (at least one token), each predicted from the last
// config().context tokens; temperature 0 takes the most likely token. Runs in evaluation mode
// without autograd and restores the training mode. Under ZeRO stage 3 every rank must call it
// (the forward gathers parameters).
std::vector<int64_t> generate(Gpt& model, std::vector<int64_t> prompt, int64_t n,
                              double temperature, uint64_t seed);

}  // namespace gpt
