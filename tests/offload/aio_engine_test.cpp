// AioEngine on real files with real io_uring: random-data round trips under every combination
// of the aio options, many tickets in flight, refused unaligned requests, and read errors that
// name the file and offset and fail only their own ticket.
#include <zero/error.h>
#include <zero/offload/aio.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "offload_test_util.h"

using namespace zero::offload;
using zero::offload::test::fill_random;
using zero::offload::test::io_uring_ok;
using zero::offload::test::TempDir;

namespace {
constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";
}

TEST_CASE("io_uring works on this kernel", "[offload][aio]") {
  const std::string reason = io_uring_unavailable_reason();
  INFO(reason);
  // Where the kernel forbids it, the reason must say so, and the cases below cannot run.
  if (!reason.empty()) {
    CHECK(reason.find("io_uring") != std::string::npos);
    zero::test_support::skip("io_uring is unavailable here: " + reason);
  }
}

TEST_CASE("aio options out of range are ConfigErrors naming the key", "[offload][aio]") {
  AioOptions bad_block;
  bad_block.block_size_bytes = 1000;
  CHECK_THROWS_WITH(AioEngine(bad_block, 0), Catch::Contains("aio.block_size"));
  AioOptions bad_depth;
  bad_depth.queue_depth = 0;
  CHECK_THROWS_AS(AioEngine(bad_depth, 0), zero::ConfigError);
  AioOptions bad_par;
  bad_par.intra_op_parallelism = 0;
  CHECK_THROWS_WITH(AioEngine(bad_par, 0), Catch::Contains("aio.intra_op_parallelism"));
}

TEST_CASE("round trip of random data under every aio setting", "[offload][aio]") {
  if (!io_uring_ok()) return;
  TempDir tmp;
  SwapDir dir(tmp.path(), "job", 0, kKey);
  // Not a multiple of any block size, so every request ends with a short block.
  const int64_t bytes = 3 * 1048576 + 3 * kIoAlign;
  AlignedBuffer src(bytes), dst(bytes);
  int file_no = 0;
  for (int64_t block : {int64_t{4096}, int64_t{65536}, int64_t{1048576}})
    for (int depth : {1, 4, 32})
      for (int par : {1, 3})
        for (bool single : {false, true})
          for (bool overlap : {true, false}) {
            AioOptions o;
            o.block_size_bytes = block;
            o.queue_depth = depth;
            o.intra_op_parallelism = par;
            o.single_submit = single;
            o.overlap_events = overlap;
            INFO("block " << block << " depth " << depth << " parallelism " << par << " single "
                          << single << " overlap " << overlap);
            AioEngine aio(o, 0);
            SwapFile file = dir.create_file("f" + std::to_string(file_no), bytes);
            fill_random(src.data(), bytes, static_cast<uint64_t>(++file_no));
            std::memset(dst.data(), 0xEE, static_cast<size_t>(bytes));  // poison
            // Written in three requests, read back in one.
            const int64_t cut1 = 5 * kIoAlign, cut2 = bytes - 2 * 1048576;
            auto t1 = aio.write(file, 0, src.data(), cut1);
            auto t2 = aio.write(file, cut1, src.as<char>() + cut1, cut2 - cut1);
            auto t3 = aio.write(file, cut2, src.as<char>() + cut2, bytes - cut2);
            aio.wait(t2);
            aio.wait(t1);
            aio.wait(t3);
            CHECK(aio.bytes_written() == bytes);
            aio.wait(aio.read(file, 0, dst.data(), bytes));
            CHECK(aio.bytes_read() == bytes);
            REQUIRE(std::memcmp(src.data(), dst.data(), static_cast<size_t>(bytes)) == 0);
          }
}

TEST_CASE("many tickets in flight, waited for in any order", "[offload][aio]") {
  if (!io_uring_ok()) return;
  TempDir tmp;
  SwapDir dir(tmp.path(), "job", 3, kKey);
  AioOptions o;
  o.block_size_bytes = 8192;
  o.queue_depth = 4;
  o.intra_op_parallelism = 2;
  AioEngine aio(o, 3);
  const int n = 200;
  std::vector<int64_t> sizes(n), offsets(n);
  for (int i = 0; i < n; ++i) sizes[i] = kIoAlign * (1 + (i * 7) % 9);
  std::exclusive_scan(sizes.begin(), sizes.end(), offsets.begin(), int64_t{0});
  const int64_t total = offsets.back() + sizes.back();
  SwapFile file = dir.create_file("many", total);
  AlignedBuffer src(total), dst(total);
  fill_random(src.data(), total, 42);
  std::memset(dst.data(), 0xEE, static_cast<size_t>(total));

  std::vector<AioEngine::Ticket> tickets;
  for (int i = 0; i < n; ++i)
    tickets.push_back(aio.write(file, offsets[i], src.as<char>() + offsets[i], sizes[i]));
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (int i : order) aio.wait(tickets[i]);
  for (int i : order) aio.wait(tickets[i]);  // a finished ticket: returns at once
  CHECK(aio.bytes_written() == total);

  for (int i = 0; i < n; ++i) aio.read(file, offsets[i], dst.as<char>() + offsets[i], sizes[i]);
  aio.wait_all();
  CHECK(aio.bytes_read() == total);
  CHECK(std::memcmp(src.data(), dst.data(), static_cast<size_t>(total)) == 0);
  CHECK(aio.is_completed(tickets.front()));
  CHECK_THROWS_AS(aio.wait(100000), zero::UsageError);
}

TEST_CASE("the destructor waits for what is in flight", "[offload][aio]") {
  if (!io_uring_ok()) return;
  TempDir tmp;
  SwapDir dir(tmp.path(), "job", 0, kKey);
  const int64_t bytes = 8 * 1048576;
  SwapFile file = dir.create_file("f", bytes);
  AlignedBuffer src(bytes), dst(bytes);
  fill_random(src.data(), bytes, 9);
  AioOptions o;
  o.block_size_bytes = 65536;
  o.queue_depth = 2;
  {
    AioEngine aio(o, 0);
    aio.write(file, 0, src.data(), bytes);
  }  // no wait
  AioEngine aio(o, 0);
  aio.wait(aio.read(file, 0, dst.data(), bytes));
  CHECK(std::memcmp(src.data(), dst.data(), static_cast<size_t>(bytes)) == 0);
}

TEST_CASE("unaligned requests are refused", "[offload][aio]") {
  if (!io_uring_ok()) return;
  TempDir tmp;
  SwapDir dir(tmp.path(), "job", 0, kKey);
  SwapFile file = dir.create_file("f", 65536);
  AlignedBuffer buf(65536);
  AioEngine aio(AioOptions{}, 0);
  CHECK_THROWS_AS(aio.write(file, 0, buf.as<char>() + 512, 4096), zero::UsageError);
  CHECK_THROWS_AS(aio.write(file, 100, buf.data(), 4096), zero::UsageError);
  CHECK_THROWS_WITH(aio.read(file, 0, buf.data(), 1000), Catch::Contains("multiples of 4096"));
  CHECK_THROWS_AS(aio.read(file, 0, buf.data(), 0), zero::UsageError);
  CHECK_THROWS_AS(aio.read(file, -4096, buf.data(), 4096), zero::UsageError);
  SwapFile closed;
  CHECK_THROWS_AS(aio.read(closed, 0, buf.data(), 4096), zero::UsageError);
  aio.wait_all();  // nothing was issued
}

TEST_CASE("a read past the end fails its ticket only, naming file and offset", "[offload][aio]") {
  if (!io_uring_ok()) return;
  TempDir tmp;
  SwapDir dir(tmp.path(), "job", 5, kKey);
  SwapFile file = dir.create_file("short", 8192);
  AlignedBuffer buf(4 * 65536);
  AioOptions o;
  o.block_size_bytes = 65536;
  AioEngine aio(o, 5);
  // The first block reads 8192 bytes (a short read), then hits the end of the file at 8192.
  auto bad = aio.read(file, 0, buf.data(), 65536);
  auto good = aio.read(file, 0, buf.data(), 8192);
  aio.wait(good);
  try {
    aio.wait(bad);
    FAIL("no IoError");
  } catch (const zero::IoError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::StartsWith("rank 5: io_uring read of " + file.path() +
                                       " at offset 8192 (57344 bytes): unexpected end of file"));
  }
  aio.wait(bad);  // reported once
  CHECK(aio.bytes_read() == 8192);

  // wait_all reports the first failure and counts the others; afterwards all is clear.
  aio.read(file, 65536, buf.data(), 4096);
  aio.read(file, 0, buf.data(), 8192);
  aio.read(file, 131072, buf.data(), 131072);
  CHECK_THROWS_WITH(aio.wait_all(), Catch::Contains("at offset 65536 (4096 bytes)") &&
                                        Catch::Contains("and 1 more failed requests"));
  aio.wait_all();
}
