//===- Executor.cpp - running a plan on the CPU ---------------------------===//
//
// Part of the ds project (runtime: no MLIR or LLVM).
//
// The arena is allocated once at the planned size; parameters are loaded from
// the plan's weights source after checking its size and hash; each
// instruction's buffers are bound to pointers and its kernel called. The
// executor records the highest arena byte any kernel wrote.
//
//===----------------------------------------------------------------------===//

#include "Cpu/Kernels.h"
#include "PlanImpl.h"
#include "Device.h"
#include "Nvme/NvmeStore.h"
#include "TpSlice.h"
#include "ds/Runtime/Comm.h"
#include "ds/Support/PipelineSchedule.h"
#include "ds/Support/PlanFormat.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <fcntl.h>
#include <unistd.h>

#include <climits>

#include <cblas.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>

extern "C" void openblas_set_num_threads(int);

namespace ds::rt {

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostTensor::shapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool convertTensor(HostTensor &t, DType to, std::string &err) {
  if (t.dtype == to)
    return true;
  bool ok = (isFloat(t.dtype) && isFloat(to)) ||
            ((t.dtype == DType::I64 || t.dtype == DType::I32) &&
             (to == DType::I64 || to == DType::I32));
  if (!ok) {
    err = std::string("cannot convert ") + dtypeName(t.dtype) + " to " +
          dtypeName(to);
    return false;
  }
  std::vector<unsigned char> data(t.numel() * dtypeSize(to));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloat(to))
      storeD(data.data(), to, i, loadD(t.data.data(), t.dtype, i));
    else
      storeI(data.data(), to, i, loadI(t.data.data(), t.dtype, i));
  }
  t.data = std::move(data);
  t.dtype = to;
  return true;
}

namespace {

struct AlignedFree {
  void operator()(void *p) const { std::free(p); }
};
using AlignedBlock = std::unique_ptr<unsigned char, AlignedFree>;

AlignedBlock alignedAlloc(uint64_t bytes) {
  if (bytes > (uint64_t(1) << 60)) // no machine has it; the rounding below
    return AlignedBlock();         // must not wrap
  uint64_t size = (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64;
  return AlignedBlock(static_cast<unsigned char *>(std::aligned_alloc(64, size)));
}

/// An initializer found by scanning the ONNX file: its TensorProto without
/// raw_data, and where raw_data lies in the file. The file is never held
/// whole: a ZeRO-3 rank then reads only its shard's bytes.
struct InitializerRef {
  onnx::TensorProto header;
  bool hasRaw = false;
  uint64_t rawOffset = 0, rawBytes = 0;
};

/// Elements [first, first + count) of an ONNX initializer of `total`
/// elements, row-major little-endian (bool: one byte per element), into
/// `dst`. A ZeRO-3 rank reads its shard only: for external data just
/// those bytes of the file.
bool initializerBytes(const InitializerRef &ref, const std::string &path,
                      const std::string &onnxDir, DType dtype, int64_t total,
                      int64_t first, int64_t count, unsigned char *dst,
                      std::string &err) {
  const onnx::TensorProto &t = ref.header;
  std::string what = "initializer '" + t.name() + "'";
  size_t esize = dtypeSize(dtype);
  uint64_t bytes = static_cast<uint64_t>(total) * esize;
  uint64_t skip = static_cast<uint64_t>(first) * esize;
  uint64_t take = static_cast<uint64_t>(count) * esize;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    uint64_t offset = 0, length = bytes;
    for (const auto &kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::strtoull(kv.value().c_str(), nullptr, 10);
      else if (kv.key() == "length")
        length = std::strtoull(kv.value().c_str(), nullptr, 10);
    }
    if (location.empty() || location[0] == '/' ||
        location.find("..") != std::string::npos) {
      err = what + " has an invalid external data location";
      return false;
    }
    std::ifstream in(onnxDir + "/" + location, std::ios::binary);
    if (!in || length != bytes) {
      err = what + ": cannot read " + std::to_string(bytes) + " bytes from '" +
            location + "'";
      return false;
    }
    in.seekg(static_cast<std::streamoff>(offset + skip));
    in.read(reinterpret_cast<char *>(dst), static_cast<std::streamsize>(take));
    if (!in) {
      err = what + ": external data file '" + location + "' is too short";
      return false;
    }
    return true;
  }
  if (ref.hasRaw) {
    // Only these bytes of the model file.
    if (ref.rawBytes != bytes) {
      err = what + " holds " + std::to_string(ref.rawBytes) +
            " bytes, the plan expects " + std::to_string(bytes);
      return false;
    }
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(ref.rawOffset + skip));
    in.read(reinterpret_cast<char *>(dst), static_cast<std::streamsize>(take));
    if (!in) {
      err = "cannot read " + what + " from '" + path + "'";
      return false;
    }
    return true;
  }
  auto checkCount = [&](int have) {
    if (have == total)
      return true;
    err = what + " holds " + std::to_string(have) + " values, the plan expects " +
          std::to_string(total);
    return false;
  };
  switch (dtype) {
  case DType::F32:
    if (!checkCount(t.float_data_size()))
      return false;
    std::memcpy(dst, t.float_data().data() + first, take);
    return true;
  case DType::I64:
    if (!checkCount(t.int64_data_size()))
      return false;
    std::memcpy(dst, t.int64_data().data() + first, take);
    return true;
  default:
    if (!checkCount(t.int32_data_size()))
      return false;
    for (int64_t i = 0; i < count; ++i) {
      int32_t v = t.int32_data(static_cast<int>(first + i));
      if (dtype == DType::F16 || dtype == DType::BF16) {
        uint16_t h = static_cast<uint16_t>(v);
        std::memcpy(dst + 2 * i, &h, 2);
      } else {
        storeI(dst, dtype, i, v);
      }
    }
    return true;
  }
}

/// Copies one field (tag already read) from `in` to `out`.
bool copyField(google::protobuf::io::CodedInputStream &in, uint32_t tag,
               google::protobuf::io::CodedOutputStream &out) {
  using WFL = google::protobuf::internal::WireFormatLite;
  out.WriteTag(tag);
  switch (WFL::GetTagWireType(tag)) {
  case WFL::WIRETYPE_VARINT: {
    uint64_t v;
    if (!in.ReadVarint64(&v))
      return false;
    out.WriteVarint64(v);
    return true;
  }
  case WFL::WIRETYPE_FIXED64: {
    uint64_t v;
    if (!in.ReadLittleEndian64(&v))
      return false;
    out.WriteLittleEndian64(v);
    return true;
  }
  case WFL::WIRETYPE_FIXED32: {
    uint32_t v;
    if (!in.ReadLittleEndian32(&v))
      return false;
    out.WriteLittleEndian32(v);
    return true;
  }
  case WFL::WIRETYPE_LENGTH_DELIMITED: {
    uint32_t n;
    std::string bytes;
    if (!in.ReadVarint32(&n) || !in.ReadString(&bytes, static_cast<int>(n)))
      return false;
    out.WriteVarint32(n);
    out.WriteString(bytes);
    return true;
  }
  default:
    return false;
  }
}

/// Scans `path` (an ONNX ModelProto) for graph initializers, keeping each
/// one's header and the file range of its raw_data; also hashes the file.
bool scanInitializers(const std::string &path,
                      std::map<std::string, InitializerRef> &out,
                      uint64_t &size, uint64_t &hash, std::string &err) {
  using WFL = google::protobuf::internal::WireFormatLite;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      err = "cannot read the weights source '" + path + "'";
      return false;
    }
    std::vector<char> chunk(1 << 22);
    hash = 0xcbf29ce484222325ULL;
    size = 0;
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      std::streamsize got = in.gcount();
      hash = fnv1a64(chunk.data(), static_cast<size_t>(got), hash);
      size += static_cast<uint64_t>(got);
    }
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    err = "cannot read the weights source '" + path + "'";
    return false;
  }
  bool ok = true;
  {
    google::protobuf::io::FileInputStream file(fd);
    google::protobuf::io::CodedInputStream in(&file);
    in.SetTotalBytesLimit(INT32_MAX);
    auto skip = [&](uint32_t tag) { return WFL::SkipField(&in, tag); };
    uint32_t tag;
    while (ok && (tag = in.ReadTag()) != 0) {
      if (WFL::GetTagFieldNumber(tag) != 7 ||
          WFL::GetTagWireType(tag) != WFL::WIRETYPE_LENGTH_DELIMITED) {
        ok = skip(tag);
        continue;
      }
      uint32_t graphBytes;
      ok = in.ReadVarint32(&graphBytes);
      auto graphLimit = in.PushLimit(static_cast<int>(graphBytes));
      while (ok && (tag = in.ReadTag()) != 0) {
        if (WFL::GetTagFieldNumber(tag) != 5 ||
            WFL::GetTagWireType(tag) != WFL::WIRETYPE_LENGTH_DELIMITED) {
          ok = skip(tag);
          continue;
        }
        uint32_t tensorBytes;
        ok = in.ReadVarint32(&tensorBytes);
        auto tensorLimit = in.PushLimit(static_cast<int>(tensorBytes));
        InitializerRef ref;
        std::string header;
        {
          google::protobuf::io::StringOutputStream hs(&header);
          google::protobuf::io::CodedOutputStream hout(&hs);
          while (ok && (tag = in.ReadTag()) != 0) {
            if (WFL::GetTagFieldNumber(tag) == 9 &&
                WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED) {
              uint32_t n;
              ok = in.ReadVarint32(&n);
              ref.hasRaw = true;
              ref.rawOffset = static_cast<uint64_t>(in.CurrentPosition());
              ref.rawBytes = n;
              ok = ok && in.Skip(static_cast<int>(n));
            } else {
              ok = copyField(in, tag, hout);
            }
          }
        }
        ok = ok && in.ConsumedEntireMessage() &&
             ref.header.ParseFromString(header);
        in.PopLimit(tensorLimit);
        if (ok)
          out[ref.header.name()] = std::move(ref);
      }
      ok = ok && in.ConsumedEntireMessage();
      in.PopLimit(graphLimit);
    }
  }
  ::close(fd);
  if (!ok)
    err = "the weights source '" + path + "' is not an ONNX model";
  return ok;
}

} // namespace

int onnxType(DType t) {
  switch (t) {
  case DType::F32: return onnx::TensorProto::FLOAT;
  case DType::F16: return onnx::TensorProto::FLOAT16;
  case DType::BF16: return onnx::TensorProto::BFLOAT16;
  case DType::I64: return onnx::TensorProto::INT64;
  case DType::I32: return onnx::TensorProto::INT32;
  case DType::Bool: return onnx::TensorProto::BOOL;
  }
  return 0;
}

/// Device memory, released with its device.
struct DeviceBlock {
  Device *device = nullptr;
  void *ptr = nullptr;
  DeviceBlock() = default;
  DeviceBlock(const DeviceBlock &) = delete;
  DeviceBlock &operator=(const DeviceBlock &) = delete;
  ~DeviceBlock() {
    if (device && ptr)
      device->release(ptr);
  }
};

struct Executor::Impl {
  std::shared_ptr<const Plan> plan;
  ExecutorOptions options;
  AlignedBlock arena, params;
  // Offload: the host arena and host-stored parameters and state, apart
  // from the device's; NVMe-stored ones live in `nvme`, with a host copy
  // (`nvmeShadow`) only while loading, checkpointing or resuming.
  AlignedBlock hostArena, hostParams, nvmeShadow;
  std::unique_ptr<NvmeStore> nvme;
  std::vector<int> location;   // per parameter: 0 device, 1 host, 2 NVMe
  std::vector<int> nvmeSlot;   // per parameter: its NVMe slot, or -1
  std::vector<uint64_t> paramSize;
  uint64_t hostParamBytes = 0, nvmeBytes = 0, hostArenaHighWater = 0;
  // The CUDA backend: the arena, parameters, constants and inputs in device
  // memory; `params` stays the host copy that loading, checkpoints and
  // outputs go through.
  std::unique_ptr<Device> device;
  std::unique_ptr<DeviceBlock> deviceArena, deviceParams;
  // The CUDA backend with offload: host pointers of every buffer (host
  // instructions run the CPU kernels on them), and the copies in flight on
  // the copy stream with the bytes they read and write.
  std::vector<void *> hostBufferPtr;
  struct PendingCopy {
    int handle;
    const unsigned char *src, *srcEnd, *dst, *dstEnd;
  };
  std::vector<PendingCopy> copies;
  std::vector<void *> pinned;
  // Tensor parallelism: the communicators of the groups a collective's
  // `group` names: 0 the data-parallel ranks (same tensor-parallel index),
  // 1 the tensor-parallel ranks (same data-parallel index); rank =
  // dp * T + tp. Without tensor parallelism both are the world.
  std::unique_ptr<Communicator> dpComm, tpComm;
  Communicator *group(int64_t g) const {
    if (g == -1) // every rank
      return options.comm;
    if (g == 1 && tpComm)
      return tpComm.get();
    if (g == 0 && dpComm)
      return dpComm.get();
    return options.comm;
  }
  /// Collective bytes the group communicators counted, handed to the
  /// world's counter (which ds-run reads).
  void collectBytes() {
    for (Communicator *c : {dpComm.get(), tpComm.get()})
      if (c && options.comm) {
        options.comm->collectiveBytes += c->collectiveBytes;
        c->collectiveBytes = 0;
      }
  }
  ~Impl() {
    if (device) {
      std::string ignored;
      device->synchronize(ignored);
      for (void *p : pinned)
        device->unpinHost(p);
    }
  }
  std::vector<std::unique_ptr<DeviceBlock>> deviceConsts, deviceInputs;
  uint64_t paramBytes = 0;
  std::vector<uint64_t> paramOffsets;
  std::vector<unsigned char *> paramPtr;
  std::vector<HostTensor> inputs;
  std::vector<bool> inputSet;
  std::vector<void *> bufferPtr;
  // Resolved once at creation: each instruction's kernel (the plan was
  // validated against the registry when loaded) and the arena high-water
  // mark the program's results reach.
  std::vector<const KernelInfo *> kernels;
  uint64_t arenaHighWater = 0;
  uint64_t runs = 0;
  // Async collectives by output, per group (-1 all ranks, 0 data-parallel,
  // 1 tensor-parallel): each completes on its group's communicator.
  std::array<std::map<const void *, int>, 3> inflight;
  static int groupOf(const Attrs &attrs) {
    int64_t g = attrs.getInt("group", 0);
    return g == -1 || g == 1 ? static_cast<int>(g) : 0;
  }
  size_t inflightCount() const {
    return inflight[0].size() + inflight[1].size() + inflight[2].size();
  }
  KernelContext::StepState stepState;   // the loss scaler's, per run
  uint64_t skipped = 0;                 // runs whose update overflowed

  const plan::Plan &p() const { return plan->proto; }

  bool loadWeights(std::string &err) {
    const plan::Plan &pp = p();
    int rank = options.comm ? options.comm->rank() : 0;
    // ZeRO shards are over the data-parallel group: its rank.
    int tpSize = std::max<int>(1, static_cast<int>(pp.tensor_parallel()));
    int dpRank = rank / tpSize;
    // One block per location: device, host, and the NVMe slots' host copy
    // (freed once they are written to the swap file).
    uint64_t totals[3] = {0, 0, 0};
    std::vector<uint64_t> offsets, sizes;
    std::vector<uint64_t> slotBytes;
    for (const plan::Parameter &param : pp.parameters()) {
      uint64_t n = dtypeSize(toDType(param.dtype()));
      for (int64_t d : param.shape())
        n *= d;
      int loc = static_cast<int>(param.location());
      location.push_back(loc);
      nvmeSlot.push_back(loc == 2 ? static_cast<int>(slotBytes.size()) : -1);
      if (loc == 2)
        slotBytes.push_back(n);
      offsets.push_back(totals[loc]);
      sizes.push_back(n);
      totals[loc] += (n + 63) / 64 * 64;
      if (totals[loc] > (uint64_t(1) << 60)) { // each size is below 2^56
        err = "the plan's parameters need more than 2^60 bytes";
        return false;
      }
    }
    paramSize = sizes;
    if (!slotBytes.empty()) {
      // Refused before anything is loaded: a missing, read-only or full
      // folder.
      NvmeOptions no;
      no.dir = options.nvmePath.empty() ? pp.nvme().path() : options.nvmePath;
      no.blockSize = pp.nvme().block_size();
      no.queueDepth = pp.nvme().queue_depth();
      no.threads = std::max<uint32_t>(1, pp.nvme().threads());
      no.rank = rank;
      no.pretendFree = options.nvmePretendFree;
      nvme = NvmeStore::open(no, slotBytes, err);
      if (!nvme)
        return false;
    }
    params = alignedAlloc(totals[0]);
    hostParams = alignedAlloc(totals[1]);
    if (totals[2])
      nvmeShadow = alignedAlloc(totals[2]);
    if (!params || !hostParams || (totals[2] && !nvmeShadow)) {
      err = "cannot allocate " +
            std::to_string(totals[0] + totals[1] + totals[2]) +
            " bytes for the plan's parameters and optimizer state";
      return false;
    }
    paramBytes = totals[0];
    hostParamBytes = totals[1];
    nvmeBytes = totals[2];
    paramOffsets = offsets;
    for (size_t i = 0; i < offsets.size(); ++i)
      paramPtr.push_back((location[i] == 0   ? params.get()
                          : location[i] == 1 ? hostParams.get()
                                             : nvmeShadow.get()) +
                         offsets[i]);
    if (pp.parameters_size() == 0)
      return true;
    if (pp.weights().path().empty()) {
      err = "the plan has parameters but no weights source";
      return false;
    }
    std::string path = plan->dir + "/" + pp.weights().path();
    std::map<std::string, InitializerRef> inits;
    uint64_t fileBytes = 0, fileHash = 0;
    if (!scanInitializers(path, inits, fileBytes, fileHash, err))
      return false;
    if (fileBytes != pp.weights().size() ||
        fileHash != pp.weights().content_hash()) {
      err = "the weights source '" + path +
            "' changed since the plan was compiled (size or hash differs); "
            "recompile the plan";
      return false;
    }
    size_t slash = path.find_last_of('/');
    std::string onnxDir = slash == std::string::npos ? "." : path.substr(0, slash);
    for (int i = 0; i < pp.parameters_size(); ++i) {
      const plan::Parameter &param = pp.parameters(i);
      // Optimizer state starts at zero; a master copy (mixed precision)
      // as its parameter's initializer.
      const std::string &source =
          param.master_of().empty() ? param.name() : param.master_of();
      if (param.state() && param.master_of().empty()) {
        std::memset(paramPtr[i], 0, sizes[i]);
        continue;
      }
      auto it = inits.find(source);
      if (it == inits.end()) {
        err = "parameter '" + source + "' is not in '" + path + "'";
        return false;
      }
      const InitializerRef &ref = it->second;
      const onnx::TensorProto &t = ref.header;
      DType dt = toDType(param.dtype());
      // Tensor parallelism: this rank's slice along an axis (a master
      // copy is sliced as its parameter is).
      auto [tpAxis, tpParts, tpBlocks, tpTotal] = tpSplitOf(i);
      std::vector<int64_t> tpWhole =
          param.sharded()
              ? std::vector<int64_t>(param.full_shape().begin(),
                                     param.full_shape().end())
              : std::vector<int64_t>(param.shape().begin(), param.shape().end());
      if (tpParts > 1)
        tpWhole[tpAxis] = tpTotal > 0 ? tpTotal : tpWhole[tpAxis] * tpParts;
      google::protobuf::RepeatedField<int64_t> wholeShape(tpWhole.begin(),
                                                          tpWhole.end());
      const auto &shape =
          param.sharded() && tpParts <= 1 ? param.full_shape() : wholeShape;
      bool dimsMatch = t.dims_size() == shape.size();
      int64_t total = 1;
      for (int d = 0; d < shape.size(); ++d) {
        dimsMatch = dimsMatch && t.dims(d) == shape[d];
        total *= shape[d];
      }
      // Mixed precision stores a float initializer in another float type
      // (16-bit weights, f32 masters): read it in its own, then convert.
      DType fileType = dt;
      bool convert = false;
      if (t.data_type() != onnxType(dt) && isFloat(dt))
        for (DType f : {DType::F32, DType::F16, DType::BF16})
          if (t.data_type() == onnxType(f)) {
            fileType = f;
            convert = true;
          }
      if (t.data_type() != onnxType(fileType) || !dimsMatch) {
        err = "parameter '" + source + "' in '" + path +
              "' differs in type or shape from the plan";
        return false;
      }
      if (tpParts > 1) {
        // Read the whole tensor in the file's type, keep the slice.
        DType ft = convert ? fileType : dt;
        std::vector<unsigned char> whole(
            static_cast<size_t>(std::max<int64_t>(total, 1)) * dtypeSize(ft));
        if (!initializerBytes(ref, path, onnxDir, ft, total, 0, total,
                              whole.data(), err))
          return false;
        TpLayout layout(tpWhole, tpAxis, tpParts, tpBlocks);
        std::vector<unsigned char> slice(layout.sliceBytes(dtypeSize(ft)));
        layout.cut(whole.data(), slice.data(), rank % tpParts, dtypeSize(ft));
        int64_t n = static_cast<int64_t>(slice.size() / dtypeSize(ft)),
                first = 0;
        if (param.sharded()) {
          // A ZeRO shard of the slice: elements [r*S, (r+1)*S), zeros past
          // its end.
          int64_t s = param.shape(0);
          first = std::min<int64_t>(n, s * dpRank);
          std::memset(paramPtr[i], 0, sizes[i]);
          n = std::min<int64_t>(s, n - first);
        }
        for (int64_t e = 0; e < n; ++e)
          storeD(paramPtr[i], dt, e, loadD(slice.data(), ft, first + e));
        continue;
      }
      // A shard: elements [r*S, (r+1)*S) of the flattened tensor, zeros
      // past its end (padding).
      int64_t first = 0, count = total;
      if (param.sharded()) {
        int64_t s = param.shape(0);
        first = std::min<int64_t>(total, s * dpRank);
        count = std::min<int64_t>(s, total - first);
        std::memset(paramPtr[i], 0, sizes[i]);
      }
      if (!convert) {
        if (!initializerBytes(ref, path, onnxDir, dt, total, first, count,
                              paramPtr[i], err))
          return false;
        continue;
      }
      std::vector<unsigned char> tmp(
          static_cast<size_t>(std::max<int64_t>(count, 1)) * dtypeSize(fileType));
      if (!initializerBytes(ref, path, onnxDir, fileType, total, first, count,
                            tmp.data(), err))
        return false;
      for (int64_t e = 0; e < count; ++e)
        storeD(paramPtr[i], dt, e, loadD(tmp.data(), fileType, e));
    }
    return nvme ? pushShadow(err) : true;
  }

  /// NVMe: the host copies into the swap file, then the copies freed.
  bool pushShadow(std::string &err) {
    if (!nvme || !nvmeShadow)
      return true;
    for (size_t i = 0; i < nvmeSlot.size(); ++i) {
      if (nvmeSlot[i] < 0)
        continue;
      int ticket;
      if (!nvme->write(nvmeSlot[i], paramPtr[i], paramSize[i], ticket, err))
        return false;
    }
    if (!nvme->waitAll(err))
      return false;
    nvmeShadow.reset();
    for (size_t i = 0; i < nvmeSlot.size(); ++i)
      if (nvmeSlot[i] >= 0)
        paramPtr[i] = nullptr;
    return true;
  }

  /// NVMe: a host copy of every slot (checkpoints and weights read it).
  bool pullShadow(std::string &err) {
    if (!nvme || nvmeShadow)
      return true;
    if (!nvme->waitAll(err))
      return false;
    nvmeShadow = alignedAlloc(nvmeBytes);
    if (!nvmeShadow) {
      err = "cannot allocate " + std::to_string(nvmeBytes) +
            " bytes to read the NVMe-offloaded state";
      return false;
    }
    for (size_t i = 0; i < nvmeSlot.size(); ++i) {
      if (nvmeSlot[i] < 0)
        continue;
      paramPtr[i] = nvmeShadow.get() + paramOffsets[i];
      int ticket;
      if (!nvme->read(nvmeSlot[i], paramPtr[i], paramSize[i], ticket, err))
        return false;
    }
    return nvme->waitAll(err);
  }

  std::unique_ptr<DeviceBlock> deviceAlloc(uint64_t bytes, std::string &err) {
    auto b = std::make_unique<DeviceBlock>();
    b->ptr = device->allocate(bytes, err);
    if (!b->ptr)
      return nullptr;
    b->device = device.get();
    return b;
  }

  /// The CUDA backend: every kernel must have a device version; the arena,
  /// parameters and constants go to device memory.
  bool openDevice(std::string &err) {
    device = openCudaDevice(err);
    if (!device)
      return false;
    std::vector<std::string> missing;
    const plan::Program &prog = p().programs(0);
    for (int i = 0; i < prog.instructions_size(); ++i) {
      const std::string &k = prog.instructions(i).kernel();
      if (prog.instructions(i).on_host())
        continue; // a host kernel: the CPU's, on host memory
      const KernelInfo *dk = device->kernel(k);
      if (!dk) {
        if (std::find(missing.begin(), missing.end(), k) == missing.end())
          missing.push_back(k);
        continue;
      }
      kernels[i] = dk;
    }
    if (!missing.empty()) {
      std::string list;
      for (const std::string &k : missing)
        list += (list.empty() ? "" : ", ") + k;
      err = "the plan needs kernel(s) " + list +
            " that the CUDA backend does not have yet (it has " +
            std::to_string(device->kernelNames().size()) + " of " +
            std::to_string(kernelNames().size()) +
            "); run it with --backend=cpu";
      return false;
    }
    if (!(deviceArena = deviceAlloc(prog.arena_bytes(), err)) ||
        !(deviceParams = deviceAlloc(paramBytes, err)) ||
        !device->toDevice(deviceParams->ptr, params.get(), paramBytes, err))
      return false;
    // Offload: the host arena and host storage are page-locked, so that
    // the copy stream moves them asynchronously.
    for (auto [ptr, bytes] :
         {std::make_pair(static_cast<void *>(hostArena.get()),
                         static_cast<uint64_t>(prog.host_arena_bytes())),
          std::make_pair(static_cast<void *>(hostParams.get()), hostParamBytes)}) {
      if (!bytes)
        continue;
      if (!device->pinHost(ptr, bytes, err))
        return false;
      pinned.push_back(ptr);
    }
    for (int i = 0; i < p().constants_size(); ++i) {
      const std::string &c = p().constants(i);
      auto b = deviceAlloc(c.size(), err);
      if (!b || (!c.empty() && !device->toDevice(b->ptr, c.data(), c.size(), err)))
        return false;
      deviceConsts.push_back(std::move(b));
    }
    // Inputs: one device buffer each, of the plan's size.
    for (int i = 0; i < p().inputs_size(); ++i) {
      const plan::Buffer &b = p().buffers(p().inputs(i).buffer());
      auto d = deviceAlloc(b.bytes(), err);
      if (!d)
        return false;
      deviceInputs.push_back(std::move(d));
    }
    return true;
  }

  uint64_t lastRunSeed = 0;
  // Pipeline parallelism: the backward section's first instruction, the
  // byte ranges a forward leaves for its backward, and per micro-batch the
  // saved bytes, inputs and run seed. `arenaHolds` is the micro-batch whose
  // forward state is still in the arena (-1: none).
  int backwardStart = -1, updateStart = 0, micro = 0;
  int deferred = -1; // the micro-batch whose update waits (-1: none)
  std::vector<ByteRange> stashSpans;
  struct Stashed {
    std::vector<unsigned char> bytes;
    std::vector<HostTensor> inputs;
    uint64_t seed = 0;
    bool saved = false;
  };
  std::map<int, Stashed> stash;
  int arenaHolds = -1;
  uint64_t stashBytes = 0, stashHigh = 0;
  unsigned char *spanBase(const ByteRange &r) {
    return (r.space == plan::HOST_ARENA ? hostArena.get() : arena.get()) +
           r.begin;
  }
  void saveStash(int micro) {
    Stashed &st = stash[micro];
    uint64_t total = 0;
    for (const ByteRange &r : stashSpans)
      total += r.end - r.begin;
    st.bytes.resize(total);
    uint64_t at = 0;
    for (const ByteRange &r : stashSpans) {
      std::memcpy(st.bytes.data() + at, spanBase(r), r.end - r.begin);
      at += r.end - r.begin;
    }
    st.saved = true;
    stashBytes += total;
    stashHigh = std::max(stashHigh, stashBytes);
  }
  /// A micro-batch's backward and update are done: its stash goes, and the
  /// run counts (for the step input and the loss scaler).
  void endMicroBatch(int micro) {
    auto it = stash.find(micro);
    if (it != stash.end() && it->second.saved)
      stashBytes -= it->second.bytes.size();
    stash.erase(micro);
    ++runs;
    if (stepState.overflow)
      ++skipped;
  }
  void restoreStash(int micro) {
    Stashed &st = stash[micro];
    uint64_t at = 0;
    for (const ByteRange &r : stashSpans) {
      std::memcpy(spanBase(r), st.bytes.data() + at, r.end - r.begin);
      at += r.end - r.begin;
    }
  }
  /// The instruction that computes this rank's loss (-1: none).
  int lossInstruction = -1;

  bool runInstructions(int from, int to, uint64_t runSeed, bool scan,
                       RunStats &stats, std::string &err);

  /// Whether the loss (a scalar float result) is NaN or infinite.
  bool lossIsBad(const TensorView &loss, bool &bad, std::string &err) {
    unsigned char v[8] = {};
    size_t bytes = dtypeSize(loss.dtype);
    if (device) {
      if (!device->toHost(v, loss.data, bytes, err))
        return false;
    } else {
      std::memcpy(v, loss.data, bytes);
    }
    bad = !std::isfinite(loadD(v, loss.dtype, 0));
    return true;
  }

  /// The first NaN or infinity among instruction i's float results.
  bool firstNonFinite(int i, const KernelContext &ctx, std::string &found,
                      std::string &err) {
    const plan::Instruction &ins = p().programs(0).instructions(i);
    for (size_t o = 0; o < ctx.out.size() && found.empty(); ++o) {
      const TensorView &t = ctx.out[o];
      if (!isFloat(t.dtype))
        continue;
      std::vector<unsigned char> host;
      const void *data = t.data;
      if (device) {
        host.resize(t.numel() * dtypeSize(t.dtype));
        if (!host.empty() && !device->toHost(host.data(), t.data, host.size(), err))
          return false;
        data = host.data();
      }
      for (int64_t e = 0; e < t.numel(); ++e) {
        double v = loadD(data, t.dtype, e);
        if (std::isfinite(v))
          continue;
        HostTensor spec;
        spec.shape = t.shape;
        found = "instruction " + std::to_string(i) + " (" + ins.kernel() +
                (ins.location().empty() ? "" : ", node '" + ins.location() + "'") +
                "): result " + std::to_string(o) + " of shape " +
                spec.shapeString() + " holds " + (std::isnan(v) ? "NaN" : "inf") +
                " at element " + std::to_string(e);
        break;
      }
    }
    return true;
  }

  /// Finishes every collective in flight (a run stopped early).
  bool drain(std::string &err) {
    for (int g = -1; g <= 1; ++g) {
      for (auto &[key, handle] : inflight[g + 1])
        if (!device && options.comm && !group(g)->finish(handle, err))
          return false;
      inflight[g + 1].clear();
    }
    if (nvme && !nvme->waitAll(err))
      return false;
    return !device || (device->synchronize(err) && dropCopies(err));
  }

  /// After a synchronize: the finished copies' handles freed.
  bool dropCopies(std::string &err) {
    for (const PendingCopy &c : copies)
      if (!device->waitCopy(c.handle, true, err))
        return false;
    copies.clear();
    return true;
  }

  /// Device parameters into the host copy.
  bool pullParams(std::string &err) {
    if (!pullShadow(err))
      return false;
    return !device ||
           device->toHost(params.get(), deviceParams->ptr, paramBytes, err);
  }

  /// Tensor parallelism: parameter i's slice axis and parts (a master copy
  /// is sliced as its parameter); parts 1 when whole.
  std::tuple<int, int, int, int64_t> tpSplitOf(int i) const {
    const plan::Parameter &param = p().parameters(i);
    const plan::Parameter *of = &param;
    if (!param.master_of().empty() && param.tp_parts() <= 1)
      for (const plan::Parameter &q : p().parameters())
        if (q.name() == param.master_of())
          of = &q;
    if (of->tp_parts() <= 1)
      return {0, 1, 1, 0};
    return {of->tp_axis(), static_cast<int>(of->tp_parts()),
            std::max(1, static_cast<int>(of->tp_blocks())), of->tp_whole()};
  }

  /// The index of the f32 master copy of parameter `i`, or -1.
  int masterOf(int i) const {
    const std::string &name = p().parameters(i).name();
    for (int j = 0; j < p().parameters_size(); ++j)
      if (p().parameters(j).master_of() == name)
        return j;
    return -1;
  }

  void *pointer(const plan::Buffer &b, bool hostSide = false) {
    if (device && !hostSide) {
      auto at = [&](void *base) {
        return static_cast<void *>(static_cast<char *>(base) + b.offset());
      };
      switch (b.space()) {
      case plan::ARENA: return at(deviceArena->ptr);
      case plan::HOST_ARENA: return at(hostArena.get());
      case plan::PARAM:
        if (location[b.slot()] == 1)
          return at(paramPtr[b.slot()]);
        if (location[b.slot()] == 2)
          return paramPtr[b.slot()] ? at(paramPtr[b.slot()]) : nullptr;
        return at(static_cast<char *>(deviceParams->ptr) +
                  paramOffsets[b.slot()]);
      case plan::INPUT: return at(deviceInputs[b.slot()]->ptr);
      case plan::CONST: return at(deviceConsts[b.slot()]->ptr);
      default: return nullptr;
      }
    }
    switch (b.space()) {
    case plan::ARENA: return arena.get() + b.offset();
    case plan::HOST_ARENA: return hostArena.get() + b.offset();
    case plan::PARAM:
      return paramPtr[b.slot()] ? paramPtr[b.slot()] + b.offset() : nullptr;
    case plan::INPUT: return inputs[b.slot()].data.data() + b.offset();
    case plan::CONST:
      return const_cast<char *>(p().constants(b.slot()).data()) + b.offset();
    default: return nullptr;
    }
  }
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
Executor::~Executor() = default;

std::unique_ptr<Executor> Executor::create(std::shared_ptr<const Plan> plan,
                                           const ExecutorOptions &options,
                                           std::string &err) {
  if (plan->proto.programs_size() == 0) {
    err = plan->proto.pipeline().stage_plans_size() > 0
              ? "'" + plan->path + "' is a pipeline of " +
                    std::to_string(plan->proto.pipeline().stages()) +
                    " stages: each rank runs its stage's plan (ds-run "
                    "picks it)"
              : "the plan has no program";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->plan = std::move(plan);
  impl->options = options;
  setThreadCount(options.threads);
  openblas_set_num_threads(options.threads);
  const plan::Plan &p = impl->p();
  impl->arena = alignedAlloc(p.programs(0).arena_bytes());
  if (!impl->arena) {
    err = "cannot allocate the arena of " +
          std::to_string(p.programs(0).arena_bytes()) + " bytes";
    return nullptr;
  }
  impl->hostArena = alignedAlloc(p.programs(0).host_arena_bytes());
  if (!impl->hostArena) {
    err = "cannot allocate the host arena of " +
          std::to_string(p.programs(0).host_arena_bytes()) + " bytes";
    return nullptr;
  }
  impl->inputs.resize(p.inputs_size());
  impl->inputSet.assign(p.inputs_size(), false);
  for (const plan::Instruction &ins : p.programs(0).instructions()) {
    impl->kernels.push_back(findKernel(ins.kernel()));
    for (uint32_t id : ins.outputs()) {
      const plan::Buffer &b = p.buffers(id);
      if (b.space() == plan::ARENA)
        impl->arenaHighWater =
            std::max<uint64_t>(impl->arenaHighWater, b.offset() + b.bytes());
      if (b.space() == plan::HOST_ARENA)
        impl->hostArenaHighWater = std::max<uint64_t>(
            impl->hostArenaHighWater, b.offset() + b.bytes());
    }
  }
  if (p.pipeline().stages() > 1) {
    if (options.backend == "cuda") {
      err = "this plan is a pipeline stage, which the CUDA backend does not "
            "run yet; run it with --backend=cpu";
      return nullptr;
    }
    impl->backwardStart = static_cast<int>(p.pipeline().backward_start());
    impl->updateStart = static_cast<int>(p.pipeline().update_start());
    if (impl->backwardStart <= 0 ||
        impl->backwardStart >= p.programs(0).instructions_size()) {
      err = "the plan's backward section starts at instruction " +
            std::to_string(impl->backwardStart) + ", outside its program";
      return nullptr;
    }
    impl->stashSpans = stashRanges(p, impl->backwardStart);
  }
  // The instruction that writes the loss: the loss output's writer, or
  // under data parallelism the writer of what its all-reduce averages.
  if (!p.loss().empty())
    for (const plan::Value &v : p.outputs()) {
      if (v.name() != p.loss())
        continue;
      uint32_t id = v.buffer();
      for (int pass = 0; pass < 2; ++pass) {
        int writer = -1;
        for (int i = 0; i < p.programs(0).instructions_size(); ++i)
          for (uint32_t o : p.programs(0).instructions(i).outputs())
            if (o == id)
              writer = i;
        if (writer < 0)
          break;
        const plan::Instruction &w = p.programs(0).instructions(writer);
        impl->lossInstruction = writer;
        if (w.kernel() != "all_reduce" || w.inputs_size() != 1)
          break;
        id = w.inputs(0);
      }
    }
  if (uint32_t tp = p.tensor_parallel(); tp > 1 && options.comm) {
    if (options.backend == "cuda") {
      err = "this plan is tensor-parallel, which the CUDA backend does not "
            "run yet; run it with --backend=cpu";
      return nullptr;
    }
    int rank = options.comm->rank();
    if (options.comm->size() % static_cast<int>(tp) ||
        !(impl->dpComm = options.comm->split(rank % tp, rank / tp, err)) ||
        !(impl->tpComm = options.comm->split(rank / tp, rank % tp, err)))
      return err.empty() ? (err = "cannot form the tensor-parallel groups",
                            nullptr)
                         : nullptr;
  }
  if (!impl->loadWeights(err))
    return nullptr;
  if (options.backend == "cuda" && !impl->openDevice(err))
    return nullptr;
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

bool Executor::setInput(const std::string &name, HostTensor tensor,
                        std::string &err) {
  const plan::Plan &p = impl->p();
  for (int i = 0; i < p.inputs_size(); ++i) {
    if (p.inputs(i).name() != name)
      continue;
    const plan::Buffer &b = p.buffers(p.inputs(i).buffer());
    DType want = toDType(b.dtype());
    std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
    if (tensor.shape != shape) {
      HostTensor spec;
      spec.shape = shape;
      err = "input '" + name + "' has shape " + tensor.shapeString() +
            ", the plan was compiled for " + spec.shapeString();
      return false;
    }
    std::string why;
    if (!convertTensor(tensor, want, why)) {
      err = "input '" + name + "' is " + dtypeName(tensor.dtype) +
            ", the plan expects " + dtypeName(want) + " (" + why + ")";
      return false;
    }
    impl->inputs[i] = std::move(tensor);
    impl->inputSet[i] = true;
    return true;
  }
  std::string names;
  for (const plan::Value &v : p.inputs())
    names += (names.empty() ? "" : ", ") + v.name();
  err = "'" + name + "' is not an input of the plan (inputs: " + names + ")";
  return false;
}

bool Executor::run(RunStats &stats, std::string &err) {
  const plan::Plan &p = impl->p();
  // A training plan's step counter (1 on the first run) feeds the optimizer.
  for (int i = 0; i < p.inputs_size(); ++i) {
    if (p.inputs(i).name() != "ds.step")
      continue;
    HostTensor step;
    step.dtype = DType::I64;
    int64_t value = static_cast<int64_t>(impl->runs - impl->skipped) + 1;
    step.data.resize(8);
    std::memcpy(step.data.data(), &value, 8);
    impl->inputs[i] = std::move(step);
    impl->inputSet[i] = true;
  }
  for (int i = 0; i < p.inputs_size(); ++i) {
    if (!impl->inputSet[i]) {
      err = "input '" + p.inputs(i).name() + "' was not given";
      return false;
    }
  }
  // A host copy of the NVMe state (a checkpoint read it) is stale once the
  // step runs: written back if a resume changed it, then freed.
  if (impl->nvmeShadow && !impl->pushShadow(err))
    return false;
  impl->bufferPtr.resize(p.buffers_size());
  for (int i = 0; i < p.buffers_size(); ++i)
    impl->bufferPtr[i] = impl->pointer(p.buffers(i));
  if (impl->device) {
    impl->hostBufferPtr.resize(p.buffers_size());
    for (int i = 0; i < p.buffers_size(); ++i)
      impl->hostBufferPtr[i] = impl->pointer(p.buffers(i), true);
  }
  if (impl->device)
    for (int i = 0; i < p.inputs_size(); ++i) {
      const HostTensor &t = impl->inputs[i];
      if (!t.data.empty() &&
          !impl->device->toDevice(impl->deviceInputs[i]->ptr, t.data.data(),
                                  t.data.size(), err))
        return false;
    }
  stats.arenaPlanned = p.programs(0).arena_bytes();
  stats.arenaHighWater = impl->arenaHighWater;
  stats.hostArenaPlanned = p.programs(0).host_arena_bytes();
  stats.hostArenaHighWater = impl->hostArenaHighWater;
  stats.toHostBytes = stats.toDeviceBytes = 0;
  stats.nvmeReadBytes = stats.nvmeWriteBytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  const plan::Program &prog = p.programs(0);
  uint64_t runSeed = fnv1a64(&impl->runs, sizeof(impl->runs),
                             0xcbf29ce484222325ULL ^ impl->options.seed);
  impl->lastRunSeed = runSeed;
  ++impl->runs;
  impl->stepState = {};
  for (uint64_t r : impl->options.injectOverflow)
    impl->stepState.inject |= r == impl->runs;
  stats.nanLoss = false;
  stats.firstNan.clear();
  if (!impl->runInstructions(0, prog.instructions_size(), runSeed, false,
                             stats, err))
    return false;
  if (stats.nanLoss) {
    // Stopped before any update: drain what is in flight; the run counts
    // as skipped (the optimizer's step counter does not move).
    if (!impl->drain(err))
      return false;
    ++impl->skipped;
    stats.milliseconds = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
    return true;
  }
  if (impl->device &&
      !(impl->device->synchronize(err) && impl->dropCopies(err))) {
    err = "the step failed on " + impl->device->describe() + ": " + err;
    return false;
  }
  if (impl->nvme && !impl->nvme->waitAll(err))
    return false;
  if (impl->stepState.overflow)
    ++impl->skipped;
  if (impl->inflightCount() != 0) {
    err = "the plan started " + std::to_string(impl->inflightCount()) +
          " collective(s) it never waited for";
    return false;
  }
  stats.milliseconds = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
  return true;
}

bool Executor::runSection(bool forward, int micro, uint64_t runIndex,
                          RunStats &stats, std::string &err,
                          bool deferUpdate) {
  Impl &im = *impl;
  const plan::Plan &p = im.p();
  if (im.backwardStart < 0) {
    err = "the plan is not a pipeline stage";
    return false;
  }
  if (im.deferred >= 0) {
    err = "a section ran before the deferred update of micro-batch " +
          std::to_string(im.deferred);
    return false;
  }
  if (deferUpdate && (forward || im.updateStart <= 0)) {
    err = "only a backward section with an update section can defer it";
    return false;
  }
  const plan::Program &prog = p.programs(0);
  auto t0 = std::chrono::steady_clock::now();
  stats.nanLoss = false;
  stats.firstNan.clear();
  if (forward) {
    // The micro-batch still in the arena keeps its forward state aside.
    if (im.arenaHolds >= 0)
      im.saveStash(im.arenaHolds);
    im.arenaHolds = -1;
    for (int i = 0; i < p.inputs_size(); ++i) {
      if (p.inputs(i).name() != "ds.step")
        continue;
      HostTensor step;
      step.dtype = DType::I64;
      int64_t value = static_cast<int64_t>(runIndex - im.skipped) + 1;
      step.data.resize(8);
      std::memcpy(step.data.data(), &value, 8);
      im.inputs[i] = std::move(step);
      im.inputSet[i] = true;
    }
    for (int i = 0; i < p.inputs_size(); ++i)
      if (!im.inputSet[i]) {
        err = "input '" + p.inputs(i).name() + "' was not given";
        return false;
      }
    Impl::Stashed &st = im.stash[micro];
    st = Impl::Stashed();
    st.inputs = im.inputs;
    st.seed = fnv1a64(&runIndex, sizeof(runIndex),
                      0xcbf29ce484222325ULL ^ im.options.seed);
    im.stepState = {};
  } else {
    auto it = im.stash.find(micro);
    if (it == im.stash.end()) {
      err = "the backward of micro-batch " + std::to_string(micro) +
            " comes before its forward";
      return false;
    }
    if (im.arenaHolds != micro) {
      if (im.arenaHolds >= 0)
        im.saveStash(im.arenaHolds);
      im.restoreStash(micro);
    }
    im.inputs = it->second.inputs;
  }
  Impl::Stashed &st = im.stash[micro];
  im.bufferPtr.resize(p.buffers_size());
  for (int i = 0; i < p.buffers_size(); ++i)
    im.bufferPtr[i] = im.pointer(p.buffers(i));
  stats.arenaPlanned = prog.arena_bytes();
  stats.arenaHighWater = im.arenaHighWater;
  stats.hostArenaPlanned = prog.host_arena_bytes();
  stats.hostArenaHighWater = im.hostArenaHighWater;
  im.micro = micro;
  im.lastRunSeed = st.seed;
  bool ok = forward ? im.runInstructions(0, im.backwardStart, st.seed, false,
                                         stats, err)
                    : im.runInstructions(im.backwardStart,
                                         deferUpdate ? im.updateStart
                                                     : prog.instructions_size(),
                                         st.seed, false, stats, err);
  if (!ok)
    return false;
  if (stats.nanLoss)
    return im.drain(err);
  if (im.inflightCount() != 0) {
    err = "the plan left " + std::to_string(im.inflightCount()) +
          " collective(s) in flight at the end of a pipeline section";
    return false;
  }
  if (forward) {
    im.arenaHolds = micro;
  } else if (deferUpdate) {
    // The arena keeps the gradients for the update.
    im.arenaHolds = -1;
    im.deferred = micro;
  } else {
    im.arenaHolds = -1;
    im.endMicroBatch(micro);
  }
  stats.milliseconds = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
  return true;
}

bool Executor::runDeferredUpdate(RunStats &stats, std::string &err) {
  Impl &im = *impl;
  if (im.deferred < 0)
    return true;
  const plan::Plan &p = im.p();
  int micro = im.deferred;
  im.deferred = -1;
  auto t0 = std::chrono::steady_clock::now();
  Impl::Stashed &st = im.stash[micro];
  im.inputs = st.inputs;
  for (int i = 0; i < p.buffers_size(); ++i)
    im.bufferPtr[i] = im.pointer(p.buffers(i));
  im.micro = micro;
  if (!im.runInstructions(im.updateStart, p.programs(0).instructions_size(),
                          st.seed, false, stats, err))
    return false;
  if (im.inflightCount() != 0) {
    err = "the plan left " + std::to_string(im.inflightCount()) +
          " collective(s) in flight after an update";
    return false;
  }
  im.endMicroBatch(micro);
  stats.milliseconds = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - t0)
                           .count();
  return true;
}

uint64_t Executor::stashHighWater() const { return impl->stashHigh; }

bool Executor::scanForNan(RunStats &stats, std::string &err) {
  stats.firstNan.clear();
  int end = impl->lossInstruction >= 0 ? impl->lossInstruction + 1
                                       : impl->p().programs(0).instructions_size();
  bool guard = impl->options.nanGuard;
  impl->options.nanGuard = false;
  bool ok = impl->runInstructions(0, end, impl->lastRunSeed, true, stats, err) &&
            impl->drain(err);
  impl->options.nanGuard = guard;
  return ok;
}

bool Executor::Impl::runInstructions(int from, int to, uint64_t runSeed,
                                     bool scan, RunStats &stats,
                                     std::string &err) {
  // What the groups' collectives moved counts on the world's counter.
  struct Collect {
    Impl *impl;
    ~Collect() { impl->collectBytes(); }
  } collect{this};
  const plan::Plan &p = this->p();
  const plan::Program &prog = p.programs(0);
  Impl *impl = this;
  for (int i = from; i < to; ++i) {
    const plan::Instruction &ins = prog.instructions(i);
    const KernelInfo *k = impl->kernels[i];
    KernelContext ctx{{}, {}, Attrs(&ins), 0, {}, NAN, nullptr};
    // On the CUDA backend a host instruction reads host copies.
    const std::vector<void *> &ptrs =
        impl->device && ins.on_host() ? impl->hostBufferPtr : impl->bufferPtr;
    auto view = [&](uint32_t id) {
      const plan::Buffer &b = p.buffers(id);
      TensorView v;
      v.data = ptrs[id];
      v.dtype = toDType(b.dtype());
      v.shape.assign(b.shape().begin(), b.shape().end());
      return v;
    };
    for (uint32_t id : ins.inputs())
      ctx.in.push_back(view(id));
    for (uint32_t id : ins.outputs())
      ctx.out.push_back(view(id));
    // Random kernels draw from the run and their ONNX node, so that plans
    // that differ elsewhere (ZeRO's collectives, another world size, a
    // recomputed copy of the node) draw the same numbers.
    ctx.seed = runSeed ^ (ins.location().empty()
                              ? static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL
                              : fnv1a64(ins.location().data(),
                                        ins.location().size()));
    ctx.lr = impl->options.lr;
    int group = Impl::groupOf(ctx.attrs);
    ctx.comm = impl->group(group);
    ctx.inflight = &impl->inflight[group + 1];
    ctx.step = &impl->stepState;
    ctx.pipe = impl->options.pipe;
    ctx.pipeStride = impl->options.pipeStride;
    ctx.micro = impl->micro;
    auto k0 = std::chrono::steady_clock::now();
    // NVMe: wait for the reads and writes whose host bytes this
    // instruction touches; start its own if it is an NVMe transfer.
    if (impl->nvme && !impl->nvme->pending().empty()) {
      auto touches = [&](const TensorView &v) {
        auto *b = static_cast<const unsigned char *>(v.data);
        auto *e = b + v.numel() * dtypeSize(v.dtype);
        for (const NvmeStore::Pending &q : impl->nvme->pending())
          if (b && q.begin < e && b < q.end)
            return q.ticket;
        return 0;
      };
      for (int pass = 0; pass < 2; ++pass)
        for (const TensorView &v : pass ? ctx.out : ctx.in)
          for (int t; (t = touches(v)) != 0;)
            if (!impl->nvme->wait(t, err))
              return false;
    }
    bool transferIns = ins.kernel() == "transfer";
    bool nvmeIo = false;
    if (transferIns)
      for (uint32_t id : {ins.inputs(0), ins.outputs(0)}) {
        const plan::Buffer &b = p.buffers(id);
        nvmeIo |= b.space() == plan::PARAM && impl->nvmeSlot[b.slot()] >= 0;
      }
    // CUDA offload: wait for the copies whose bytes this instruction reads
    // or writes (or whose source it overwrites). Copies after copies are
    // ordered on the copy stream.
    if (impl->device && !impl->copies.empty() && !(transferIns && !nvmeIo)) {
      bool hostSide = ins.on_host() || nvmeIo;
      auto range = [](const TensorView &v) {
        auto *b = static_cast<const unsigned char *>(v.data);
        return std::make_pair(b, b + (b ? v.numel() * dtypeSize(v.dtype) : 0));
      };
      auto hits = [](std::pair<const unsigned char *, const unsigned char *> r,
                     const unsigned char *b, const unsigned char *e) {
        return r.first && r.first < e && b < r.second;
      };
      for (size_t c = 0; c < impl->copies.size();) {
        const Impl::PendingCopy &pc = impl->copies[c];
        bool wait = false;
        for (const TensorView &v : ctx.in)
          wait |= hits(range(v), pc.dst, pc.dstEnd);
        for (const TensorView &v : ctx.out)
          wait |= hits(range(v), pc.dst, pc.dstEnd) ||
                  hits(range(v), pc.src, pc.srcEnd);
        if (!wait) {
          ++c;
          continue;
        }
        if (!impl->device->waitCopy(pc.handle, hostSide, err))
          return false;
        impl->copies.erase(impl->copies.begin() + static_cast<long>(c));
      }
    }
    bool handled = false;
    if (transferIns && impl->device && !nvmeIo) {
      int handle;
      const TensorView &from = ctx.in[0];
      uint64_t bytes = from.numel() * dtypeSize(from.dtype);
      if (!impl->device->copyAsync(ctx.out[0].data, from.data, bytes, handle, err))
        return false;
      auto *s = static_cast<const unsigned char *>(from.data);
      auto *d = static_cast<const unsigned char *>(ctx.out[0].data);
      impl->copies.push_back({handle, s, s + bytes, d, d + bytes});
    }
    if (transferIns) {
      const plan::Buffer &from = p.buffers(ins.inputs(0));
      const plan::Buffer &to = p.buffers(ins.outputs(0));
      auto nvmeSlotOf = [&](const plan::Buffer &b) {
        return b.space() == plan::PARAM ? impl->nvmeSlot[b.slot()] : -1;
      };
      int readSlot = nvmeSlotOf(from), writeSlot = nvmeSlotOf(to);
      int ticket;
      uint64_t bytes = from.bytes();
      if (readSlot >= 0) {
        if (!impl->nvme->read(readSlot, ctx.out[0].data, bytes, ticket, err))
          return false;
        stats.nvmeReadBytes += bytes;
        handled = true;
      } else if (writeSlot >= 0) {
        if (!impl->nvme->write(writeSlot, ctx.in[0].data, bytes, ticket, err))
          return false;
        stats.nvmeWriteBytes += bytes;
        handled = true;
      } else if (to.space() == plan::HOST_ARENA ||
                 (to.space() == plan::PARAM &&
                  p.parameters(to.slot()).location() == plan::HOST)) {
        stats.toHostBytes += bytes;
      } else {
        stats.toDeviceBytes += bytes;
      }
    }
    if (transferIns && impl->device && !nvmeIo)
      handled = true;
    if (!handled && !k->fn(ctx)) {
      err = "instruction " + std::to_string(i) + " (" + ins.kernel() +
            (ins.location().empty() ? "" : ", node '" + ins.location() + "'") +
            "): " + ctx.error;
      return false;
    }
    for (int g = -1; g <= 1; ++g)
      if (!impl->inflight[g + 1].empty())
        impl->group(g)->progress();
    if (impl->device && impl->options.profile &&
        !impl->device->synchronize(err))
      return false;
    if (impl->options.profile) {
      double ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - k0)
                      .count();
      auto &entry = stats.kernelTimes[ins.kernel()];
      entry.milliseconds += ms;
      entry.calls += 1;
      if (ins.kernel() == "matmul" || ins.kernel() == "gemm") {
        // 2*M*N*K: every result element is a K-long dot product.
        const TensorView &a = ctx.in[0];
        bool transA = ctx.attrs.getInt("trans_a", 0) && a.rank() >= 2;
        int64_t k = transA ? a.shape[a.rank() - 2] : a.shape.back();
        entry.flops += 2.0 * static_cast<double>(ctx.out[0].numel()) * k;
      }
    }
    // Scanning goes on to the end (other ranks run the same collectives).
    if (scan && stats.firstNan.empty() &&
        !firstNonFinite(i, ctx, stats.firstNan, err))
      return false;
    if (i == lossInstruction && options.nanGuard) {
      // Every rank checks its local loss; all stop if one is not finite.
      bool bad = false;
      if (!lossIsBad(ctx.out[0], bad, err))
        return false;
      float flag = bad ? 1.0f : 0.0f;
      if (options.comm && options.comm->size() > 1 &&
          !options.comm->allReduce(&flag, 1, DType::F32, false, err))
        return false;
      if (flag > 0.0f) {
        stats.nanLoss = true;
        return true;
      }
    }
  }
  return true;
}

bool Executor::output(const std::string &name, HostTensor &out,
                      std::string &err) const {
  const plan::Plan &p = impl->p();
  for (const plan::Value &v : p.outputs()) {
    if (v.name() != name)
      continue;
    const plan::Buffer &b = p.buffers(v.buffer());
    out.dtype = toDType(b.dtype());
    out.shape.assign(b.shape().begin(), b.shape().end());
    out.data.resize(b.bytes());
    if (b.bytes() && impl->device)
      return impl->device->toHost(out.data.data(), impl->pointer(b),
                                  b.bytes(), err);
    if (b.bytes())
      std::memcpy(out.data.data(), impl->pointer(b), b.bytes());
    return true;
  }
  err = "'" + name + "' is not an output of the plan";
  return false;
}

std::vector<std::string> Executor::inputNames() const {
  std::vector<std::string> names;
  for (const plan::Value &v : impl->p().inputs())
    names.push_back(v.name());
  return names;
}

std::vector<std::string> Executor::parameterNames() const {
  std::vector<std::string> names;
  for (const plan::Parameter &param : impl->p().parameters())
    if (!param.state())
      names.push_back(param.name());
  return names;
}

bool Executor::parameter(const std::string &name, HostTensor &out,
                         std::string &err) const {
  const plan::Plan &p = impl->p();
  for (int i = 0; i < p.parameters_size(); ++i) {
    if (p.parameters(i).name() != name)
      continue;
    // A 16-bit parameter's value is its f32 master copy's.
    if (int m = impl->masterOf(i); m >= 0)
      i = m;
    if (!impl->pullParams(err))
      return false;
    const plan::Parameter &param = p.parameters(i);
    out.dtype = toDType(param.dtype());
    size_t es = dtypeSize(out.dtype);
    // This rank's tensor: whole, or rebuilt from the data-parallel group's
    // ZeRO shards (padding dropped).
    std::vector<unsigned char> mine;
    std::vector<int64_t> shape;
    if (!param.sharded()) {
      shape.assign(param.shape().begin(), param.shape().end());
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      mine.assign(impl->paramPtr[i], impl->paramPtr[i] + n * es);
    } else {
      Communicator *comm = impl->group(0);
      int world = comm ? comm->size() : 1;
      size_t shardBytes = param.shape(0) * es;
      mine.resize(shardBytes * world);
      if (world == 1)
        std::memcpy(mine.data(), impl->paramPtr[i], shardBytes);
      else if (!comm->allGather(impl->paramPtr[i], mine.data(), param.shape(0),
                                out.dtype, err))
        return false;
      shape.assign(param.full_shape().begin(), param.full_shape().end());
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      mine.resize(n * es);
    }
    auto [axis, parts, blocks, tpTotal] = impl->tpSplitOf(i);
    if (parts <= 1) {
      out.shape = shape;
      out.data = std::move(mine);
      return true;
    }
    // Tensor parallelism: every rank's slice of the group, joined along the
    // axis (tensor-parallel rank r holds slice r).
    Communicator *comm = impl->group(1);
    if (!comm || comm->size() != parts) {
      err = "'" + name + "' is split over " + std::to_string(parts) +
            " tensor-parallel ranks, not the " +
            std::to_string(comm ? comm->size() : 1) + " running";
      return false;
    }
    int64_t n = static_cast<int64_t>(mine.size() / es);
    std::vector<unsigned char> all(mine.size() * parts);
    if (!comm->allGather(mine.data(), all.data(), n, out.dtype, err))
      return false;
    shape[axis] = tpTotal > 0 ? tpTotal : shape[axis] * parts;
    out.shape = shape;
    TpLayout layout(shape, axis, parts, blocks);
    out.data.resize(static_cast<size_t>(layout.outer * layout.total *
                                        layout.inner) *
                    es);
    for (int r = 0; r < parts; ++r)
      layout.join(all.data() + static_cast<size_t>(r) * n * es,
                  out.data.data(), r, es);
    return true;
  }
  err = "'" + name + "' is not a parameter of the plan";
  return false;
}

bool Executor::commitStorage(std::string &err) {
  if (!impl->pushShadow(err))
    return false;
  return !impl->device ||
         impl->device->toDevice(impl->deviceParams->ptr, impl->params.get(),
                                impl->paramBytes, err);
}

std::string Executor::deviceName() const {
  return impl->device ? impl->device->describe() : "cpu";
}

std::vector<Executor::Storage> Executor::storage() {
  const plan::Plan &p = impl->p();
  std::string pullError;
  if (!impl->pullParams(pullError))
    return {};
  std::vector<Storage> out;
  for (int i = 0; i < p.parameters_size(); ++i) {
    const plan::Parameter &param = p.parameters(i);
    Storage s;
    s.name = param.name();
    s.dtype = toDType(param.dtype());
    s.shape.assign(param.shape().begin(), param.shape().end());
    s.fullShape.assign(param.full_shape().begin(), param.full_shape().end());
    s.sharded = param.sharded();
    s.state = param.state();
    s.trainable = param.trainable();
    s.location = static_cast<int>(param.location());
    std::tie(s.tpAxis, s.tpParts, s.tpBlocks, s.tpWhole) = impl->tpSplitOf(i);
    s.data = impl->paramPtr[i];
    s.bytes = dtypeSize(s.dtype);
    for (int64_t d : s.shape)
      s.bytes *= d;
    out.push_back(std::move(s));
  }
  return out;
}

uint64_t Executor::completedRuns() const { return impl->runs; }
bool Executor::lastRunOverflowed() const { return impl->stepState.overflow; }
uint64_t Executor::skippedRuns() const { return impl->skipped; }
void Executor::setSkippedRuns(uint64_t skipped) { impl->skipped = skipped; }
void Executor::setCompletedRuns(uint64_t runs) { impl->runs = runs; }

std::vector<std::string> Executor::outputNames() const {
  std::vector<std::string> names;
  for (const plan::Value &v : impl->p().outputs())
    names.push_back(v.name());
  return names;
}

} // namespace ds::rt
