//===- NvmeStore.h - file-backed storage slots with asynchronous I/O ------===//
//
// Part of the ds project.
//
// NVMe offload: one preallocated swap file per rank holds the slots (each
// an offloaded parameter or optimizer state). The file is unlinked as soon
// as it is created, so it disappears when the process ends, however it
// ends. Reads and writes are asynchronous (io_uring when the kernel allows
// it, else a synchronous pread/pwrite fallback), split into block-size
// requests with at most queue-depth in flight. Each slot's checksum is
// taken when it is written and checked when it is read back.
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_NVME_NVMESTORE_H
#define DS_RUNTIME_NVME_NVMESTORE_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ds::rt {

struct NvmeOptions {
  std::string dir;
  uint32_t blockSize = 1 << 20;
  uint32_t queueDepth = 8;
  /// Rings (each with its own kernel workers) the blocks are dealt over;
  /// the queue depth bounds the blocks in flight over all of them.
  uint32_t threads = 1;
  int rank = 0;
  /// Test hook (DS_FAULT=nvme-free:BYTES): pretend the filesystem has only
  /// this many free bytes (0: ask the filesystem).
  uint64_t pretendFree = 0;
};

class NvmeStore {
public:
  /// Creates the swap file for slots of `slotBytes` in `opts.dir`: refuses
  /// a missing folder, one it cannot write, or one without room.
  static std::unique_ptr<NvmeStore> open(const NvmeOptions &opts,
                                         const std::vector<uint64_t> &slotBytes,
                                         std::string &err);
  ~NvmeStore();

  /// Starts writing `bytes` from `src` into slot `slot` (whole slot); `src`
  /// must stay unchanged until the returned ticket completes.
  bool write(int slot, const void *src, uint64_t bytes, int &ticket,
             std::string &err);
  /// Starts reading slot `slot` into `dst`.
  bool read(int slot, void *dst, uint64_t bytes, int &ticket,
            std::string &err);
  /// Waits for one request (and checks a read's checksum).
  bool wait(int ticket, std::string &err);
  bool waitAll(std::string &err);
  /// Requests not yet completed: their host byte ranges.
  struct Pending {
    int ticket;
    const unsigned char *begin, *end;
  };
  const std::vector<Pending> &pending() const { return inflight; }

  /// Whether requests go through io_uring (else synchronous I/O).
  bool async() const;

private:
  NvmeStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl;
  std::string filePath;
  uint64_t total = 0;
  std::vector<Pending> inflight;
};

} // namespace ds::rt

#endif // DS_RUNTIME_NVME_NVMESTORE_H
