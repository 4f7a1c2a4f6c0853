// Pipeline schedules as plain instruction lists, one per pipeline rank (no LibTorch): what a
// pipeline executor runs, and what tests/schedule's simulator checks (every send meets its
// receive in order, no deadlock, the bubble the schedule promises).
#pragma once

#include <string>
#include <vector>

namespace zero::pipe {

// "1f1b": DeepSpeed's TrainSchedule and Megatron's non-interleaved schedule: rank r runs
// min(p - r - 1, m) forwards, then alternates one forward and one backward, then drains the
// backwards, so it holds at most p - r micro-batches' activations. Bubble: (p - 1)(F + B) per
// rank, whatever m.
// "interleaved": Megatron's virtual pipeline: each rank holds v model chunks (rank r's chunk c is
// part c p + r of the model), F and B of a chunk cost 1/v of a stage's; needs m % p == 0. Bubble:
// (p - 1)(F + B) / v, for v times the messages and more activations in flight (rank 0 warms up
// 2(p - 1) + (v - 1) p chunk forwards, against p - 1 stage forwards).
// "zb-h1": zero bubble (Qi et al. 2024, ZB-H1): each backward split into its input-gradient
// pass B (what the previous stage waits for) and its weight-gradient pass W; rank r defers r W's
// to its cool-down, where 1F1B would wait. At most p micro-batches' activations on any rank, as
// 1F1B's rank 0. Bubble: (p - 1)(F + B - W) for m >= p when W <= F (a third of 1F1B's
// (p - 1)(F + B + W) when F, B and W take equal time).
enum class ScheduleKind { kOneFOneB, kInterleaved, kZeroBubbleH1 };

ScheduleKind parse_schedule_kind(const std::string& name);  // ConfigError naming the choices
const char* to_string(ScheduleKind kind);

// One message between neighbouring stages: a micro-batch's activation (forward) or the
// gradient of it (backward), of model chunk `chunk` (0 without interleaving).
struct Transfer {
  enum class Kind { kSend, kRecv };
  enum class What { kActivation, kGradient };
  Kind kind = Kind::kSend;
  What what = What::kActivation;
  int micro = 0;
  int chunk = 0;
  int peer = 0;  // pipeline rank
};

struct Instruction {
  enum class Op {
    kLoad,            // the micro-batch's inputs (first stage) or labels (last stage)
    kForward,         // the stage's layers on micro-batch `micro`
    kBackward,        // their backward (input and weight gradients)
    kBackwardInput,   // zb-h1: its input gradients only (what the previous stage waits for)
    kBackwardWeight,  // zb-h1: the weight gradients of an earlier kBackwardInput
    kComm,            // `transfers` as one point-to-point batch, waited for before the next
    kReduceTied,      // tied parameters' gradients summed over the stages that hold them
    kReduce,          // the data-parallel gradient reduction (ZeRO's)
    kStep,            // the optimizer step
  };
  Op op = Op::kForward;
  int micro = -1;
  int chunk = 0;
  std::vector<Transfer> transfers;
  // kComm: false when the rank goes on computing without waiting for the batch (sends only);
  // the communicator runs it before the rank's next batch, which waits for both.
  bool wait = true;
};

// The instructions of pipeline rank `rank` of `stages` for one batch of `micro_batches`, with
// `chunks` model chunks per rank (interleaved only; 1 otherwise). A comm batch's messages with
// each peer are all in one batch of that peer (batches are split where a schedule's rules would
// put them in two), so the executor's header-then-data exchange runs like one atomic batch.
// UsageError when the sizes are not positive, the rank is outside, or chunks is not 1 for a
// schedule without chunks; ConfigError when interleaving gets fewer than 2 chunks or m is not a
// multiple of p.
std::vector<Instruction> build_schedule(ScheduleKind kind, int stages, int micro_batches, int rank,
                                        int chunks = 1);

// eval_batch's instructions: a training program's loads, forwards and activation messages, in
// its order (gradient messages, backward passes, reductions and the step dropped, and comm steps
// left empty). Taken from every rank's program alike, the messages still pair in order and
// cannot deadlock: a batch's messages with a peer stay in one batch of that peer.
std::vector<Instruction> forward_only(const std::vector<Instruction>& program);

std::string to_string(const Instruction& instruction);  // "F3", "comm[send act 3 -> 2]", ...

}  // namespace zero::pipe
