//===- NvmeBench.cpp - the NVMe offload engine against a plain copy -------===//
//
// Part of the ds project.
//
// ds-nvme-bench DIR [MiB] [SLOT_MiB] [BLOCK] [DEPTH]: writes MiB of data
// through the NVMe store in slots of SLOT_MiB, waits, reads it all back
// (checksums checked), verifies the bytes, and prints the write and read
// rates. bench/offload.sh puts them beside dd on the same folder.
//
//===----------------------------------------------------------------------===//

#include "Nvme/NvmeStore.h"

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace ds::rt;

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ds-nvme-bench DIR [MiB] [SLOT_MiB] [BLOCK] [DEPTH] [RINGS]\n");
    return 2;
  }
  uint64_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  uint64_t slotMib = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 16;
  NvmeOptions o;
  o.dir = argv[1];
  o.blockSize = argc > 4 ? static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10)) : 1 << 20;
  o.queueDepth = argc > 5 ? static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10)) : 8;
  o.threads = argc > 6 ? static_cast<uint32_t>(std::strtoul(argv[6], nullptr, 10)) : 1;
  if (slotMib == 0 || mib < slotMib) {
    std::fprintf(stderr, "error: need MiB >= SLOT_MiB > 0\n");
    return 2;
  }
  uint64_t slots = mib / slotMib, bytes = slotMib << 20;
  std::vector<uint64_t> sizes(slots, bytes);
  std::string err;
  auto store = NvmeStore::open(o, sizes, err);
  if (!store) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 1;
  }
  std::vector<std::vector<unsigned char>> data(slots, std::vector<unsigned char>(bytes));
  for (uint64_t s = 0; s < slots; ++s)
    for (uint64_t i = 0; i < bytes; i += 8) {
      uint64_t v = (s + 1) * 0x9e3779b97f4a7c15ULL ^ i;
      std::memcpy(&data[s][i], &v, 8);
    }
  double w = 0, r = 0;
  std::vector<std::vector<unsigned char>> back(slots, std::vector<unsigned char>(bytes));
  for (auto &b : back) // touch the pages first: the rates measure I/O
    std::memset(b.data(), 0, b.size());
  int ticket;
  // A first, untimed round: this machine pays for the first kernel access
  // to a user page, and a training step reuses its buffers every step.
  for (int round = 0; round < 2; ++round) {
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t s = 0; s < slots; ++s)
    if (!store->write(static_cast<int>(s), data[s].data(), bytes, ticket, err)) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 1;
    }
  if (!store->waitAll(err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 1;
  }
  auto t1 = std::chrono::steady_clock::now();
  for (uint64_t s = 0; s < slots; ++s)
    if (!store->read(static_cast<int>(s), back[s].data(), bytes, ticket, err)) {
      std::fprintf(stderr, "error: %s\n", err.c_str());
      return 1;
    }
  if (!store->waitAll(err)) {
    std::fprintf(stderr, "error: %s\n", err.c_str());
    return 1;
  }
  auto t2 = std::chrono::steady_clock::now();
  for (uint64_t s = 0; s < slots; ++s)
    if (back[s] != data[s]) {
      std::fprintf(stderr, "error: slot %llu read back differs\n",
                   static_cast<unsigned long long>(s));
      return 1;
    }
  w = std::chrono::duration<double>(t1 - t0).count();
  r = std::chrono::duration<double>(t2 - t1).count();
  }
  double total = static_cast<double>(slots * bytes);
  // The reference: a plain sequential pwrite/pread of the same bytes from
  // the same buffers into a new file in the same folder (what dd does, but
  // from these buffers rather than one reused block).
  std::string plainPath = o.dir + "/ds-nvme-bench-plain.bin";
  int fd = ::open(plainPath.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "error: cannot create '%s'\n", plainPath.c_str());
    return 1;
  }
  ::unlink(plainPath.c_str());
  auto io = [&](bool write) {
    for (uint64_t s = 0; s < slots; ++s)
      for (uint64_t at = 0; at < bytes; at += 1 << 20) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(1 << 20, bytes - at));
        off_t off = static_cast<off_t>(s * bytes + at);
        ssize_t got = write ? ::pwrite(fd, data[s].data() + at, n, off)
                            : ::pread(fd, back[s].data() + at, n, off);
        if (got != static_cast<ssize_t>(n))
          return false;
      }
    return true;
  };
  bool plainOk = io(true) && io(false); // the same untimed first round
  auto p0 = std::chrono::steady_clock::now();
  plainOk = plainOk && io(true);
  auto p1 = std::chrono::steady_clock::now();
  plainOk = plainOk && io(false);
  auto p2 = std::chrono::steady_clock::now();
  ::close(fd);
  if (!plainOk) {
    std::fprintf(stderr, "error: the plain reference I/O failed\n");
    return 1;
  }
  double pw = std::chrono::duration<double>(p1 - p0).count();
  double pr = std::chrono::duration<double>(p2 - p1).count();
  std::printf("ds-nvme: %llu MiB in %llu slots, block %u, depth %u, rings %u, %s: write "
              "%.1f MB/s, read %.1f MB/s; every byte read back equal\n",
              static_cast<unsigned long long>(slots * slotMib),
              static_cast<unsigned long long>(slots), o.blockSize,
              o.queueDepth, o.threads, store->async() ? "io_uring" : "synchronous",
              total / w / 1e6, total / r / 1e6);
  std::printf("plain pwrite/pread of the same buffers (1 MiB requests): "
              "write %.1f MB/s, read %.1f MB/s; ratio ds/plain: write %.2f, "
              "read %.2f\n",
              total / pw / 1e6, total / pr / 1e6, pw / w, pr / r);
  return 0;
}
