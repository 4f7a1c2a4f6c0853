// Activations and gradients between pipeline stages: a micro-batch's tuple of tensors of any
// shapes and dtypes, sent with a header (count, dtypes, shapes) each time, so varying sequence
// lengths need no flag. One exchange is one schedule step's messages, as two point-to-point
// batches over the pipeline group: the headers, then the data (whose sizes the headers gave),
// each with every receive posted before any send (a step that only sends: one batch of both).
// That equals one atomic batch when the step's messages with each peer are all in one step of
// that peer, which the schedules guarantee (schedule.h) and tests/schedule's simulator checks.
#pragma once

#include <zero/comm/communicator.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace zero::pipe {

// The most int64 slots a tuple's header takes: 1 + per tensor 2 + its dimensions.
constexpr int64_t kHeaderSlots = 128;

struct Outgoing {
  int peer = 0;
  std::vector<at::Tensor> tensors;  // contiguous copies are sent; float, half, bf16, int, long
  std::string what;                 // for errors: "activation of micro-batch 3"
};
struct Incoming {
  int peer = 0;
  std::string what;
};

// Sends every Outgoing and receives one tuple per Incoming (returned in the same order), on the
// CPU or the device of the first tensor sent (receives with nothing sent land on `device`).
// UsageError naming `what` for a tensor the transport cannot carry (bool, uint8, too many
// dimensions); timeouts are the communicator's (naming the peer and direction).
std::vector<std::vector<at::Tensor>> exchange(Communicator& pipe_group,
                                              const std::vector<Outgoing>& sends,
                                              const std::vector<Incoming>& receives,
                                              at::Device device);

// A step that only sends, posted without waiting (zb-h1 sends behind its compute): one batch of
// headers and data, holding its tensors until wait(). The communicator runs batches in issue
// order, so a later exchange's completion implies this one's.
class PendingSends {
 public:
  PendingSends() = default;
  PendingSends(WorkHandle work, std::vector<at::Tensor> held, std::vector<Outgoing> sends)
      : work_(std::move(work)), held_(std::move(held)), sends_(std::move(sends)) {}
  // Blocks until the batch completed; a failure names its messages (as exchange's do).
  void wait();

 private:
  WorkHandle work_;
  std::vector<at::Tensor> held_;
  std::vector<Outgoing> sends_;
};
PendingSends post_sends(Communicator& pipe_group, const std::vector<Outgoing>& sends,
                        at::Device device);

// Megatron's scatter/gather between stages (pipeline.pipe_partitioned, grad_partitioned): a tensor
// every tensor rank of the sending stage holds alike goes as tensor rank `rank`'s 1/size of it
// (flattened, the last slice padded with zeros) and its shape, {slice, shape as int64}; the
// receiving stage's tensor group all-gathers the slices into the whole (a collective over it:
// every tensor rank receives the same messages in the same order). UsageError naming `what` for a
// tuple that is not a slice and its shape.
std::vector<at::Tensor> scatter_for_stage(const at::Tensor& whole, int rank, int size);
at::Tensor gather_from_stage(Communicator& tensor_group, const std::vector<at::Tensor>& received,
                             const std::string& what);
// Collective over the tensor group: UsageError on every rank naming `what` and config key `key`
// (pipe_partitioned or grad_partitioned) when the ranks' tensors differ (the check the first
// batch runs before scattering).
void check_replicated(Communicator& tensor_group, const at::Tensor& tensor, const std::string& what,
                      const char* key);

// The header of a tuple, and the tensors' shapes and dtypes back from one (both checked).
at::Tensor encode_header(const std::vector<at::Tensor>& tensors, const std::string& what);
struct TensorMeta {
  at::ScalarType dtype;
  std::vector<int64_t> sizes;
};
std::vector<TensorMeta> decode_header(const at::Tensor& header, const std::string& what);

}  // namespace zero::pipe
