// Unit tests of zerorun's pure pieces: hostfile and --include/--exclude parsing (DeepSpeed's
// semantics), option parsing, shell quoting, rank environments and remote command lines.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <zero/error.h>

#include "check_build.h"
#include "environment.h"
#include "options.h"
#include "remote.h"
#include "resources.h"

using namespace zero::launcher;

namespace {
Resources pool2x4() {
  return expand_slots({{"worker-0", 4}, {"worker-1", 4}});
}
Options opts(std::vector<std::string> args) {
  args.push_back("prog");
  return parse_options(args);
}
}  // namespace

TEST_CASE("hostfile: DeepSpeed syntax", "[hostfile]") {
  auto hosts = parse_hostfile(
      "# cluster\n\nworker-0 slots=4\n  worker-1   slots=2 # trailing comment\n10.0.0.3 slots=16\n",
      "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].host == "worker-0");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].host == "worker-1");
  CHECK(hosts[1].slots == 2);
  CHECK(hosts[2].host == "10.0.0.3");
  CHECK(hosts[2].slots == 16);
}

TEST_CASE("hostfile: errors", "[hostfile]") {
  CHECK_THROWS_AS(parse_hostfile("", "hf"), zero::UsageError);
  CHECK_THROWS_AS(parse_hostfile("# only a comment\n", "hf"), zero::UsageError);
  CHECK_THROWS_AS(parse_hostfile("worker-0\n", "hf"), zero::UsageError);
  CHECK_THROWS_AS(parse_hostfile("worker-0 slots=x\n", "hf"), zero::UsageError);
  CHECK_THROWS_AS(parse_hostfile("worker-0 gpus=2\n", "hf"), zero::UsageError);
  CHECK_THROWS_WITH(parse_hostfile("a slots=1\nb slots=2\na slots=3\n", "my.hf"),
                    Catch::Contains("my.hf:3") && Catch::Contains("multiple entries for a"));
  CHECK_FALSE(read_hostfile("/nonexistent/zerorun/hostfile").has_value());
}

TEST_CASE("include: whole hosts and slot lists", "[filter]") {
  Resources r = filter_resources(pool2x4(), "worker-0@worker-1:0,2", "");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == NodeSlots{"worker-0", {0, 1, 2, 3}});
  CHECK(r[1] == NodeSlots{"worker-1", {0, 2}});
  // The hostfile order decides node ranks, not the order of the include string.
  r = filter_resources(pool2x4(), "worker-1:1@worker-0:3", "");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == NodeSlots{"worker-0", {3}});
  CHECK(r[1] == NodeSlots{"worker-1", {1}});
  // Duplicates are removed, stable.
  r = filter_resources(pool2x4(), "worker-1:2,0,2", "");
  REQUIRE(r.size() == 1);
  CHECK(r[0] == NodeSlots{"worker-1", {2, 0}});
  CHECK(filter_resources(pool2x4(), "", "") == pool2x4());
}

TEST_CASE("exclude: slots and whole hosts", "[filter]") {
  Resources r = filter_resources(pool2x4(), "", "worker-1:0");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == NodeSlots{"worker-0", {0, 1, 2, 3}});
  CHECK(r[1] == NodeSlots{"worker-1", {1, 2, 3}});
  r = filter_resources(pool2x4(), "", "worker-0");
  REQUIRE(r.size() == 1);
  CHECK(r[0] == NodeSlots{"worker-1", {0, 1, 2, 3}});
  // Excluding every slot of a host drops the host.
  r = filter_resources(pool2x4(), "", "worker-0:0,1,2,3@worker-1:3");
  REQUIRE(r.size() == 1);
  CHECK(r[0] == NodeSlots{"worker-1", {0, 1, 2}});
}

TEST_CASE("include/exclude: errors", "[filter]") {
  CHECK_THROWS_WITH(filter_resources(pool2x4(), "worker-9", ""),
                    Catch::Contains("'worker-9' not found in hostfile"));
  CHECK_THROWS_WITH(filter_resources(pool2x4(), "", "worker-9:0"),
                    Catch::Contains("not found in hostfile"));
  CHECK_THROWS_WITH(filter_resources(pool2x4(), "worker-0:4", ""), Catch::Contains("no slot '4'"));
  CHECK_THROWS_WITH(filter_resources(pool2x4(), "", "worker-1:7"), Catch::Contains("no slot '7'"));
  CHECK_THROWS_AS(filter_resources(pool2x4(), "worker-0:a", ""), zero::UsageError);
  CHECK_THROWS_AS(filter_resources(pool2x4(), "worker-0:", ""), zero::UsageError);
  CHECK_THROWS_AS(filter_resources(pool2x4(), "worker-0:1:2", ""), zero::UsageError);
  CHECK_THROWS_WITH(filter_resources(pool2x4(), "worker-0", "worker-1"),
                    Catch::Contains("mutually exclusive"));
}

TEST_CASE("world info round trip and rank offsets", "[filter]") {
  Resources r = filter_resources(pool2x4(), "worker-0:1,3@worker-1", "");
  std::string text = encode_world_info(r);
  CHECK(text == "worker-0:1,3@worker-1:0,1,2,3");
  CHECK(decode_world_info(text) == r);
  CHECK(total_slots(r) == 6);
  CHECK(rank_offset(r, 0) == 0);
  CHECK(rank_offset(r, 1) == 2);
  CHECK_THROWS_AS(rank_offset(r, 2), zero::UsageError);
  CHECK_THROWS_AS(decode_world_info("worker-0"), zero::UsageError);
}

TEST_CASE("select_resources: hostfile, num_nodes, num_gpus, local defaults", "[select]") {
  std::vector<HostEntry> hf = {{"a", 2}, {"b", 2}, {"c", 4}};
  LocalDevices cpu;  // no GPUs, no CUDA_VISIBLE_DEVICES
  Resources r = select_resources(opts({}), hf, cpu, nullptr);
  REQUIRE(r.size() == 3);
  CHECK(total_slots(r) == 8);
  r = select_resources(opts({"--num_nodes", "2"}), hf, cpu, nullptr);
  REQUIRE(r.size() == 2);
  CHECK(r[1] == NodeSlots{"b", {0, 1}});
  r = select_resources(opts({"--num_gpus=3"}), hf, cpu, nullptr);
  CHECK(r[0] == NodeSlots{"a", {0, 1, 2}});
  CHECK(total_slots(r) == 9);
  CHECK_THROWS_WITH(select_resources(opts({"--num_nodes", "4"}), hf, cpu, nullptr),
                    Catch::Contains("only 3 host"));
  CHECK_THROWS_WITH(select_resources(opts({"--num_gpus", "1", "--include", "a"}), hf, cpu, nullptr),
                    Catch::Contains("cannot combine"));
  r = select_resources(opts({"--exclude", "b@c:0,1"}), hf, cpu, nullptr);
  REQUIRE(r.size() == 2);
  CHECK(r[1] == NodeSlots{"c", {2, 3}});

  // No hostfile: one local node, 1 process without GPUs, one per GPU otherwise.
  r = select_resources(opts({}), std::nullopt, cpu, nullptr);
  CHECK(r == Resources{{"localhost", {0}}});
  r = select_resources(opts({"--nproc_per_node", "3"}), std::nullopt, cpu, nullptr);
  CHECK(r == Resources{{"localhost", {0, 1, 2}}});
  LocalDevices gpus{4, ""};
  r = select_resources(opts({}), std::nullopt, gpus, nullptr);
  CHECK(r == Resources{{"localhost", {0, 1, 2, 3}}});
  std::vector<std::string> notes;
  r = select_resources(opts({}), std::nullopt, LocalDevices{4, "1,3"}, &notes);
  CHECK(r == Resources{{"localhost", {1, 3}}});
  CHECK(notes.size() == 1);
  CHECK_THROWS_WITH(select_resources(opts({"--num_nodes", "2"}), std::nullopt, cpu, nullptr),
                    Catch::Contains("no hostfile"));
  // torchrun style: --node_rank without a hostfile means num_nodes alike nodes.
  r = select_resources(opts({"--num_nodes", "2", "--node_rank", "1", "--num_gpus", "2"}),
                       std::nullopt, cpu, nullptr);
  CHECK(r.size() == 2);
  CHECK(total_slots(r) == 4);
  // --world_info (from node 0) wins over everything.
  r = select_resources(opts({"--world_info", "x:0,1@y:0"}), hf, cpu, nullptr);
  CHECK(r == Resources{{"x", {0, 1}}, {"y", {0}}});
}

TEST_CASE("options: elastic restarts", "[options]") {
  Options o =
      parse_options({"--max_restarts", "3", "--min_nodes=2", "--max_elastic_nodes", "4", "p"});
  CHECK(o.max_restarts == 3);
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 4);
  const Options plain = parse_options({"p"});
  CHECK(plain.max_restarts == 0);
  CHECK(plain.min_nodes == 1);
  CHECK(plain.max_nodes == -1);
  CHECK_THROWS_WITH(parse_options({"--max_restarts", "-1", "p"}), Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(parse_options({"--min_nodes", "3", "--max_nodes", "2", "p"}),
                    Catch::Contains("--max_nodes >= --min_nodes"));
}

TEST_CASE("options: flags, values and the program's own arguments", "[options]") {
  Options o = parse_options({"-H", "hf", "--include=a:0", "--master_port", "1234",
                             "--no_local_rank", "--launcher", "PDSH", "--enable_each_rank_log",
                             "logs", "--save_pid", "./train", "--lr", "0.1", "--num_gpus", "9"});
  CHECK(o.hostfile == "hf");
  CHECK(o.hostfile_given);
  CHECK(o.include == "a:0");
  CHECK(o.master_port == 1234);
  CHECK(o.no_local_rank);
  CHECK(o.launcher == LauncherKind::kPdsh);
  CHECK(o.each_rank_log_dir == "logs");
  CHECK(o.save_pid);
  CHECK(o.num_gpus == -1);  // belongs to the program
  CHECK(o.program == "./train");
  CHECK(o.program_args == std::vector<std::string>{"--lr", "0.1", "--num_gpus", "9"});
  CHECK(parse_options({"--", "--weird-program"}).program == "--weird-program");
  CHECK_THROWS_WITH(parse_options({"--num_gpu", "2", "p"}), Catch::Contains("unknown option"));
  CHECK_THROWS_AS(parse_options({"--num_gpus", "two", "p"}), zero::UsageError);
  CHECK_THROWS_AS(parse_options({"--num_gpus"}), zero::UsageError);
  CHECK_THROWS_AS(parse_options({"--launcher", "mpich", "p"}), zero::UsageError);
  CHECK_THROWS_AS(parse_options({"--save_pid=1", "p"}), zero::UsageError);
  CHECK_THROWS_AS(parse_options({"-i", "a", "-e", "b", "p"}), zero::UsageError);
  CHECK_THROWS_WITH(parse_options({"--num_nodes", "2"}), Catch::Contains("missing PROGRAM"));
  CHECK(parse_options({"--help"}).help);
}

TEST_CASE("shell words: split and quote round trip", "[options]") {
  CHECK(split_shell_words("-p 22  -o 'Strict HostKeyChecking=no' -i \"a b\\\"c\" x\\ y") ==
        std::vector<std::string>{"-p", "22", "-o", "Strict HostKeyChecking=no", "-i", "a b\"c",
                                 "x y"});
  CHECK(split_shell_words("").empty());
  CHECK(split_shell_words("''") == std::vector<std::string>{""});
  CHECK_THROWS_AS(split_shell_words("'open"), zero::UsageError);
  std::vector<std::string> words = {"plain", "with space", "it's", "", "$HOME", "a\"b"};
  CHECK(split_shell_words(shell_join(words)) == words);
  CHECK(shell_quote("--master_addr=10.0.0.1") == "--master_addr=10.0.0.1");
}

TEST_CASE("rank environment and argv", "[env]") {
  EnvMap base = {{"PATH", "/bin"}, {"RANK", "99"}, {"CUDA_VISIBLE_DEVICES", "7"}};
  EnvMap exports = {{"NCCL_DEBUG", "INFO"}};
  RankPlacement p{5, 1, 8, 4, 1, 2};
  EnvMap env = build_rank_env(base, exports, p, "10.0.0.1", 29511, "0,2,4,6");
  CHECK(env["RANK"] == "5");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["MASTER_ADDR"] == "10.0.0.1");
  CHECK(env["MASTER_PORT"] == "29511");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "0,2,4,6");
  CHECK(env["NCCL_DEBUG"] == "INFO");
  CHECK(env["PATH"] == "/bin");
  CHECK(env["CROSS_RANK"] == "1");
  CHECK(env["CROSS_SIZE"] == "2");
  // CPU node: CUDA_VISIBLE_DEVICES is left as it was.
  CHECK(build_rank_env(base, {}, p, "h", 1, "")["CUDA_VISIBLE_DEVICES"] == "7");

  Options o = parse_options({"./train", "--x", "1"});
  CHECK(rank_argv(o, 3) == std::vector<std::string>{"./train", "--local_rank=3", "--x", "1"});
  o.no_local_rank = true;
  CHECK(rank_argv(o, 3) == std::vector<std::string>{"./train", "--x", "1"});
}

TEST_CASE("exports: prefixes and .deepspeed_env", "[env]") {
  EnvMap env = {{"NCCL_IB_DISABLE", "1"},       {"ZERO_TIMEOUT", "30"}, {"UCX_TLS", "tcp"},
                {"GLOO_SOCKET_IFNAME", "eth1"}, {"HOME", "/root"},      {"MY_NCCL", "no"}};
  EnvMap ex = collect_exports(env, "", "");
  CHECK(ex == EnvMap{{"NCCL_IB_DISABLE", "1"},
                     {"ZERO_TIMEOUT", "30"},
                     {"UCX_TLS", "tcp"},
                     {"GLOO_SOCKET_IFNAME", "eth1"}});
  EnvMap file = parse_env_file("# comment\nA=1\n B = two words \n\nC=x=y\n", "f");
  CHECK(file == EnvMap{{"A", "1"}, {"B", "two words"}, {"C", "x=y"}});
  CHECK_THROWS_WITH(parse_env_file("A=1\nnot a pair\n", "/x/.deepspeed_env"),
                    Catch::Contains("/x/.deepspeed_env:2"));
  LocalDevices none = detect_local_devices("/nonexistent/gpus", "/nonexistent/dev");
  CHECK(none.gpu_count == 0);
}

TEST_CASE("local GPUs: /proc/driver/nvidia/gpus, else /dev/nvidiaN", "[env]") {
  char tmpl[] = "/tmp/zerorun_gpus_XXXXXX";
  const std::string root = mkdtemp(tmpl);
  const std::string proc = root + "/proc", dev = root + "/dev";
  std::filesystem::create_directories(proc);
  std::filesystem::create_directories(dev);
  for (const char* f : {"nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"})
    std::ofstream(dev + "/" + f) << "";
  CHECK(detect_local_devices(proc, dev).gpu_count == 2);
  for (const char* bus : {"0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0"})
    std::filesystem::create_directories(proc + "/" + bus);
  CHECK(detect_local_devices(proc, dev).gpu_count == 3);
  std::filesystem::remove_all(root);
}

TEST_CASE("remote: node command, ssh and pdsh", "[remote]") {
  Options o = parse_options({"--launcher_args", "-i /k/id -o StrictHostKeyChecking=no",
                             "--ssh_port", "2222", "--no_local_rank", "./train", "a b"});
  Resources r = {{"h0", {0, 1}}, {"h1", {0, 1}}};
  auto node = node_command(o, r, 1, "h0", "/opt/bin/zerorun");
  CHECK(node == std::vector<std::string>{"/opt/bin/zerorun", "--world_info=h0:0,1@h1:0,1",
                                         "--node_rank=1", "--master_addr=h0", "--master_port=29500",
                                         "--grace_period=5", "--exit_on_stdin_eof",
                                         "--no_local_rank", "--", "./train", "a b"});
  std::string remote = remote_shell_command("/work dir", {{"NCCL_X", "1 2"}}, node);
  CHECK(remote.rfind("cd '/work dir' && exec env 'NCCL_X=1 2' /opt/bin/zerorun ", 0) == 0);
  CHECK(split_shell_words(remote).back() == "a b");
  auto ssh = ssh_command(o, "h1", remote, "-q");
  CHECK(ssh == std::vector<std::string>{"ssh", "-i", "/k/id", "-o", "StrictHostKeyChecking=no",
                                        "-q", "-p", "2222", "h1", remote});
  auto pdsh = pdsh_command(o, "h1", remote);
  CHECK(pdsh == std::vector<std::string>{"pdsh", "-S", "-f", "1024", "-w", "h1", "-i", "/k/id",
                                         "-o", "StrictHostKeyChecking=no", remote});
  EnvMap penv = pdsh_env(o, "-q");
  CHECK(penv["PDSH_RCMD_TYPE"] == "ssh");
  CHECK(penv["PDSH_SSH_ARGS_APPEND"] == "-q -p 2222");
}

TEST_CASE("remote: srun and mpirun command lines", "[remote]") {
  Options o = parse_options({"--launcher", "slurm", "--launcher_args", "--partition=gpu",
                             "--master_port", "29600", "./train", "--lr=1"});
  Resources r = {{"n1", {0, 1, 2, 3}}, {"n2", {0, 1, 2, 3}}};
  EnvMap ex = {{"NCCL_DEBUG", "WARN"}};
  CHECK(srun_command(o, r, true, ex) ==
        std::vector<std::string>{"srun", "--ntasks=8", "--nodes=2", "--ntasks-per-node=4",
                                 "--nodelist=n1,n2", "--partition=gpu",
                                 "--export=ALL,MASTER_PORT=29600,NCCL_DEBUG=WARN", "./train",
                                 "--lr=1"});
  // Without a hostfile the Slurm allocation decides the placement.
  CHECK(srun_command(o, {{"localhost", {0}}}, false, {}) ==
        std::vector<std::string>{"srun", "--partition=gpu", "--export=ALL,MASTER_PORT=29600",
                                 "./train", "--lr=1"});
  o = parse_options({"--launcher", "openmpi", "--launcher_args", "--oversubscribe", "--master_addr",
                     "n1", "./train"});
  CHECK(mpirun_command(o, {{"n1", {0, 1}}, {"n2", {0}}}, ex) ==
        std::vector<std::string>{"mpirun", "-n", "3", "--host", "n1:2,n2:1", "--oversubscribe",
                                 "-x", "MASTER_ADDR=n1", "-x", "MASTER_PORT=29500", "-x",
                                 "NCCL_DEBUG=WARN", "./train"});
  CHECK_THROWS_WITH(mpirun_command(o, {{"n1", {1, 3}}}, ex), Catch::Contains("cannot pick slots"));
}

TEST_CASE("job token: fresh per job, never on srun's or mpirun's command line", "[remote]") {
  const std::string a = new_job_token(), b = new_job_token();
  CHECK(a.size() == 32);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
  const EnvMap ex = {{"NCCL_DEBUG", "WARN"}, {kJobTokenVar, a}};
  Options o = parse_options({"--launcher", "slurm", "./train"});
  for (const std::string& word : srun_command(o, {{"localhost", {0}}}, false, ex))
    CHECK(word.find(a) == std::string::npos);
  o = parse_options({"--launcher", "openmpi", "./train"});
  const std::vector<std::string> mpirun = mpirun_command(o, {{"n1", {0}}}, ex);
  for (const std::string& word : mpirun) CHECK(word.find(a) == std::string::npos);
  CHECK(std::find(mpirun.begin(), mpirun.end(), "ZERO_JOB_TOKEN") != mpirun.end());
  CHECK(parse_options({"--check-build"}).check_build);
  CHECK(check_build_text("/nonexistent").find("[ ] Slurm (not on PATH: srun, sbatch)") !=
        std::string::npos);
}
