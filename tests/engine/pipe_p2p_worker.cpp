// Tuples between pipeline stages (zero::pipe::exchange), on real ranks over Gloo: each rank
// sends the next a tuple of tensors whose count, dtypes and shapes change every round (a
// sequence length that varies, an empty tensor, a 0-dim one) and receives its predecessor's, in
// one exchange; a rank that sends two tuples to one peer and receives two from another; the
// header round trip; a bool tensor refused naming what was sent; a stage that never sends.
#include "worker_util.h"

#include <zero/engine/pipe/p2p.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace zero;
using namespace zero::test;

namespace {

// Rank `sender`'s tuple in round `round`: its shapes depend on both.
std::vector<at::Tensor> tuple_of(int sender, int round) {
  const int64_t seq = 3 + (sender + round) % 4;
  std::vector<at::Tensor> out{
      at::arange(2 * seq * 5, at::kFloat).view({2, seq, 5}).add(sender * 100 + round),
      at::arange(seq, at::kLong).add(sender),
  };
  if (round % 2) out.push_back(at::full({}, sender + 0.5, at::kBFloat16));  // 0-dim
  if (round % 3 == 0) out.push_back(at::empty({0, 4}, at::kHalf));
  if (round == 2) out.push_back(at::ones({1, 1, 1, 1, 1, 1, 2}, at::kInt));
  return out;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].scalar_type() != b[i].scalar_type() || a[i].sizes() != b[i].sizes() ||
        !at::equal(a[i], b[i]))
      return false;
  return true;
}

void check_header() {
  const std::vector<at::Tensor> t = tuple_of(1, 3);
  const auto meta = pipe::decode_header(pipe::encode_header(t, "a tuple"), "a tuple");
  EXPECT(meta.size() == t.size(), "header count");
  for (size_t i = 0; i < t.size(); ++i)
    EXPECT(meta[i].dtype == t[i].scalar_type() && meta[i].sizes == t[i].sizes().vec(),
           "header tensor " + std::to_string(i));
  std::vector<at::Tensor> many(40, at::zeros({1, 1}));
  expect_throw<UsageError>("a tuple larger than the header", "forty tensors",
                           [&] { pipe::encode_header(many, "forty tensors"); });
}

void check_ring(Communicator& c) {
  const int r = c.rank(), w = c.world_size(), next = (r + 1) % w, prev = (r + w - 1) % w;
  for (int round = 0; round < 6; ++round) {
    const auto got =
        pipe::exchange(c, {{next, tuple_of(r, round), "ring"}}, {{prev, "ring"}}, at::kCPU);
    EXPECT(got.size() == 1 && same(got[0], tuple_of(prev, round)),
           "round " + std::to_string(round) + ": the predecessor's tuple");
  }
  // Two tuples to the next rank and two from the previous one in one exchange: in order.
  const auto got =
      pipe::exchange(c, {{next, tuple_of(r, 10), "first"}, {next, tuple_of(r, 11), "second"}},
                     {{prev, "first"}, {prev, "second"}}, at::kCPU);
  EXPECT(got.size() == 2 && same(got[0], tuple_of(prev, 10)) && same(got[1], tuple_of(prev, 11)),
         "two tuples between one pair, in order");
  expect_throw<UsageError>("a bool tensor", "the mask of micro-batch 0: tensor 0 is Bool", [&] {
    pipe::exchange(c, {{next, {at::zeros({2}, at::kBool)}, "the mask of micro-batch 0"}}, {},
                   at::kCPU);
  });
}

}  // namespace

// A stage that never sends (run with ZERO_TIMEOUT=3 and expect_failure.sh): stage 0's receive
// fails naming what it waited for, from which stage, and the communicator's peer and timeout.
void dead_peer(const std::shared_ptr<Communicator>& world) {
  if (world->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(20));
    return;
  }
  pipe::exchange(*world, {}, {{1, "activation of micro-batch 0 (stage 0)"}}, at::kCPU);
}

int main(int argc, char** argv) {
  return worker_main(
      argc, argv,
      {{"dead", dead_peer}, {"exchange", [](const std::shared_ptr<Communicator>& world) {
                               check_header();
                               if (world->world_size() > 1) check_ring(*world);
                             }}});
}
