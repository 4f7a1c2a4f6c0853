// The pipeline schedules run on a simulator of the executor: one instruction stream per rank,
// forward and backward with costs F and B, every comm batch run as zero::pipe::exchange runs it
// (the headers, then the data; sends only: both at once), each of those blocking until each of
// its messages' counterparts has been posted by the peer (a send may wait for its receive, as on
// Gloo and NCCL). Over p 1..8, v 1..4 and m 1..32 it checks what the executor relies on: the n-th
// message a rank sends a peer is the n-th that peer receives from it and of the same kind,
// micro-batch and chunk; no rank talks to itself; nothing deadlocks; each micro-batch's forward
// precedes its backward, each once; the optimizer step comes last; a rank holds at most p - r
// micro-batches' activations; and the bubble is what 1F1B promises: every rank idles
// (p - 1)(F + B) of the makespan.
#include <zero/engine/pipe/schedule.h>
#include <zero/error.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace zero::pipe;

namespace {

// A message in flight: sender, receiver, what, micro-batch, chunk, and its part: a tuple travels
// as a header (part 0), then its data (part 1).
using Key = std::tuple<int, int, int, int, int, int>;

Key key_of(int rank, const Transfer& t, int part = 0) {
  const bool send = t.kind == Transfer::Kind::kSend;
  return {
      send ? rank : t.peer, send ? t.peer : rank, static_cast<int>(t.what), t.micro, t.chunk, part};
}

// An instruction as the executor runs it: zero::pipe::exchange turns a comm batch into the
// point-to-point batches the communicator sees, each blocking until every counterpart has been
// posted: the headers, then the data (whose sizes the headers gave); a batch of sends only goes
// as one batch of headers and data.
struct SimStep {
  Instruction in;
  std::vector<int> parts;  // per transfer of in.transfers
};

std::vector<SimStep> as_executed(const std::vector<Instruction>& prog) {
  std::vector<SimStep> out;
  for (const Instruction& in : prog) {
    if (in.op != Instruction::Op::kComm) {
      out.push_back({in, {}});
      continue;
    }
    const bool sends_only =
        std::all_of(in.transfers.begin(), in.transfers.end(),
                    [](const Transfer& t) { return t.kind == Transfer::Kind::kSend; });
    SimStep headers{in, {}}, data{in, {}};
    headers.in.transfers.clear(), data.in.transfers.clear();
    for (const Transfer& t : in.transfers) {
      headers.in.transfers.push_back(t), headers.parts.push_back(0);
      (sends_only ? headers : data).in.transfers.push_back(t);
      (sends_only ? headers : data).parts.push_back(1);
    }
    out.push_back(std::move(headers));
    if (!sends_only) out.push_back(std::move(data));
  }
  return out;
}

struct Result {
  double makespan = 0;
  std::vector<double> busy;         // per rank: time spent in forward and backward
  std::vector<int> peak_in_flight;  // micro-batch chunks forwarded, weight gradients not yet done
};

// Costs of one step: a forward, a whole backward, and a backward's input and weight halves.
struct Costs {
  double f = 1, b = 2, b_input = 1, b_weight = 1;
};

// Runs every rank's schedule to the end; FAILs on a deadlock or a broken rule.
// forward: the programs' forward_only part (eval_batch's).
Result simulate(ScheduleKind kind, int p, int m, Costs cost, int v = 1, bool forward = false) {
  std::vector<std::vector<Instruction>> schedule(p);
  for (int r = 0; r < p; ++r) {
    schedule[r] = build_schedule(kind, p, m, r, v);
    if (forward) schedule[r] = forward_only(schedule[r]);
  }

  // Order per (sender, receiver) pair: the sends and the receives list the same messages.
  std::map<std::pair<int, int>, std::vector<Key>> sent, received;
  for (int r = 0; r < p; ++r)
    for (const Instruction& in : schedule[r])
      for (const Transfer& t : in.transfers) {
        INFO("rank " << r << ": " << to_string(in));
        REQUIRE(t.peer != r);
        REQUIRE(t.peer >= 0);
        REQUIRE(t.peer < p);
        const Key k = key_of(r, t);
        auto& list = t.kind == Transfer::Kind::kSend ? sent : received;
        list[{std::get<0>(k), std::get<1>(k)}].push_back(k);
      }
  REQUIRE(sent == received);
  std::vector<std::vector<SimStep>> prog(p);
  for (int r = 0; r < p; ++r) prog[r] = as_executed(schedule[r]);

  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0);
  std::vector<bool> posted(p, false);
  std::vector<double> posted_at(p, 0), comm_free(p, 0), behind_posted(p, 0);
  std::vector<const SimStep*> behind(p, nullptr);  // a batch not waited for, still running
  std::map<Key, double> post_time;                 // (key, direction) posting times
  std::map<Key, double> recv_post_time;
  Result res;
  res.busy.assign(p, 0);
  res.peak_in_flight.assign(p, 0);
  // Per rank, the (micro, chunk) pairs forwarded, backwarded (input gradients) and done.
  std::vector<std::set<std::pair<int, int>>> forwarded(p), backwarded(p), weighted(p);
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < p; ++r) {
      while (pc[r] < prog[r].size()) {
        done = false;
        const SimStep& step = prog[r][pc[r]];
        const Instruction& in = step.in;
        INFO("rank " << r << " at " << to_string(in));
        // The earliest a batch can complete: when every counterpart has been posted (or
        // nothing, when one has not been yet).
        auto completes = [&](const SimStep& batch, double posted_at) {
          double ready = posted_at;
          for (size_t i = 0; i < batch.in.transfers.size(); ++i) {
            const Transfer& t = batch.in.transfers[i];
            const auto& other = t.kind == Transfer::Kind::kSend ? recv_post_time : post_time;
            auto it = other.find(key_of(r, t, batch.parts[i]));
            if (it == other.end()) return -1.0;
            ready = std::max(ready, it->second);
          }
          return ready;
        };
        const bool final_steps = in.op == Instruction::Op::kReduceTied;
        if ((in.op == Instruction::Op::kComm || final_steps) && behind[r]) {
          // The communicator runs batches in order: the one behind finishes first.
          const double at = completes(*behind[r], behind_posted[r]);
          if (at < 0) break;  // blocked on a peer
          comm_free[r] = at;
          if (final_steps) clock[r] = std::max(clock[r], at);  // train_batch waits for it
          behind[r] = nullptr;
          progress = true;
        }
        if (in.op == Instruction::Op::kComm) {
          if (!posted[r]) {
            posted_at[r] = std::max(clock[r], comm_free[r]);
            for (size_t i = 0; i < in.transfers.size(); ++i) {
              const Transfer& t = in.transfers[i];
              (t.kind == Transfer::Kind::kSend ? post_time
                                               : recv_post_time)[key_of(r, t, step.parts[i])] =
                  posted_at[r];
            }
            posted[r] = true;
            progress = true;
          }
          if (!in.wait) {
            behind[r] = &step;
            behind_posted[r] = posted_at[r];
          } else {
            const double at = completes(step, posted_at[r]);
            if (at < 0) break;  // blocked on a peer
            clock[r] = comm_free[r] = at;
          }
          posted[r] = false;
        } else if (in.op == Instruction::Op::kForward) {
          REQUIRE(forwarded[r].insert({in.micro, in.chunk}).second);
          clock[r] += cost.f;
          res.busy[r] += cost.f;
          res.peak_in_flight[r] = std::max<int>(
              res.peak_in_flight[r], static_cast<int>(forwarded[r].size() - weighted[r].size()));
        } else if (in.op == Instruction::Op::kBackward ||
                   in.op == Instruction::Op::kBackwardInput) {
          const bool whole = in.op == Instruction::Op::kBackward;
          REQUIRE(forwarded[r].count({in.micro, in.chunk}) == 1);
          REQUIRE(backwarded[r].insert({in.micro, in.chunk}).second);
          if (whole) weighted[r].insert({in.micro, in.chunk});
          const double c = whole ? cost.b : cost.b_input;
          clock[r] += c;
          res.busy[r] += c;
        } else if (in.op == Instruction::Op::kBackwardWeight) {
          REQUIRE(backwarded[r].count({in.micro, in.chunk}) == 1);  // after its input half
          REQUIRE(weighted[r].insert({in.micro, in.chunk}).second);
          clock[r] += cost.b_weight;
          res.busy[r] += cost.b_weight;
        } else if (in.op == Instruction::Op::kLoad) {
          REQUIRE((r == 0 || r == p - 1));
        } else if (in.op == Instruction::Op::kStep) {
          REQUIRE(pc[r] + 1 == prog[r].size());
        }
        ++pc[r];
        progress = true;
      }
    }
    if (done) break;
    if (!progress) {
      std::string where;
      for (int r = 0; r < p; ++r)
        where += "rank " + std::to_string(r) + " at " +
                 (pc[r] < prog[r].size() ? to_string(prog[r][pc[r]].in) : "end") + "; ";
      FAIL("deadlock: " << where);
    }
  }
  for (int r = 0; r < p; ++r) {
    REQUIRE(static_cast<int>(forwarded[r].size()) == m * v);
    REQUIRE(static_cast<int>(weighted[r].size()) == (forward ? 0 : m * v));
    res.makespan = std::max(res.makespan, clock[r]);
  }
  return res;
}

}  // namespace

TEST_CASE("1F1B: messages pair in order, no deadlock, bounded activations, its bubble") {
  const Costs c;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      INFO("p " << p << ", m " << m);
      const Result res = simulate(ScheduleKind::kOneFOneB, p, m, c);
      for (int r = 0; r < p; ++r) {
        INFO("rank " << r);
        REQUIRE(res.peak_in_flight[r] <= p - r);
        REQUIRE(res.makespan - res.busy[r] == Approx((p - 1) * (c.f + c.b)));
      }
    }
}

TEST_CASE("interleaved: messages pair in order, no deadlock, its bubble (p - 1)(F + B) / v") {
  // A chunk holds 1/v of a stage's layers: its F and B cost 1/v of 1F1B's.
  for (int v = 2; v <= 4; ++v)
    for (int p = 1; p <= 8; ++p)
      for (int m = p; m <= 32; m += p) {
        INFO("p " << p << ", v " << v << ", m " << m);
        Costs c;
        c.f = 1.0 / v, c.b = 2.0 / v;
        const Result res = simulate(ScheduleKind::kInterleaved, p, m, c, v);
        for (int r = 0; r < p; ++r) {
          INFO("rank " << r);
          const int warmup = m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
          REQUIRE(res.peak_in_flight[r] <= std::min(warmup + 1, m * v));
          REQUIRE(res.makespan - res.busy[r] == Approx((p - 1) * (1.0 + 2.0) / v));
        }
      }
}

TEST_CASE("zb-h1: messages pair in order, no deadlock, 1F1B's peak activations, its bubble") {
  for (const Costs c : {Costs{1, 0, 1, 1}, Costs{2, 0, 3, 1}, Costs{2, 0, 2, 1}, Costs{3, 0, 2, 1},
                        Costs{1, 0, 2, 1}, Costs{2, 0, 1, 1}})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        INFO("p " << p << ", m " << m << ", F " << c.f << ", B " << c.b_input << ", W "
                  << c.b_weight);
        const Result res = simulate(ScheduleKind::kZeroBubbleH1, p, m, c);
        for (int r = 0; r < p; ++r) {
          INFO("rank " << r);
          REQUIRE(res.peak_in_flight[r] <= p);
          if (m >= p)
            REQUIRE(res.makespan - res.busy[r] == Approx((p - 1) * (c.f + c.b_input - c.b_weight)));
        }
      }
}

TEST_CASE("1F1B: the first rank's warm-up, steady state and drain") {
  // p 3, m 4 on rank 0: two forwards ahead, then alternate, then drain.
  std::vector<std::string> ops;
  for (const Instruction& in : build_schedule(ScheduleKind::kOneFOneB, 3, 4, 0))
    if (in.op == Instruction::Op::kForward || in.op == Instruction::Op::kBackward)
      ops.push_back(to_string(in));
  REQUIRE(ops == std::vector<std::string>{"F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"});
  // The last rank alternates from the start, and its sends and receives are combined batches.
  std::vector<std::string> last;
  for (const Instruction& in : build_schedule(ScheduleKind::kOneFOneB, 3, 2, 2))
    last.push_back(to_string(in));
  REQUIRE(last == std::vector<std::string>{"comm[recv act 0 <- 1]", "load0", "F0", "B0",
                                           "comm[send grad 0 -> 1, recv act 1 <- 1]", "load1", "F1",
                                           "B1", "comm[send grad 1 -> 1]", "reduce_tied", "reduce",
                                           "step"});
}

TEST_CASE("forward only (eval_batch): the forwards in order, messages pair, no deadlock") {
  for (const ScheduleKind kind :
       {ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleH1})
    for (int p = 1; p <= 8; ++p)
      for (int v = 1; v <= (kind == ScheduleKind::kInterleaved ? 4 : 1); ++v)
        for (int m = 1; m <= 32; ++m) {
          if (kind == ScheduleKind::kInterleaved && (v < 2 || m % p)) continue;
          INFO(to_string(kind) << " p " << p << " v " << v << " m " << m);
          const Result r = simulate(kind, p, m, Costs{}, v, /*forward=*/true);
          for (int rank = 0; rank < p; ++rank) REQUIRE(r.busy[rank] == m * v * Costs{}.f);
        }
}

TEST_CASE("schedule names and sizes are checked") {
  REQUIRE(parse_schedule_kind("1f1b") == ScheduleKind::kOneFOneB);
  REQUIRE(parse_schedule_kind("interleaved") == ScheduleKind::kInterleaved);
  REQUIRE(parse_schedule_kind("zb-h1") == ScheduleKind::kZeroBubbleH1);
  REQUIRE_THROWS_WITH(parse_schedule_kind("gpipe"),
                      Catch::Contains("not one of: 1f1b, interleaved, zb-h1"));
  REQUIRE_THROWS_WITH(build_schedule(ScheduleKind::kInterleaved, 4, 6, 0, 2),
                      Catch::Contains("must be a multiple of the pipeline stages (4)"));
  REQUIRE_THROWS_WITH(build_schedule(ScheduleKind::kInterleaved, 4, 8, 0, 1),
                      Catch::Contains("it needs at least 2"));
  REQUIRE_THROWS_AS(build_schedule(ScheduleKind::kOneFOneB, 4, 8, 0, 2), zero::UsageError);
  REQUIRE_THROWS_AS(build_schedule(ScheduleKind::kOneFOneB, 0, 4, 0), zero::UsageError);
  REQUIRE_THROWS_AS(build_schedule(ScheduleKind::kOneFOneB, 2, 4, 2), zero::UsageError);
}
