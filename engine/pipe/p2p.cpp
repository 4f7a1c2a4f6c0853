// Tuples of tensors between pipeline stages: a fixed-size int64 header per tuple, then the
// tensors, as two point-to-point batches (one when the step only sends).
#include <zero/engine/pipe/p2p.h>

#include <zero/error.h>

#include <ATen/ATen.h>

namespace zero::pipe {
namespace {

// "sending activation of micro-batch 3 (stage 0) to stage 1, receiving ... from stage 1": the
// peers are ranks of the pipeline group, which are the stages.
std::string described(const std::vector<Outgoing>& sends, const std::vector<Incoming>& receives) {
  std::string out;
  for (const Outgoing& o : sends)
    out +=
        (out.empty() ? "sending " : ", sending ") + o.what + " to stage " + std::to_string(o.peer);
  for (const Incoming& in : receives)
    out += (out.empty() ? "receiving " : ", receiving ") + in.what + " from stage " +
           std::to_string(in.peer);
  return out;
}

// Waits for a batch; a failure says which messages of the schedule it held.
void wait_for(const WorkHandle& work, const std::vector<Outgoing>& sends,
              const std::vector<Incoming>& receives) {
  try {
    work->wait();
  } catch (const TimeoutError& e) {
    throw TimeoutError("pipeline: " + described(sends, receives) + ": " + e.what());
  } catch (const CommError& e) {
    throw CommError("pipeline: " + described(sends, receives) + ": " + e.what());
  }
}

bool carried(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kInt || t == at::kLong;
}

}  // namespace

at::Tensor encode_header(const std::vector<at::Tensor>& tensors, const std::string& what) {
  at::Tensor header = at::zeros({kHeaderSlots}, at::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  int64_t at_slot = 0;
  h[at_slot++] = static_cast<int64_t>(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    ZERO_CHECK(t.defined(), UsageError, "pipeline: ", what, ": tensor ", i, " is undefined");
    ZERO_CHECK(carried(t.scalar_type()), UsageError, "pipeline: ", what, ": tensor ", i, " is ",
               c10::toString(t.scalar_type()),
               "; between stages go float32, float16, bfloat16, int32 and int64 tensors (cast "
               "a mask to int32 in the layer that sends it)");
    ZERO_CHECK(at_slot + 2 + t.dim() <= kHeaderSlots, UsageError, "pipeline: ", what, ": ",
               tensors.size(), " tensors of these dimensions do not fit the ", kHeaderSlots,
               "-slot header");
    h[at_slot++] = static_cast<int64_t>(t.scalar_type());
    h[at_slot++] = t.dim();
    for (int64_t d : t.sizes()) h[at_slot++] = d;
  }
  return header;
}

std::vector<TensorMeta> decode_header(const at::Tensor& header, const std::string& what) {
  const at::Tensor host = header.to(at::kCPU);
  const int64_t* h = host.data_ptr<int64_t>();
  int64_t at_slot = 0;
  const int64_t count = h[at_slot++];
  ZERO_CHECK(count >= 0 && count < kHeaderSlots, CommError, "pipeline: ", what, ": a header of ",
             count, " tensors (a peer sent something else)");
  std::vector<TensorMeta> out;
  for (int64_t i = 0; i < count; ++i) {
    ZERO_CHECK(at_slot + 2 <= kHeaderSlots, CommError, "pipeline: ", what, ": a broken header");
    const auto dtype = static_cast<at::ScalarType>(h[at_slot++]);
    const int64_t dims = h[at_slot++];
    ZERO_CHECK(carried(dtype) && dims >= 0 && at_slot + dims <= kHeaderSlots, CommError,
               "pipeline: ", what, ": a broken header (tensor ", i, ")");
    TensorMeta m{dtype, std::vector<int64_t>(h + at_slot, h + at_slot + dims)};
    at_slot += dims;
    for (int64_t d : m.sizes)
      ZERO_CHECK(d >= 0, CommError, "pipeline: ", what, ": a broken header (size ", d, ")");
    out.push_back(std::move(m));
  }
  return out;
}

void PendingSends::wait() {
  if (!work_) return;
  wait_for(work_, sends_, {});
  work_ = nullptr;
  held_.clear();
}

PendingSends post_sends(Communicator& pipe_group, const std::vector<Outgoing>& sends,
                        at::Device device) {
  std::vector<P2POp> ops;
  std::vector<at::Tensor> held;
  for (const Outgoing& out : sends) {
    held.push_back(encode_header(out.tensors, out.what).to(device));
    ops.push_back({P2POp::Kind::kSend, held.back(), out.peer});
  }
  for (const Outgoing& out : sends)
    for (const at::Tensor& t : out.tensors) {
      held.push_back(t.detach().contiguous().view({-1}));
      ops.push_back({P2POp::Kind::kSend, held.back(), out.peer});
    }
  if (ops.empty()) return {};
  return PendingSends(pipe_group.batch_p2p(ops), std::move(held), sends);
}

std::vector<std::vector<at::Tensor>> exchange(Communicator& pipe_group,
                                              const std::vector<Outgoing>& sends,
                                              const std::vector<Incoming>& receives,
                                              at::Device device) {
  if (receives.empty()) {  // nothing to learn first: the headers and the data in one batch
    post_sends(pipe_group, sends, device).wait();
    return {};
  }
  const at::TensorOptions on = at::TensorOptions().device(device);
  // The headers first: every receive's sizes come from its peer.
  std::vector<P2POp> ops;
  std::vector<at::Tensor> headers_in;
  for (const Incoming& in : receives) {
    headers_in.push_back(at::empty({kHeaderSlots}, on.dtype(at::kLong)));
    ops.push_back({P2POp::Kind::kRecv, headers_in.back(), in.peer});
  }
  std::vector<std::vector<at::Tensor>> data_out;
  for (const Outgoing& out : sends) {
    ops.push_back({P2POp::Kind::kSend, encode_header(out.tensors, out.what).to(device), out.peer});
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : out.tensors) flat.push_back(t.detach().contiguous().view({-1}));
    data_out.push_back(std::move(flat));
  }
  if (ops.empty()) return {};
  wait_for(pipe_group.batch_p2p(ops), sends, receives);

  // Then the data, in the headers' order; empty tensors travel as empty messages.
  ops.clear();
  std::vector<std::vector<at::Tensor>> received(receives.size());
  for (size_t i = 0; i < receives.size(); ++i)
    for (const TensorMeta& m : decode_header(headers_in[i], receives[i].what)) {
      received[i].push_back(at::empty(m.sizes, on.dtype(m.dtype)));
      ops.push_back({P2POp::Kind::kRecv, received[i].back().view({-1}), receives[i].peer});
    }
  for (size_t i = 0; i < sends.size(); ++i)
    for (const at::Tensor& t : data_out[i]) ops.push_back({P2POp::Kind::kSend, t, sends[i].peer});
  if (!ops.empty()) wait_for(pipe_group.batch_p2p(ops), sends, receives);
  return received;
}

}  // namespace zero::pipe
