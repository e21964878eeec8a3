//===- ModelSummary.cpp - what a ds module holds --------------------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Analysis/ModelSummary.h"
#include "ds/Dialect/Ds/IR/DsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::ds;

static std::string typeStr(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

FailureOr<ModelSummary> ds::summarize(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    return module.emitError("no func.func @forward to summarize");
  ModelSummary s;
  if (auto src = module->getAttrOfType<StringAttr>(attrs::kSource))
    s.source = src.str();
  if (auto opset = module->getAttrOfType<IntegerAttr>(attrs::kOpset))
    s.opset = opset.getInt();
  if (auto info = module->getAttrOfType<ArrayAttr>(attrs::kTrainingInfo))
    s.trainingInfoEntries = info.size();

  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    Type type = func.getArgument(i).getType();
    ModelSummary::Tensor t;
    t.type = typeStr(type);
    t.elements = detail::numElements(type);
    t.bytes = detail::tensorBytes(type);
    if (auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam)) {
      t.name = name.str();
      t.trainable = func.getArgAttr(i, attrs::kTrainable) != nullptr;
      s.paramElements += t.elements;
      s.paramBytes += t.bytes;
      if (t.trainable)
        s.trainableElements += t.elements;
      s.params.push_back(t);
    } else {
      auto input = func.getArgAttrOfType<StringAttr>(i, attrs::kInput);
      t.name = input ? input.str() : ("arg" + std::to_string(i));
      s.inputs.push_back(t);
    }
  }
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    ModelSummary::Tensor t;
    auto name = func.getResultAttrOfType<StringAttr>(i, attrs::kOutput);
    t.name = name ? name.str() : ("result" + std::to_string(i));
    t.type = typeStr(func.getResultTypes()[i]);
    if (func.getResultAttr(i, attrs::kLoss))
      s.loss = t.name;
    s.outputs.push_back(t);
  }
  func.walk([&](Operation *op) {
    if (!isa<DsDialect>(op->getDialect()))
      return;
    ++s.opHistogram[op->getName().getStringRef().str()];
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      s.flops += cost.getFlops();
      s.bytesRead += cost.getBytesRead();
      s.bytesWritten += cost.getBytesWritten();
    }
  });
  return s;
}

static std::string human(int64_t n) {
  const char *units[] = {"", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  if (u == 0)
    os << n;
  else
    os << llvm::format("%.2f", v) << units[u];
  return out;
}

void ds::printSummary(const ModelSummary &s, llvm::raw_ostream &os) {
  os << "model: " << s.source << " (opset " << s.opset << ")\n";
  os << "inputs: " << s.inputs.size() << "\n";
  for (const auto &t : s.inputs)
    os << "  " << t.name << " : " << t.type << "\n";
  size_t trainable = std::count_if(s.params.begin(), s.params.end(),
                                   [](const auto &t) { return t.trainable; });
  os << "parameters: " << s.params.size() << " tensors, "
     << human(s.paramElements) << " elements (" << s.paramElements << "), "
     << human(s.paramBytes) << "B; trainable: " << trainable << " tensors, "
     << s.trainableElements << " elements\n";
  size_t shown = 0;
  for (const auto &t : s.params) {
    if (shown++ == 12) {
      os << "  ... " << s.params.size() - 12 << " more\n";
      break;
    }
    os << "  " << t.name << " : " << t.type
       << (t.trainable ? "" : " (not trainable)") << "\n";
  }
  os << "outputs: " << s.outputs.size() << "\n";
  for (const auto &t : s.outputs)
    os << "  " << t.name << " : " << t.type
       << (t.name == s.loss ? " (loss)" : "") << "\n";
  os << "loss: " << (s.loss.empty() ? "none (forward-only model)" : s.loss)
     << "\n";
  if (s.trainingInfoEntries)
    os << "training_info: " << s.trainingInfoEntries << " entries\n";
  std::vector<std::pair<std::string, int64_t>> hist(s.opHistogram.begin(),
                                                    s.opHistogram.end());
  llvm::sort(hist, [](const auto &a, const auto &b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  int64_t total = 0;
  for (const auto &h : hist)
    total += h.second;
  os << "ops: " << total << " (" << hist.size() << " kinds)\n";
  for (const auto &h : hist)
    os << "  " << llvm::format("%-32s", h.first.c_str()) << " " << h.second
       << "\n";
  os << "forward cost: " << human(s.flops) << "FLOP (" << s.flops << "), "
     << human(s.bytesRead) << "B read, " << human(s.bytesWritten)
     << "B written (unfused)\n";
}
