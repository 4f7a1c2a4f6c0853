// zero::parse_args: the launcher's options are taken out, the program's own kept in order.
#include <catch2/catch.hpp>

#include <zero/engine/args.h>
#include <zero/error.h>

using namespace zero;
using Strings = std::vector<std::string>;

TEST_CASE("parse_args: separate and = forms, program arguments kept in order") {
  Args a = parse_args(Strings{"--data", "x.txt", "--deepspeed_config", "ds.json", "--local_rank=3",
                              "--steps", "5"});
  CHECK(a.config_path == "ds.json");
  CHECK(a.local_rank == 3);
  CHECK(a.rest == Strings{"--data", "x.txt", "--steps", "5"});

  Args b = parse_args(Strings{"--config=c.json", "--local_rank", "0", "--deepspeed", "pos"});
  CHECK(b.config_path == "c.json");
  CHECK(b.local_rank == 0);
  CHECK(b.rest == Strings{"pos"});

  Args c = parse_args(Strings{"--local-rank=12", "--deepspeed_config=a=b.json"});
  CHECK(c.local_rank == 12);
  CHECK(c.config_path == "a=b.json");
  CHECK(c.rest.empty());
}

TEST_CASE("parse_args: defaults, --, argv form") {
  Args a = parse_args(Strings{});
  CHECK(a.config_path.empty());
  CHECK(a.local_rank == -1);

  Args b = parse_args(Strings{"x", "--", "--config", "y", "--local_rank=1"});
  CHECK(b.config_path.empty());
  CHECK(b.rest == Strings{"x", "--config", "y", "--local_rank=1"});

  // Look-alikes are the program's own.
  Args c = parse_args(Strings{"--configs", "--config_file=z", "--local_rankx=1"});
  CHECK(c.rest == Strings{"--configs", "--config_file=z", "--local_rankx=1"});

  char prog[] = "train", opt[] = "--config", path[] = "ds.json", extra[] = "-v";
  char* argv[] = {prog, opt, path, extra, nullptr};
  Args d = parse_args(4, argv);
  CHECK(d.config_path == "ds.json");
  CHECK(d.rest == Strings{"-v"});
}

TEST_CASE("parse_args: bad use throws UsageError") {
  CHECK_THROWS_AS(parse_args(Strings{"--deepspeed_config"}), UsageError);
  CHECK_THROWS_AS(parse_args(Strings{"--config="}), UsageError);
  CHECK_THROWS_AS(parse_args(Strings{"--local_rank", "two"}), UsageError);
  CHECK_THROWS_AS(parse_args(Strings{"--local_rank=-1"}), UsageError);
  CHECK_THROWS_AS(parse_args(Strings{"--local_rank=3x"}), UsageError);
  CHECK_THROWS_AS(parse_args(Strings{"--local_rank"}), UsageError);
  CHECK_THROWS_WITH(parse_args(Strings{"--config", "a.json", "--deepspeed_config", "b.json"}),
                    Catch::Contains("a.json") && Catch::Contains("b.json"));
}

TEST_CASE("drop_local_rank: the launcher's --local_rank goes, everything else stays") {
  CHECK(drop_local_rank(Strings{"--local_rank=2", "bench", "comm", "--sizes", "4K"}) ==
        Strings{"bench", "comm", "--sizes", "4K"});
  CHECK(drop_local_rank(Strings{"bench", "comm", "--local_rank", "0", "--json"}) ==
        Strings{"bench", "comm", "--json"});
  CHECK(drop_local_rank(Strings{"x", "--local-rank=1", "--config", "c.json"}) ==
        Strings{"x", "--config", "c.json"});
  CHECK(drop_local_rank(Strings{"x", "--", "--local_rank=1"}) ==
        Strings{"x", "--", "--local_rank=1"});
  CHECK_THROWS_AS(drop_local_rank(Strings{"--local_rank=x"}), UsageError);
  CHECK_THROWS_AS(drop_local_rank(Strings{"report", "--local_rank"}), UsageError);
}
