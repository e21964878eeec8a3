//===- DsModule.cpp - the ds._ds Python extension (pybind11) -------------===//
//
// Part of the ds project.
//
// Binds the in-process compile (EngineCompile.h) and the step-level
// runtime (ds/Runtime/Session.h) for python/ds/engine.py. Arrays cross as
// numpy arrays (float32, float16, int64, int32, bool; bfloat16 values come
// back as float32). Errors raise RuntimeError with the runtime's message.
// Built with exceptions and RTTI, unlike the compiler: nothing from LLVM or
// MLIR is included here.
//
//===----------------------------------------------------------------------===//

#include "EngineCompile.h"

#include "ds/Runtime/Comm.h"
#include "ds/Runtime/Session.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

namespace py = pybind11;
using namespace ds::rt;

namespace {

/// The process's communicator: MPI's world under mpirun, else one rank.
/// Created on first use; released at interpreter exit (MPI_Finalize).
std::unique_ptr<Communicator> &worldSlot() {
  static std::unique_ptr<Communicator> world;
  return world;
}

Communicator &world() {
  std::unique_ptr<Communicator> &w = worldSlot();
  if (!w) {
    std::string err;
    w = createCommunicator(err);
    if (!w)
      throw std::runtime_error("ds: cannot start the communicator: " + err);
    py::module_::import("atexit").attr("register")(
        py::cpp_function([] { worldSlot().reset(); }));
  }
  return *w;
}

[[noreturn]] void raise(const std::string &err) {
  throw std::runtime_error(err);
}

HostTensor toHost(const std::string &name, py::array array) {
  HostTensor t;
  py::dtype dt = array.dtype();
  if (dt.is(py::dtype::of<float>()))
    t.dtype = DType::F32;
  else if (dt.kind() == 'f' && dt.itemsize() == 2)
    t.dtype = DType::F16;
  else if (dt.is(py::dtype::of<int64_t>()))
    t.dtype = DType::I64;
  else if (dt.is(py::dtype::of<int32_t>()))
    t.dtype = DType::I32;
  else if (dt.is(py::dtype::of<bool>()))
    t.dtype = DType::Bool;
  else
    raise("array '" + name + "' has numpy type " +
          std::string(py::str(dt)) +
          "; ds takes float32, float16, int64, int32 or bool");
  py::array c = py::array::ensure(array, py::array::c_style);
  for (py::ssize_t d = 0; d < c.ndim(); ++d)
    t.shape.push_back(c.shape(d));
  const auto *p = static_cast<const unsigned char *>(c.data());
  t.data.assign(p, p + c.nbytes());
  return t;
}

/// A batch (name -> array) as host tensors.
std::map<std::string, HostTensor> hostBatch(py::dict batch) {
  std::map<std::string, HostTensor> inputs;
  for (auto [k, v] : batch) {
    std::string name = py::str(k);
    inputs[name] = toHost(name, py::array::ensure(v));
  }
  return inputs;
}

py::array toNumpy(HostTensor t) {
  std::string err;
  if (t.dtype == DType::BF16 && !convertTensor(t, DType::F32, err))
    raise(err);
  py::dtype dt = t.dtype == DType::F32   ? py::dtype::of<float>()
                 : t.dtype == DType::F16 ? py::dtype("float16")
                 : t.dtype == DType::I64 ? py::dtype::of<int64_t>()
                 : t.dtype == DType::I32 ? py::dtype::of<int32_t>()
                                         : py::dtype::of<bool>();
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  py::array out(dt, shape);
  std::memcpy(out.mutable_data(), t.data.data(), t.data.size());
  return out;
}

py::dict infoDict(const PlanInfo &info) {
  py::dict d;
  d["world_size"] = info.worldSize;
  d["zero_stage"] = info.zeroStage;
  d["accum_steps"] = info.accumSteps;
  d["optimizer"] = info.optimizer;
  d["lr"] = info.lr;
  d["loss"] = info.loss;
  d["schedule"] = info.schedule;
  d["trains"] = info.updatesParameters;
  d["loss_scaling"] = info.lossScaling;
  d["options"] = info.options;
  return d;
}

std::unique_ptr<Session> openSession(py::bytes plan, const std::string &name,
                                     int threads, uint64_t seed,
                                     const std::string &backend) {
  std::string err;
  std::shared_ptr<const Plan> p = loadPlanBytes(std::string(plan), name, err);
  if (!p)
    raise(err);
  SessionOptions o;
  o.threads = threads;
  o.seed = seed;
  o.backend = backend;
  std::unique_ptr<Session> s = Session::open(p, world(), o, err);
  if (!s)
    raise(err);
  return s;
}

} // namespace

PYBIND11_MODULE(_ds, m) {
  m.doc() = "ds's compiler and step-level runtime (used by ds.initialize)";
  m.def(
      "compile",
      [](const std::string &model,
         const std::vector<std::pair<std::string, std::string>> &flags,
         const std::string &config, const std::string &planPath) {
        ds::python::CompileOutcome r =
            ds::python::compileModel(model, flags, config, planPath);
        return py::make_tuple(r.ok, py::bytes(r.plan), r.planDir, r.messages,
                              r.report);
      },
      py::arg("model"), py::arg("flags"), py::arg("config") = "",
      py::arg("plan_path") = "",
      "Compiles model.onnx in-process; returns (ok, plan bytes, plan folder, "
      "messages, report).");
  m.def(
      "estimate",
      [](const std::string &model,
         const std::vector<std::pair<std::string, std::string>> &flags,
         const std::string &config) {
        ds::python::CompileOutcome r =
            ds::python::estimateModel(model, flags, config);
        return py::make_tuple(r.ok, r.messages, r.report);
      },
      py::arg("model"), py::arg("flags"), py::arg("config") = "",
      "Runs the --plan=auto search in-process; returns (ok, messages, the "
      "JSON report with plan.candidates[]).");
  m.def("rank", [] { return world().rank(); });
  m.def("world_size", [] { return world().size(); });
  m.def("barrier", [] {
    if (!world().allOk(true))
      raise("another rank failed");
  });
  m.def(
      "broadcast_bytes",
      [](py::bytes data, int root) {
        Communicator &w = world();
        std::string bytes = w.rank() == root ? std::string(data) : "";
        uint64_t size = bytes.size();
        std::string err;
        if (!w.broadcast(&size, 8, root, err))
          raise(err);
        bytes.resize(size);
        if (size && !w.broadcast(bytes.data(), size, root, err))
          raise(err);
        return py::bytes(bytes);
      },
      py::arg("data"), py::arg("root") = 0,
      "Rank `root`'s bytes on every rank (collective).");
  m.def("read_plan", [](const std::string &path) {
    std::FILE *f = std::fopen(path.c_str(), "rb");
    if (!f)
      raise("cannot open plan '" + path + "'");
    std::string bytes;
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
      bytes.append(buf, n);
    std::fclose(f);
    return py::bytes(bytes);
  });

  py::class_<Session>(m, "Session")
      .def(py::init(&openSession), py::arg("plan"), py::arg("name"),
           py::arg("threads") = 1, py::arg("seed") = 0,
           py::arg("backend") = "cpu")
      .def_property_readonly("info",
                             [](const Session &s) { return infoDict(s.info()); })
      .def("input_specs",
           [](const Session &s) {
             py::list l;
             for (const auto &[name, spec] : s.inputSpecs())
               l.append(py::make_tuple(name, dtypeName(spec.dtype),
                                       spec.shape));
             return l;
           })
      .def("run",
           [](Session &s, py::dict batch) {
             double loss = 0;
             std::string err;
             if (!s.run(hostBatch(batch), loss, err))
               raise(err);
             return loss;
           })
      .def("eval",
           [](Session &s, py::dict batch) {
             double loss = 0;
             std::string err;
             if (!s.eval(hostBatch(batch), loss, err))
               raise(err);
             return loss;
           })
      .def_property_readonly("global_steps", &Session::globalSteps)
      .def_property_readonly("micro_steps", &Session::microSteps)
      .def_property_readonly("at_boundary", &Session::atBoundary)
      .def_property_readonly("last_step_skipped", &Session::lastStepSkipped)
      .def_property_readonly("loss_scale", &Session::lossScale)
      .def("lr", &Session::lr)
      .def("set_lr", &Session::setLr, py::arg("lr"),
           "The base learning rate of the optimizer steps that follow.")
      .def("parameter_names", &Session::parameterNames)
      .def("parameter",
           [](const Session &s, const std::string &name) {
             HostTensor t;
             std::string err;
             if (!s.parameter(name, t, err))
               raise(err);
             return toNumpy(std::move(t));
           })
      .def("set_parameter",
           [](Session &s, const std::string &name, py::array value) {
             std::string err;
             if (!s.setParameter(name, toHost(name, value), err))
               raise(err);
           })
      .def("save",
           [](Session &s, const std::string &dir) {
             std::string err;
             if (!s.save(dir, err))
               raise(err);
           })
      .def("load", [](Session &s, const std::string &dir) {
        std::string err;
        if (!s.load(dir, err))
          raise(err);
      });
}
