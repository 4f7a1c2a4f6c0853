// zero::parse_args: takes the engine's own command-line options (DeepSpeed's launcher
// convention) out of argv and hands the program's remaining arguments back in order.
#pragma once

#include <string>
#include <vector>

namespace zero {

struct Args {
  std::string config_path;        // --deepspeed_config F / --config F; "" when absent
  int local_rank = -1;            // --local_rank N (also --local-rank); -1 when absent
  std::vector<std::string> rest;  // the program's own arguments, in order (argv[0] excluded)
};

// Understands `--deepspeed_config F`, `--deepspeed_config=F`, `--config F`, `--config=F`,
// `--local_rank N`, `--local_rank=N` (and `--local-rank`, as torch.distributed.run passes it),
// and DeepSpeed's `--deepspeed` switch (accepted, no effect). Everything after `--` is passed
// through untouched. Throws UsageError for a missing or empty value, a local rank that is not
// a non-negative integer, or a config path given twice.
Args parse_args(int argc, char** argv);
Args parse_args(const std::vector<std::string>& args);  // args without argv[0]

// Removes every `--local_rank N` / `--local_rank=N` (and `--local-rank`) before a `--`, as
// parse_args accepts them, and returns the other arguments in order; for tools (`zero`) that
// run under zerorun but have no use for the local rank. Throws UsageError as parse_args does.
std::vector<std::string> drop_local_rank(const std::vector<std::string>& args);

}  // namespace zero
