// The GPT example's model and data without the engine: tokenizer round trip, per-rank batches
// that tile the global batch, causal attention, tied head, and a plain AdamW run whose loss falls.
#include <ATen/Parallel.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include "data.h"
#include "model.h"

#include "catch_after_torch.h"

namespace {
const std::string& corpus() {
  static const std::string text = gpt::read_text_file(ZERO_GPT_DATA);
  return text;
}
}  // namespace

TEST_CASE("CharTokenizer: shipped corpus vocabulary and round trip") {
  const gpt::CharTokenizer tok(corpus());
  CHECK(corpus().size() > 200000);
  CHECK(tok.vocab_size() == 72);
  const std::string sample = corpus().substr(1000, 500);
  CHECK(tok.decode(tok.encode(sample)) == sample);
  CHECK_THROWS(tok.encode("\x01"));
  CHECK_THROWS(tok.decode({72}));
}

TEST_CASE("TextDataset: deterministic, rank parts tile the global batch for any world size") {
  const gpt::CharTokenizer tok(corpus());
  const auto tokens = tok.encode(corpus());
  const gpt::TextDataset data(tokens, 32, 7);
  const int64_t micro = 3, accumulation = 2;

  const auto one = data.batch(5, 1, 0, 1, micro, accumulation);  // world 1: rows 3..5 of 6
  CHECK(one.tokens.sizes() == at::IntArrayRef({3, 32}));
  CHECK(at::equal(one.tokens, data.batch(5, 1, 0, 1, micro, accumulation).tokens));
  CHECK(!at::equal(one.tokens, data.batch(6, 1, 0, 1, micro, accumulation).tokens));
  // targets are the tokens shifted by one
  CHECK(at::equal(one.tokens.narrow(1, 1, 31), one.targets.narrow(1, 0, 31)));

  // World 3: the union over (micro step, rank) is the global batch, in order.
  const auto global = data.rows(data.global_offsets(5, micro * accumulation * 3));
  std::vector<at::Tensor> parts;
  for (int64_t m = 0; m < accumulation; ++m)
    for (int r = 0; r < 3; ++r) parts.push_back(data.batch(5, m, r, 3, micro, accumulation).tokens);
  CHECK(at::equal(at::cat(parts), global.tokens));
  CHECK_THROWS(data.batch(5, 0, 3, 3, micro, accumulation));
}

TEST_CASE("Gpt: shapes, causality, tied head, block wrapping") {
  torch::manual_seed(0);
  gpt::GptConfig c;
  c.vocab_size = 11;
  c.context = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  gpt::Gpt model(c);
  // wte 11x16, wpe 8x16, per block 2 LN (2*32) + qkv (16*48+48) + proj (16*16+16) + fc (16*64+64)
  // + fc_proj (64*16+16), final LN 32; no separate head.
  const int64_t block = 64 + 816 + 272 + 1088 + 1040;
  CHECK(gpt::count_parameters(*model) == 176 + 128 + 2 * block + 32);

  auto tokens = at::randint(0, 11, {2, 8}, at::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == at::IntArrayRef({2, 8, 11}));
  auto changed = tokens.clone();
  changed.select(1, 7).copy_((tokens.select(1, 7) + 1) % 11);  // every row's last token
  auto logits2 = model->forward(changed);
  CHECK(at::allclose(logits.narrow(1, 0, 7),
                     logits2.narrow(1, 0, 7)));  // earlier positions unaffected
  CHECK(!at::allclose(logits.narrow(1, 7, 1), logits2.narrow(1, 7, 1)));

  int wrapped = 0;
  model->wrap_blocks([&](torch::nn::AnyModule block) {
    ++wrapped;
    return block;
  });
  CHECK(wrapped == 2);
  CHECK(at::allclose(model->forward(tokens), logits));
  CHECK(gpt::count_parameters(*model) == 176 + 128 + 2 * block + 32);
}

TEST_CASE("Gpt + plain AdamW on the corpus: the loss falls") {
  at::set_num_threads(1);
  torch::manual_seed(1);
  const gpt::CharTokenizer tok(corpus());
  const gpt::TextDataset data(tok.encode(corpus()), 32, 3);
  gpt::GptConfig c;
  c.vocab_size = tok.vocab_size();
  c.context = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 64;
  gpt::Gpt model(c);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  double first = 0, last = 0;
  const int steps = 200;
  for (int s = 0; s < steps; ++s) {
    const auto b = data.batch(s, 0, 0, 1, 16, 1);
    opt.zero_grad();
    auto loss = model->loss(b.tokens, b.targets);
    loss.backward();
    opt.step();
    if (s == 0) first = loss.item<double>();
    if (s >= steps - 10) last += loss.item<double>() / 10;
  }
  INFO("first loss " << first << ", mean of the last 10 " << last);
  CHECK(first > 4.0);  // ~ln(72) = 4.28 at initialization
  CHECK(last < 2.85);  // the corpus' unigram entropy is 3.04 nats: it learned to use the context
}
