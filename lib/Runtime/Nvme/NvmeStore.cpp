//===- NvmeStore.cpp - file-backed storage slots with asynchronous I/O ----===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "Nvme/NvmeStore.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef DS_HAVE_LIBURING
#include <liburing.h>
#endif

namespace ds::rt {

namespace {

constexpr uint64_t kAlign = 4096;

/// A checksum of a slot's bytes: 64-bit words folded with a multiply (fast
/// enough to run at every write and read; it detects, not authenticates).
uint64_t checksum(const unsigned char *p, uint64_t n) {
  // Four independent lanes (no serial dependency between them), folded.
  uint64_t lane[4] = {0x9e3779b97f4a7c15ULL ^ n, 0xc2b2ae3d27d4eb4fULL,
                      0x165667b19e3779f9ULL, 0x27d4eb2f165667c5ULL};
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * 0x100000001b3ULL;
      lane[k] ^= lane[k] >> 29;
    }
  uint64_t h = lane[0];
  for (int k = 1; k < 4; ++k)
    h = (h ^ lane[k]) * 0x100000001b3ULL;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; ++i)
    h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string human(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f MiB)",
                static_cast<unsigned long long>(b), b / 1048576.0);
  return buf;
}

} // namespace

struct NvmeStore::Impl {
  int fd = -1;
  uint32_t block = 1 << 20, depth = 8;
  std::vector<uint64_t> offset, bytes, sum;
  std::vector<bool> written;
  struct Request {
    int slot = 0;
    unsigned char *buf = nullptr;
    uint64_t size = 0, submitted = 0, done = 0;
    int chunks = 0; // in flight
    bool read = false;
    int error = 0;
  };
  std::map<int, Request> requests;
  std::deque<int> queue; // requests with bytes not yet submitted
  int nextTicket = 1;
  int inFlight = 0;
#ifdef DS_HAVE_LIBURING
  bool uring = false;
  // Parallelism: several rings (each with its own kernel workers), the
  // requests' blocks dealt round-robin; in flight per ring.
  std::vector<io_uring> rings;
  std::vector<int> ringFlight;
  size_t nextRing = 0;
#endif

  ~Impl() {
#ifdef DS_HAVE_LIBURING
    if (uring) {
      // Nothing may complete into freed buffers: drain first.
      for (size_t k = 0; k < rings.size(); ++k) {
        while (ringFlight[k] > 0) {
          io_uring_cqe *cqe = nullptr;
          if (io_uring_wait_cqe(&rings[k], &cqe) < 0)
            break;
          io_uring_cqe_seen(&rings[k], cqe);
          --ringFlight[k];
        }
        io_uring_queue_exit(&rings[k]);
      }
    }
#endif
    if (fd >= 0)
      ::close(fd);
  }

  /// Synchronous I/O of a whole request (the fallback).
  bool syncIo(Request &r) {
    uint64_t at = 0;
    while (at < r.size) {
      uint64_t n = std::min<uint64_t>(block, r.size - at);
      ssize_t got = r.read ? ::pread(fd, r.buf + at, n, offset[r.slot] + at)
                           : ::pwrite(fd, r.buf + at, n, offset[r.slot] + at);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        r.error = got < 0 ? errno : EIO;
        return false;
      }
      at += static_cast<uint64_t>(got);
    }
    r.submitted = r.done = r.size;
    return true;
  }

#ifdef DS_HAVE_LIBURING
  void submit() {
    std::vector<bool> touched(rings.size(), false);
    while (inFlight < static_cast<int>(depth) && !queue.empty()) {
      Request &r = requests[queue.front()];
      size_t k = nextRing;
      io_uring_sqe *sqe = io_uring_get_sqe(&rings[k]);
      if (!sqe)
        break;
      nextRing = (nextRing + 1) % rings.size();
      touched[k] = true;
      ++ringFlight[k];
      uint64_t n = std::min<uint64_t>(block, r.size - r.submitted);
      if (r.read)
        io_uring_prep_read(sqe, fd, r.buf + r.submitted, n,
                           offset[r.slot] + r.submitted);
      else
        io_uring_prep_write(sqe, fd, r.buf + r.submitted, n,
                            offset[r.slot] + r.submitted);
      io_uring_sqe_set_data64(sqe, (static_cast<uint64_t>(queue.front()) << 32) | n);
      r.submitted += n;
      ++r.chunks;
      ++inFlight;
      if (r.submitted == r.size)
        queue.pop_front();
    }
    for (size_t k = 0; k < rings.size(); ++k)
      if (touched[k])
        io_uring_submit(&rings[k]);
  }

  /// Reaps one completion: any ring's that is ready, else waits on a ring
  /// with blocks in flight (each of them completes, so this progresses).
  bool reap(std::string &err) {
    io_uring_cqe *cqe = nullptr;
    int rc = -EAGAIN;
    size_t k = 0;
    for (; k < rings.size(); ++k)
      if (ringFlight[k] > 0 && io_uring_peek_cqe(&rings[k], &cqe) == 0 && cqe) {
        rc = 0;
        break;
      }
    if (rc != 0) {
      for (k = 0; k < rings.size() && ringFlight[k] == 0; ++k) {
      }
      if (k == rings.size()) {
        err = "NVMe I/O: waiting with nothing in flight";
        return false;
      }
      do
        rc = io_uring_wait_cqe(&rings[k], &cqe);
      while (rc == -EINTR);
    }
    if (rc < 0) {
      err = std::string("NVMe I/O: waiting for a completion failed: ") +
            std::strerror(-rc);
      return false;
    }
    uint64_t data = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&rings[k], cqe);
    --inFlight;
    --ringFlight[k];
    int ticket = static_cast<int>(data >> 32);
    uint64_t n = data & 0xffffffffULL;
    auto it = requests.find(ticket);
    if (it == requests.end())
      return true;
    Request &r = it->second;
    --r.chunks;
    if (res < 0)
      r.error = -res;
    else if (static_cast<uint64_t>(res) != n)
      r.error = EIO; // a short transfer of a preallocated file
    else
      r.done += n;
    return true;
  }
#endif
};

bool NvmeStore::async() const {
#ifdef DS_HAVE_LIBURING
  return impl->uring;
#else
  return false;
#endif
}

NvmeStore::~NvmeStore() = default;

std::unique_ptr<NvmeStore> NvmeStore::open(const NvmeOptions &opts,
                                           const std::vector<uint64_t> &slotBytes,
                                           std::string &err) {
  std::unique_ptr<NvmeStore> s(new NvmeStore());
  s->impl = std::make_unique<Impl>();
  Impl &m = *s->impl;
  m.block = opts.blockSize;
  m.depth = opts.queueDepth;
  for (uint64_t b : slotBytes) {
    m.offset.push_back(s->total);
    m.bytes.push_back(b);
    s->total += (b + kAlign - 1) / kAlign * kAlign;
  }
  m.sum.assign(slotBytes.size(), 0);
  m.written.assign(slotBytes.size(), false);
  const std::string &dir = opts.dir;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    err = "the NVMe offload folder '" + dir + "' does not exist (" +
          std::strerror(errno) + "); create it or compile with another "
          "nvme:PATH";
    return nullptr;
  }
  if (!S_ISDIR(st.st_mode)) {
    err = "the NVMe offload path '" + dir + "' is not a folder";
    return nullptr;
  }
  s->filePath = dir + "/ds-nvme-rank" + std::to_string(opts.rank) + "-" +
                std::to_string(::getpid()) + ".swap";
  m.fd = ::open(s->filePath.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                0600);
  if (m.fd < 0) {
    err = "cannot create a swap file in the NVMe offload folder '" + dir +
          "': " + std::strerror(errno);
    return nullptr;
  }
  // Gone from the folder at once: the space is freed when the process
  // ends, however it ends, and no later run can find and trust the file.
  ::unlink(s->filePath.c_str());
  struct statvfs fs;
  uint64_t free = 0;
  if (::statvfs(dir.c_str(), &fs) == 0)
    free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (opts.pretendFree)
    free = opts.pretendFree;
  if (free < s->total) {
    err = "the NVMe offload folder '" + dir + "' has " + human(free) +
          " free; this rank's offloaded storage needs " + human(s->total);
    return nullptr;
  }
  if (s->total > 0) {
    int rc = ::posix_fallocate(m.fd, 0, static_cast<off_t>(s->total));
    if (rc == EOPNOTSUPP || rc == EINVAL)
      rc = ::ftruncate(m.fd, static_cast<off_t>(s->total)) == 0 ? 0 : errno;
    if (rc != 0) {
      err = "cannot preallocate " + human(s->total) + " in the NVMe offload "
            "folder '" + dir + "': " + std::strerror(rc);
      return nullptr;
    }
  }
#ifdef DS_HAVE_LIBURING
  if (!std::getenv("DS_NVME_SYNC")) {
    uint32_t n = std::max<uint32_t>(opts.threads, 1);
    m.rings.resize(n);
    m.ringFlight.assign(n, 0);
    uint32_t k = 0;
    for (; k < n; ++k)
      if (io_uring_queue_init(std::max<uint32_t>(m.depth, 1), &m.rings[k], 0) != 0)
        break;
    m.uring = k == n;
    if (!m.uring) { // not allowed here: the synchronous path
      for (uint32_t j = 0; j < k; ++j)
        io_uring_queue_exit(&m.rings[j]);
      m.rings.clear();
      m.ringFlight.clear();
    }
  }
#endif
  return s;
}

bool NvmeStore::write(int slot, const void *src, uint64_t bytes, int &ticket,
                      std::string &err) {
  Impl &m = *impl;
  if (slot < 0 || slot >= static_cast<int>(m.bytes.size()) ||
      bytes != m.bytes[slot]) {
    err = "NVMe write of " + std::to_string(bytes) + " bytes to slot " +
          std::to_string(slot) + " does not match the slot";
    return false;
  }
  auto *buf = static_cast<unsigned char *>(const_cast<void *>(src));
  m.sum[slot] = checksum(buf, bytes);
  m.written[slot] = true;
  ticket = m.nextTicket++;
  Impl::Request &r = m.requests[ticket];
  r.slot = slot;
  r.buf = buf;
  r.size = bytes;
  r.read = false;
  inflight.push_back({ticket, buf, buf + bytes});
#ifdef DS_HAVE_LIBURING
  if (m.uring) {
    if (bytes > 0)
      m.queue.push_back(ticket);
    m.submit();
    return true;
  }
#endif
  return true; // done synchronously at its wait
}

bool NvmeStore::read(int slot, void *dst, uint64_t bytes, int &ticket,
                     std::string &err) {
  Impl &m = *impl;
  if (slot < 0 || slot >= static_cast<int>(m.bytes.size()) ||
      bytes != m.bytes[slot]) {
    err = "NVMe read of " + std::to_string(bytes) + " bytes from slot " +
          std::to_string(slot) + " does not match the slot";
    return false;
  }
  if (!m.written[slot]) {
    err = "NVMe slot " + std::to_string(slot) + " is read before it was "
          "ever written";
    return false;
  }
  ticket = m.nextTicket++;
  Impl::Request &r = m.requests[ticket];
  r.slot = slot;
  r.buf = static_cast<unsigned char *>(dst);
  r.size = bytes;
  r.read = true;
  inflight.push_back({ticket, r.buf, r.buf + bytes});
#ifdef DS_HAVE_LIBURING
  if (m.uring) {
    if (bytes > 0)
      m.queue.push_back(ticket);
    m.submit();
  }
#endif
  return true;
}

bool NvmeStore::wait(int ticket, std::string &err) {
  Impl &m = *impl;
  auto it = m.requests.find(ticket);
  if (it == m.requests.end())
    return true;
  Impl::Request &r = it->second;
#ifdef DS_HAVE_LIBURING
  if (m.uring) {
    while (r.submitted < r.size || r.chunks > 0) {
      m.submit();
      if (m.inFlight == 0)
        break; // nothing can complete: an error below
      if (!m.reap(err))
        return false;
    }
  } else
#endif
      if (r.done < r.size)
    m.syncIo(r);
  Impl::Request done = r;
  m.requests.erase(it);
  inflight.erase(std::remove_if(inflight.begin(), inflight.end(),
                                [&](const Pending &p) { return p.ticket == ticket; }),
                 inflight.end());
  std::string what = std::string(done.read ? "reading" : "writing") +
                     " slot " + std::to_string(done.slot) + " of the NVMe "
                     "swap file '" + filePath + "'";
  if (done.error) {
    err = what + " failed: " + std::strerror(done.error);
    return false;
  }
  if (done.done != done.size) {
    err = what + " moved " + std::to_string(done.done) + " of " +
          std::to_string(done.size) + " bytes";
    return false;
  }
  if (done.read && checksum(done.buf, done.size) != m.sum[done.slot]) {
    err = what + ": the bytes read back differ from those written "
          "(checksum mismatch); the device or the file is corrupt";
    return false;
  }
  return true;
}

bool NvmeStore::waitAll(std::string &err) {
  while (!inflight.empty())
    if (!wait(inflight.front().ticket, err))
      return false;
  return true;
}

} // namespace ds::rt
