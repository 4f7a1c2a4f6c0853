// One rank of the tensor-parallel layer tests (started by zerorun): --tp T over a world of
// W ranks (the tensor groups of the grid; W / T data replicas run the same checks). Each
// layer against the plain LibTorch layer it splits, built under the same seed: forward values,
// the input's gradient and every parameter's gradient equal to this rank's slice of the whole.
#include <zero/comm/parallel_grid.h>
#include <zero/comm/process_group.h>
#include <zero/error.h>
#include <zero/tp/layers.h>
#include <zero/tp/mappings.h>
#include <zero/tp/random.h>

#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <ATen/ATen.h>

#include <iostream>
#include <string>

using namespace zero;

namespace {

int g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) throw std::runtime_error("check failed: " + what);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ++g_checks;
  if (got.sizes() != want.sizes() || !at::allclose(got, want, 1e-5, 1e-6)) {
    const double diff = got.sizes() == want.sizes() ? (got - want).abs().max().item<double>() : -1;
    throw std::runtime_error("check failed: " + what + " (max |diff| " + std::to_string(diff) +
                             ")");
  }
}

at::Tensor rows(const at::Tensor& t, int rank, int parts) {
  return t.narrow(0, rank * (t.size(0) / parts), t.size(0) / parts);
}
at::Tensor cols(const at::Tensor& t, int rank, int parts) {
  return t.narrow(-1, rank * (t.size(-1) / parts), t.size(-1) / parts);
}

// Column -> gelu -> Row, Megatron's MLP, against Linear -> gelu -> Linear.
void check_mlp(const std::shared_ptr<Communicator>& g) {
  const int r = g->rank(), t = g->world_size();
  at::manual_seed(1234);
  torch::nn::Linear a(16, 32), b(32, 8);
  at::manual_seed(1234);
  tp::ColumnParallelLinear col(tp::ColumnParallelLinearOptions(16, 32), g);
  tp::RowParallelLinear row(tp::RowParallelLinearOptions(32, 8), g);
  expect(at::equal(col->weight, rows(a->weight, r, t)), "column weight is the whole layer's slice");
  expect(at::equal(row->weight, cols(b->weight, r, t)), "row weight is the whole layer's slice");
  expect(at::equal(row->bias, b->bias), "row bias is replicated");

  at::manual_seed(7);
  const at::Tensor x0 = at::randn({4, 3, 16});
  at::Tensor x_ref = x0.clone().requires_grad_(), x_tp = x0.clone().requires_grad_();
  const at::Tensor y_ref = b(torch::nn::functional::gelu(a(x_ref)));
  const at::Tensor y_tp = row(torch::nn::functional::gelu(col(x_tp)));
  expect_close(y_tp, y_ref, "MLP forward");
  (y_ref * y_ref).sum().backward();
  (y_tp * y_tp).sum().backward();
  expect_close(x_tp.grad(), x_ref.grad(), "MLP input gradient");
  expect_close(col->weight.grad(), rows(a->weight.grad(), r, t), "column weight gradient");
  expect_close(col->bias.grad(), rows(a->bias.grad(), r, t), "column bias gradient");
  expect_close(row->weight.grad(), cols(b->weight.grad(), r, t), "row weight gradient");
  expect_close(row->bias.grad(), b->bias.grad(), "row bias gradient");
  expect(col->split_parameters().size() == 2 && row->split_parameters().size() == 1,
         "split parameters: column weight and bias, row weight only");

  // gather_output and a whole input to the row layer.
  at::manual_seed(1234);
  tp::ColumnParallelLinear gathered(tp::ColumnParallelLinearOptions(16, 32).gather_output(true), g);
  tp::RowParallelLinear whole_in(tp::RowParallelLinearOptions(32, 8).input_is_parallel(false), g);
  const at::Tensor h = gathered(x0);
  expect_close(h, a(x0), "column gather_output forward");
  expect_close(whole_in(h), b(h), "row layer with a whole input");
}

// A fused QKV (stride 3): rank r holds q, k and v's r-th parts, so its output is its heads'
// q, k and v side by side; init_from_whole draws what normal_ on the whole weight draws.
void check_strided(const std::shared_ptr<Communicator>& g) {
  const int r = g->rank(), t = g->world_size();
  const int64_t width = 8 * t;
  at::manual_seed(77);
  torch::nn::Linear qkv(width, 3 * width);
  at::manual_seed(77);
  tp::ColumnParallelLinear col(tp::ColumnParallelLinearOptions(width, 3 * width).stride(3), g);
  auto blocks = [&](const at::Tensor& whole) {  // q_r, k_r, v_r along the last dimension
    std::vector<at::Tensor> parts;
    for (const at::Tensor& block : whole.split(width, -1)) parts.push_back(cols(block, r, t));
    return at::cat(parts, -1);
  };
  expect(at::equal(col->weight, blocks(qkv->weight.t()).t()), "strided weight: q, k, v rows");
  const at::Tensor x = at::randn({2, 3, width});
  expect_close(col(x), blocks(qkv(x)), "strided forward: this rank's q, k and v columns");
  at::manual_seed(77);
  tp::ColumnParallelLinear gathered(
      tp::ColumnParallelLinearOptions(width, 3 * width).stride(3).gather_output(true), g);
  expect_close(gathered(x), qkv(x), "strided gather_output: the whole layer's output");
  const auto split = col->split_parameters();
  expect(split.size() == 2 && split[0].stride == 3 && split[0].dim == 0, "split stride 3, dim 0");
  expect(at::equal(tp::slice_of_whole(qkv->weight, 0, 3, r, t), col->weight),
         "slice_of_whole undoes the stride");

  at::manual_seed(5);
  const at::Tensor drawn = at::empty_like(qkv->weight).normal_(0.0, 0.02);
  at::manual_seed(5);
  tp::init_from_whole(split[0], *g, [](at::Tensor& w) { w.normal_(0.0, 0.02); });
  expect(at::equal(col->weight, blocks(drawn.t()).t()),
         "init_from_whole: the slice of the whole weight's draws");
}

// Sequence parallelism on [batch, sequence, width] (sequence_dim 1): LayerNorm on this rank's
// part of the sequence -> Column (all-gathers it) -> gelu -> Row (reduce-scatters it), against
// the plain layers on the whole sequence: this rank's part of the output and of the input's
// gradient, and every parameter's gradient (the LayerNorm's and the Row bias summed).
void check_sequence_parallel(const std::shared_ptr<Communicator>& g) {
  const int r = g->rank(), t = g->world_size();
  const int64_t seq = 4 * t;
  at::manual_seed(4321);
  torch::nn::LayerNorm norm_ref(torch::nn::LayerNormOptions({16}));
  torch::nn::Linear a(16, 32), b(32, 16);
  at::manual_seed(4321);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({16}));
  tp::sum_gradients_over_tensor_group(*norm, g);
  tp::ColumnParallelLinear col(
      tp::ColumnParallelLinearOptions(16, 32).sequence_parallel(true).sequence_dim(1), g);
  tp::RowParallelLinear row(
      tp::RowParallelLinearOptions(32, 16).sequence_parallel(true).sequence_dim(1), g);
  {  // the LayerNorm's affine parameters start at 1 and 0: give them values that matter
    at::NoGradGuard no_grad;
    at::manual_seed(11);
    norm_ref->weight.normal_();
    norm_ref->bias.normal_();
    norm->weight.copy_(norm_ref->weight);
    norm->bias.copy_(norm_ref->bias);
  }
  at::manual_seed(8);
  const at::Tensor x0 = at::randn({2, seq, 16});
  at::Tensor x_ref = x0.clone().requires_grad_();
  at::Tensor x_tp = x0.narrow(1, r * 4, 4).clone().requires_grad_();
  const at::Tensor y_ref = b(torch::nn::functional::gelu(a(norm_ref(x_ref))));
  const at::Tensor y_tp = row(torch::nn::functional::gelu(col(norm(x_tp))));
  expect_close(y_tp, y_ref.narrow(1, r * 4, 4), "sequence-parallel forward: this rank's part");
  (y_ref * y_ref).sum().backward();
  (y_tp * y_tp).sum().backward();  // the ranks' parts sum to the whole loss
  expect_close(x_tp.grad(), x_ref.grad().narrow(1, r * 4, 4), "sequence-parallel input gradient");
  expect_close(col->weight.grad(), rows(a->weight.grad(), r, t), "SP column weight gradient");
  expect_close(col->bias.grad(), rows(a->bias.grad(), r, t), "SP column bias gradient");
  expect_close(row->weight.grad(), cols(b->weight.grad(), r, t), "SP row weight gradient");
  expect_close(row->bias.grad(), b->bias.grad(), "SP row bias gradient (summed)");
  expect_close(norm->weight.grad(), norm_ref->weight.grad(), "SP LayerNorm weight gradient");
  expect_close(norm->bias.grad(), norm_ref->bias.grad(), "SP LayerNorm bias gradient");
  // scatter_to_sequence_region: this rank's part; its gradient all-gathers the parts.
  at::Tensor whole = x0.clone().requires_grad_();
  const at::Tensor part = tp::scatter_to_sequence_region(whole, g, 1);
  expect(at::equal(part, x0.narrow(1, r * 4, 4)), "scatter_to_sequence_region keeps this part");
  (part * (r + 1)).sum().backward();
  at::Tensor want = at::empty_like(x0);
  for (int q = 0; q < t; ++q) want.narrow(1, q * 4, 4).fill_(q + 1);
  expect(at::equal(whole.grad(), want), "scatter_to_sequence_region's gradient gathers the parts");
  if (t > 1) {
    try {
      tp::RowParallelLinear bad(
          tp::RowParallelLinearOptions(32, 16).sequence_parallel(true).input_is_parallel(false), g);
      expect(false, "RowParallelLinear refuses sequence_parallel without input_is_parallel");
    } catch (const UsageError& e) {
      expect(std::string(e.what()).find("needs input_is_parallel") != std::string::npos, e.what());
    }
  }
}

void check_embedding_and_loss(const std::shared_ptr<Communicator>& g) {
  const int r = g->rank(), t = g->world_size();
  const int64_t vocab = 24, dim = 6;
  at::manual_seed(99);
  torch::nn::Embedding ref(vocab, dim);
  at::manual_seed(99);
  tp::VocabParallelEmbedding emb(vocab, dim, g);
  expect(at::equal(emb->weight, rows(ref->weight, r, t)), "embedding rows are the whole's slice");
  at::manual_seed(5);
  const at::Tensor ids = at::randint(vocab, {3, 5}, at::kLong);
  const at::Tensor w = at::randn({3, 5, dim});
  const at::Tensor e_ref = ref(ids), e_tp = emb(ids);
  expect_close(e_tp, e_ref, "embedding forward");
  (e_ref * w).sum().backward();
  (e_tp * w).sum().backward();
  expect_close(emb->weight.grad(), rows(ref->weight.grad(), r, t), "embedding gradient");

  const at::Tensor logits0 = at::randn({3, 5, vocab}) * 4;
  const at::Tensor target = at::randint(vocab, {3, 5}, at::kLong);
  const at::Tensor weights = at::rand({3, 5});
  at::Tensor z_ref = logits0.clone().requires_grad_();
  at::Tensor z_tp = cols(logits0, r, t).clone().requires_grad_();
  const at::Tensor l_ref =
      at::cross_entropy_loss(z_ref.view({-1, vocab}), target.view({-1}), {}, at::Reduction::None)
          .view({3, 5});
  const at::Tensor l_tp = tp::vocab_parallel_cross_entropy(z_tp, target, g);
  expect_close(l_tp, l_ref, "vocab-parallel cross entropy");
  (l_ref * weights).sum().backward();
  (l_tp * weights).sum().backward();
  expect_close(z_tp.grad(), cols(z_ref.grad(), r, t), "vocab-parallel cross entropy gradient");
}

// The model-parallel RNG: tracker draws differ across tensor ranks and leave the default
// generator where it was; a saved state replays the same mask; no seed is a clear error.
void check_rng(const std::shared_ptr<Communicator>& g) {
  const int t = g->world_size();
  tp::RngTracker unseeded;
  try {
    unseeded.fork(at::kCPU, [] { return at::rand({1}); });
    expect(false, "an unseeded tracker refuses to fork");
  } catch (const UsageError& e) {
    expect(std::string(e.what()).find("has no seed") != std::string::npos, e.what());
  }
  tp::rng_tracker().seed(1234, g->rank());
  at::manual_seed(5);
  const at::Tensor ones = at::ones({256});
  const tp::RngTracker::State before = tp::rng_tracker().state();
  const at::Tensor mask = tp::dropout(ones, 0.5, /*training=*/true).ne(0).to(at::kFloat);
  const at::Tensor after_fork = at::rand({8});
  at::manual_seed(5);
  expect(at::equal(at::rand({8}), after_fork), "fork leaves the default generator's draws alone");
  tp::rng_tracker().set_state(before);
  expect(at::equal(tp::dropout(ones, 0.5, true).ne(0).to(at::kFloat), mask),
         "a saved tracker state replays the same mask");
  expect(at::equal(tp::dropout(ones, 0.5, /*training=*/false), ones), "no dropout in eval");
  const at::Tensor all = tp::detail::all_gather_last_dim(mask, *g);  // [t x 256]
  for (int r = 1; r < t; ++r)
    expect(!at::equal(all.narrow(0, r * 256, 256), all.narrow(0, 0, 256)),
           "tensor rank " + std::to_string(r) + " draws another mask than rank 0");
  // The default generator, seeded alike, gives every rank the same (replicated) mask.
  at::manual_seed(6);
  const at::Tensor same = at::dropout(ones, 0.5, true).ne(0).to(at::kFloat);
  const at::Tensor gathered = tp::detail::all_gather_last_dim(same, *g);
  for (int r = 1; r < t; ++r)
    expect(at::equal(gathered.narrow(0, r * 256, 256), same), "replicated draws agree");
}

void check_errors(const std::shared_ptr<Communicator>& g) {
  if (g->world_size() == 1) return;
  const int64_t odd = 4 * g->world_size() + 1;
  try {
    tp::ColumnParallelLinear bad(tp::ColumnParallelLinearOptions(8, odd), g);
    expect(false, "ColumnParallelLinear refuses out_features not divisible by T");
  } catch (const UsageError& e) {
    expect(std::string(e.what()).find("ColumnParallelLinear: out_features (" + std::to_string(odd) +
                                      ") is not divisible by the "
                                      "tensor-parallel size " +
                                      std::to_string(g->world_size())) != std::string::npos,
           std::string("error names the layer and sizes: ") + e.what());
  }
}

// Splitting existing layers (AutoTP's way): each rank's slice of their values, no random draws,
// and the forward of the whole layers; a whole layer of other sizes is refused.
void check_split_existing(const std::shared_ptr<Communicator>& g) {
  at::manual_seed(21);
  torch::nn::Linear a(16, 32), b(32, 16);
  torch::nn::Embedding e(8, 16);
  at::manual_seed(5);
  tp::ColumnParallelLinear col(tp::ColumnParallelLinearOptions(16, 32), g, a);
  tp::RowParallelLinear row(tp::RowParallelLinearOptions(32, 16), g, b);
  tp::VocabParallelEmbedding emb(e, g);
  const at::Tensor after_split = at::randn({4});
  at::manual_seed(5);
  expect(at::equal(after_split, at::randn({4})), "splitting existing layers draws nothing");
  const int r = g->rank(), t = g->world_size();
  expect(at::equal(col->weight, rows(a->weight, r, t)) && at::equal(col->bias, rows(a->bias, r, t)),
         "the split column layer holds this rank's rows");
  expect(at::equal(row->weight, cols(b->weight, r, t)) && at::equal(row->bias, b->bias),
         "the split row layer holds this rank's columns and the whole bias");
  const at::Tensor ids = at::arange(8, at::kLong).view({2, 4});
  const at::Tensor x = e(ids);
  expect_close(row(torch::nn::functional::gelu(col(x))), b(torch::nn::functional::gelu(a(x))),
               "split existing layers: the whole layers' forward");
  expect_close(emb(ids), x, "split existing embedding: the whole table's lookups");
  try {
    tp::ColumnParallelLinear wrong(tp::ColumnParallelLinearOptions(16, 64), g, a);
    expect(false, "a whole layer of other sizes is refused");
  } catch (const UsageError& err) {
    expect(std::string(err.what()).find("the whole layer's weight") != std::string::npos,
           std::string("the error names the sizes: ") + err.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int tp = 1;
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--tp") tp = std::stoi(args[i + 1]);
  RankEnv env;
  try {
    env = detect_rank_env();
    auto world = init_communicator(env);
    const ParallelGrid grid = parallel_grid(world, GridSizes{tp, 1});
    check_mlp(grid.tensor_group());
    check_strided(grid.tensor_group());
    check_embedding_and_loss(grid.tensor_group());
    check_sequence_parallel(grid.tensor_group());
    check_rng(grid.tensor_group());
    check_errors(grid.tensor_group());
    check_split_existing(grid.tensor_group());
    world->barrier()->wait();
    std::cout << "rank " << env.rank << " " << grid.to_string() << ": " << g_checks
              << " checks passed\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << env.rank << ": error: " << e.what() << std::endl;
    return 1;
  }
}
