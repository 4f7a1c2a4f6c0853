// Crash-safe file operations: safe names, temporary directories, publishing a directory (also
// over an existing one), atomic replacement of small files, bounded reads and cleanup.
#include <sys/stat.h>
#include <unistd.h>

#include <zero/checkpoint/atomic_files.h>

#include "ckpt_test_util.h"

using namespace zero::ckpt;
using ckpt_test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("is_safe_component") {
  for (const char* ok : {"global_step100", "a", "rank00001.safetensors", ".hidden", "a.b",
                         "tag-1_x", "caf\xc3\xa9", "..."})
    CHECK(is_safe_component(ok) == (std::string(ok) != "..."));
  CHECK(is_safe_component(std::string(255, 'a')));
  CHECK_FALSE(is_safe_component(std::string(256, 'a')));
  for (const char* bad : {"", ".", "..", "a/b", "/abs", "a\\b", "../x", "x/..", "a..b", "..hidden"})
    CHECK_FALSE(is_safe_component(bad));
  CHECK_FALSE(is_safe_component(std::string("a\0b", 3)));
}

TEST_CASE("unique_nonce is a safe component and differs between calls") {
  std::string a = unique_nonce(), b = unique_nonce();
  CHECK(is_safe_component(a));
  CHECK(a != b);
  CHECK(a.rfind(std::to_string(getpid()) + "-", 0) == 0);
}

TEST_CASE("make_temp_dir creates parents and refuses unsafe names and reuse") {
  TempDir dir;
  const std::string parent = dir / "ckpts/run1";
  std::string t = make_temp_dir(parent, "global_step5", "n1");
  CHECK(t == parent + "/global_step5.tmp-n1");
  CHECK(fs::is_directory(t));
  CHECK_CKPT_ERROR(make_temp_dir(parent, "global_step5", "n1"), t,
                   "cannot create temporary directory");
  CHECK_CKPT_ERROR(make_temp_dir(parent, "../evil", "n2"), parent,
                   "unsafe checkpoint tag '../evil'");
  CHECK_CKPT_ERROR(make_temp_dir(parent, "a/b", "n2"), parent, "unsafe checkpoint tag");
  CHECK_CKPT_ERROR(make_temp_dir(parent, "ok", "x/y"), parent, "unsafe temporary-name nonce");
  CHECK(make_temp_dir(parent + "/", "t", "n") == parent + "/t.tmp-n");
}

TEST_CASE("fsync_path syncs files and directories and names missing paths") {
  TempDir dir;
  ckpt_test::write_bytes(dir / "f", "data");
  fsync_path(dir / "f");
  fsync_path(dir.path());
  CHECK_CKPT_ERROR(fsync_path(dir / "missing"), dir / "missing", "cannot open for fsync");
}

TEST_CASE("publish_dir moves a temporary directory into place, also over an existing one") {
  TempDir dir;
  const std::string final_dir = dir / "global_step1";
  std::string t1 = make_temp_dir(dir.path(), "global_step1", unique_nonce());
  ckpt_test::write_bytes(t1 + "/rank0", "first");
  fs::create_directory(t1 + "/sub");
  ckpt_test::write_bytes(t1 + "/sub/x", "nested");
  publish_dir(t1, final_dir);
  CHECK_FALSE(fs::exists(t1));
  CHECK(ckpt_test::read_bytes(final_dir + "/rank0") == "first");
  CHECK(ckpt_test::read_bytes(final_dir + "/sub/x") == "nested");

  // A re-save of the same tag replaces the directory as a whole; nothing old is left around.
  std::string t2 = make_temp_dir(dir.path(), "global_step1", unique_nonce());
  ckpt_test::write_bytes(t2 + "/rank0", "second");
  publish_dir(t2, final_dir);
  CHECK(ckpt_test::read_bytes(final_dir + "/rank0") == "second");
  CHECK_FALSE(fs::exists(final_dir + "/sub"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path()))
    left.push_back(e.path().filename().string());
  CHECK(left == std::vector<std::string>{"global_step1"});

  CHECK_CKPT_ERROR(publish_dir(dir / "nope", final_dir), dir / "nope",
                   "not a directory to publish");
  CHECK(ckpt_test::read_bytes(final_dir + "/rank0") == "second");
}

TEST_CASE("publish_dir puts the previous directory back when the rename fails") {
  TempDir dir;
  const std::string final_dir = dir / "tag";
  std::string t1 = make_temp_dir(dir.path(), "tag", "a");
  ckpt_test::write_bytes(t1 + "/f", "old");
  publish_dir(t1, final_dir);
  // Renaming a directory into its own subdirectory fails (EINVAL) after the old one moved aside.
  std::string inner = make_temp_dir(final_dir, "x", "b");
  CHECK_CKPT_ERROR(publish_dir(inner, final_dir), final_dir, "cannot publish");
  CHECK(ckpt_test::read_bytes(final_dir + "/f") == "old");
}

TEST_CASE("symbolic links are synced around and removed, never followed") {
  TempDir dir;
  TempDir outside;
  ckpt_test::write_bytes(outside / "keep", "mine");
  std::string t = make_temp_dir(dir.path(), "tag", "n");
  REQUIRE(symlink(outside.path().c_str(), (t + "/link").c_str()) == 0);
  publish_dir(t, dir / "tag");
  remove_tree(dir / "tag");
  CHECK_FALSE(fs::exists(dir / "tag"));
  CHECK(ckpt_test::read_bytes(outside / "keep") == "mine");
  remove_tree(dir / "never-existed");
}

TEST_CASE("atomic_write_file replaces contents; read_small_file bounds the size") {
  TempDir dir;
  const std::string path = dir / "latest";
  atomic_write_file(path, "global_step1");
  CHECK(read_small_file(path, 64) == "global_step1");
  atomic_write_file(path, "global_step2");
  CHECK(read_small_file(path, 64) == "global_step2");
  atomic_write_file(path, "");
  CHECK(read_small_file(path, 0).empty());
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == (0644 & ~[] {
          mode_t m = umask(0);
          umask(m);
          return m;
        }()));
  atomic_write_file(path, std::string(1000, 'z'));
  CHECK_CKPT_ERROR(read_small_file(path, 999), path, "is 1000 bytes, more than the 999");
  CHECK(read_small_file(path, 1000).size() == 1000);
  CHECK_CKPT_ERROR(read_small_file(dir / "missing", 10), dir / "missing", "cannot open");
  CHECK_CKPT_ERROR(atomic_write_file(dir / "no/dir/latest", "x"), dir / "no/dir/latest",
                   "cannot create temporary file");
  CHECK(list_temp_dirs(dir.path()).empty());
}

TEST_CASE("list_temp_dirs finds leftovers of crashed saves, not old copies or finished tags") {
  TempDir dir;
  CHECK(list_temp_dirs(dir / "missing").empty());
  make_temp_dir(dir.path(), "global_step3", "n1");
  make_temp_dir(dir.path(), "global_step2", "n9");
  fs::create_directory(dir / "global_step1");
  fs::create_directory(dir / "global_step1.old-123");
  ckpt_test::write_bytes(dir / "latest.tmp-1-abc", "x");
  ckpt_test::write_bytes(dir / ".tmp-x", "not ours");
  CHECK(list_temp_dirs(dir.path()) == std::vector<std::string>{dir / "global_step2.tmp-n9",
                                                               dir / "global_step3.tmp-n1",
                                                               dir / "latest.tmp-1-abc"});
  for (const std::string& p : list_temp_dirs(dir.path())) remove_tree(p);
  CHECK(list_temp_dirs(dir.path()).empty());
  CHECK(fs::is_directory(dir / "global_step1.old-123"));
}

TEST_CASE("make_dirs and rename_into_place") {
  TempDir dir;
  const std::string d = dir / "a/b/c";
  make_dirs(d);
  make_dirs(d);  // existing: fine
  CHECK(fs::is_directory(d));
  ckpt_test::write_bytes(dir / "file", "x");
  CHECK_CKPT_ERROR(make_dirs(dir / "file/sub"), dir / "file/sub", "cannot create directory");

  const std::string path = d + "/model.safetensors";
  ckpt_test::write_bytes(path, "old");
  ckpt_test::write_bytes(path + ".tmp-1", "new");
  rename_into_place(path + ".tmp-1", path);
  CHECK(ckpt_test::read_bytes(path) == "new");
  CHECK_FALSE(fs::exists(path + ".tmp-1"));
  // Replacing a directory by a file fails: the temporary file goes, the directory stays.
  ckpt_test::write_bytes(path + ".tmp-2", "newer");
  CHECK_CKPT_ERROR(rename_into_place(path + ".tmp-2", dir / "a"), dir / "a", "cannot replace");
  CHECK_FALSE(fs::exists(path + ".tmp-2"));
  CHECK(fs::is_directory(d));
}
