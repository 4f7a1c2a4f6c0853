// SwapDir on a real directory: layout and permissions (checked with stat), cleanup by the
// destructor, separate job ids, the ConfigErrors for a bad nvme_path, reuse of a stale rank dir,
// and clean_swap keeping a live owner's job dir while removing a dead one's.
#include <zero/error.h>
#include <zero/offload/swap_dir.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "offload_test_util.h"

using namespace zero::offload;
using zero::offload::test::TempDir;
namespace fs = std::filesystem;

extern char** environ;

namespace {
constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

mode_t mode_of(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

pid_t spawn(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) == 0);
  return pid;
}

// A job dir as another process would have left it: rank0 with that process's owner file.
void plant_job_dir(const std::string& job_dir, const SwapOwner& owner) {
  fs::create_directories(job_dir + "/rank0");
  std::ofstream(job_dir + "/rank0/owner") << owner.to_text();
  std::ofstream(job_dir + "/rank0/optimizer.swp") << "x";
}
}  // namespace

TEST_CASE("layout nvme_path/<job>/rank<N>, 0700 dirs, 0600 files, removed at the end",
          "[offload][swapdir]") {
  TempDir tmp;
  const mode_t old_umask = ::umask(0);  // the modes must not depend on the umask
  std::string rank_dir, job_dir, file_path;
  {
    SwapDir dir(tmp.path() + "/", "job-1", 2, kKey);
    rank_dir = dir.path();
    job_dir = dir.job_path();
    CHECK(rank_dir == tmp.path() + "/job-1/rank2");
    CHECK(job_dir == tmp.path() + "/job-1");
    CHECK(mode_of(job_dir) == 0700);
    CHECK(mode_of(rank_dir) == 0700);
    CHECK(mode_of(rank_dir + "/owner") == 0600);
    SwapFile f = dir.create_file("optimizer.swp", 10000);
    file_path = f.path();
    CHECK(file_path == rank_dir + "/optimizer.swp");
    CHECK(f.size_bytes() == 3 * kIoAlign);
    CHECK(mode_of(file_path) == 0600);
    struct stat st;
    REQUIRE(::stat(file_path.c_str(), &st) == 0);
    CHECK(st.st_size == 3 * kIoAlign);
    CHECK(st.st_blocks * 512 >= 3 * kIoAlign);  // preallocated
    CHECK((::fcntl(f.fd(), F_GETFL) & O_DIRECT) != 0);
    CHECK((::fcntl(f.fd(), F_GETFD) & FD_CLOEXEC) != 0);
    CHECK_THROWS_AS(dir.create_file("optimizer.swp", 4096), zero::IoError);  // O_EXCL
    CHECK_THROWS_AS(dir.create_file("../x", 4096), zero::UsageError);
    CHECK_THROWS_AS(dir.create_file("owner", 4096), zero::UsageError);
    SwapOwner owner;
    std::string text;
    std::ifstream in(rank_dir + "/owner");
    text.assign(std::istreambuf_iterator<char>(in), {});
    REQUIRE(SwapOwner::parse(text, &owner));
    CHECK(owner.pid == ::getpid());
    std::string why;
    CHECK_FALSE(owner.is_gone(&why));
    CHECK_THAT(why, Catch::Contains("in use by pid"));
  }
  ::umask(old_umask);
  CHECK_FALSE(fs::exists(rank_dir));
  CHECK_FALSE(fs::exists(job_dir));
  CHECK(fs::exists(tmp.path()));
  CHECK(fs::is_empty(tmp.path()));  // the O_DIRECT probe left nothing behind
}

TEST_CASE("ranks share a job dir, other job ids do not collide", "[offload][swapdir]") {
  TempDir tmp;
  auto a0 = std::make_unique<SwapDir>(tmp.path(), "jobA", 0, kKey);
  auto a1 = std::make_unique<SwapDir>(tmp.path(), "jobA", 1, kKey);
  SwapDir b0(tmp.path(), "jobB", 0, kKey);
  SwapFile fa = a0->create_file("p.swp", 4096);
  SwapFile fb = b0.create_file("p.swp", 4096);  // same name, other job: no clash
  CHECK(fa.path() != fb.path());
  CHECK_THROWS_AS(SwapDir(tmp.path(), "jobA", 1, kKey), zero::ConfigError);  // rank 1 is in use
  a0.reset();
  CHECK(fs::exists(tmp.path() + "/jobA"));  // rank 1 still there
  a1.reset();
  CHECK_FALSE(fs::exists(tmp.path() + "/jobA"));
  CHECK(fs::exists(b0.path() + "/p.swp"));
  SwapDir moved = std::move(b0);
  CHECK(moved.path() == tmp.path() + "/jobB/rank0");
  CHECK(b0.path().empty());
}

TEST_CASE("a bad nvme_path is a ConfigError naming key, path, reason and fallback",
          "[offload][swapdir]") {
  TempDir tmp;
  const std::string missing = tmp.path() + "/does-not-exist";
  CHECK_THROWS_WITH(SwapDir(missing, "j", 0, kKey),
                    Catch::StartsWith(std::string(kKey) + ": nvme_path \"" + missing + "\"") &&
                        Catch::Contains("does not exist") &&
                        Catch::Contains("No such file or directory") &&
                        Catch::Contains("use device \"cpu\" or a path on a local disk"));
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH(SwapDir(file, "j", 0, kKey), Catch::Contains("is not a directory"));
  CHECK_THROWS_AS(SwapDir(file, "j", 0, kKey), zero::ConfigError);
  CHECK_THROWS_AS(SwapDir(tmp.path(), "a/b", 0, kKey), zero::UsageError);

  const std::string ro = tmp.path() + "/readonly";
  fs::create_directory(ro);
  ::chmod(ro.c_str(), 0500);
  if (::geteuid() == 0) {
    // Root passes permission bits; the read-only case is tested on a read-only mount instead
    // (swap_mounts_test).
    WARN("skipped: a 0500 directory is writable for root; see offload_swap_mounts");
  } else {
    CHECK_THROWS_WITH(SwapDir(ro, "j", 0, kKey),
                      Catch::Contains("is not writable") && Catch::Contains("Permission denied"));
  }
  ::chmod(ro.c_str(), 0700);
}

TEST_CASE("a rank dir left by a dead process is reused, a live one's is not",
          "[offload][swapdir]") {
  TempDir tmp;
  pid_t dead = spawn({"true"});
  int status = 0;
  REQUIRE(::waitpid(dead, &status, 0) == dead);
  SwapOwner ghost = SwapOwner::of_process(::getpid());
  ghost.pid = dead;
  plant_job_dir(tmp.path() + "/job", ghost);
  {
    SwapDir dir(tmp.path(), "job", 0, kKey);
    CHECK_FALSE(fs::exists(dir.path() + "/optimizer.swp"));  // the stale dir was made anew
    dir.create_file("optimizer.swp", 4096);
  }
  CHECK_FALSE(fs::exists(tmp.path() + "/job"));

  plant_job_dir(tmp.path() + "/job2", SwapOwner::of_process(::getpid()));  // alive: us
  CHECK_THROWS_WITH(SwapDir(tmp.path(), "job2", 0, kKey), Catch::Contains("already exists") &&
                                                              Catch::Contains("in use by pid") &&
                                                              Catch::Contains("zero clean-swap"));
  CHECK(fs::exists(tmp.path() + "/job2/rank0/optimizer.swp"));  // left alone
}

TEST_CASE("clean_swap removes dead jobs' dirs and keeps live ones", "[offload][swapdir]") {
  TempDir tmp;
  pid_t live = spawn({"sleep", "60"});
  pid_t dead = spawn({"true"});
  int status = 0;
  REQUIRE(::waitpid(dead, &status, 0) == dead);

  plant_job_dir(tmp.path() + "/live-job", SwapOwner::of_process(live));
  SwapOwner gone = SwapOwner::of_process(::getpid());
  gone.pid = dead;
  plant_job_dir(tmp.path() + "/dead-job", gone);
  SwapOwner reused = SwapOwner::of_process(live);
  reused.start_ticks += 1;  // the live pid, but started at another time: a reused pid
  plant_job_dir(tmp.path() + "/reused-pid-job", reused);
  SwapOwner elsewhere = SwapOwner::of_process(live);
  elsewhere.host = "some-other-host";
  plant_job_dir(tmp.path() + "/remote-job", elsewhere);
  fs::create_directories(tmp.path() + "/not-ours/data");
  SwapDir mine(tmp.path(), "my-job", 0, kKey);

  CleanResult r = clean_swap(tmp.path(), false);
  std::vector<std::string> removed = r.removed;
  CHECK(removed ==
        std::vector<std::string>{tmp.path() + "/dead-job", tmp.path() + "/reused-pid-job"});
  std::map<std::string, std::string> kept(r.kept.begin(), r.kept.end());
  REQUIRE(kept.size() == 4);
  CHECK_THAT(kept[tmp.path() + "/live-job"],
             Catch::Contains("in use by pid " + std::to_string(live)));
  CHECK_THAT(kept[tmp.path() + "/remote-job"], Catch::Contains("not this host"));
  CHECK_THAT(kept[tmp.path() + "/not-ours"], Catch::Contains("not a swap job directory"));
  CHECK_THAT(kept[tmp.path() + "/my-job"], Catch::Contains("in use by pid"));
  CHECK(fs::exists(tmp.path() + "/live-job/rank0/owner"));

  ::kill(live, SIGKILL);
  REQUIRE(::waitpid(live, &status, 0) == live);
  r = clean_swap(tmp.path(), false);
  CHECK(r.removed == std::vector<std::string>{tmp.path() + "/live-job"});

  r = clean_swap(tmp.path(), true);  // force: every swap job dir, never "not-ours"
  CHECK(r.removed == std::vector<std::string>{tmp.path() + "/my-job", tmp.path() + "/remote-job"});
  REQUIRE(r.kept.size() == 1);
  CHECK(r.kept[0].first == tmp.path() + "/not-ours");
  CHECK(fs::exists(tmp.path() + "/not-ours/data"));
  CHECK_THROWS_AS(clean_swap(tmp.path() + "/nope", false), zero::IoError);
}
