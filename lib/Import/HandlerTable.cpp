//===- HandlerTable.cpp - The ONNX op handlers by domain and op type ------===//
//
// Part of the ds project.
//
// The one table of handlers, filled by each family's register function. A
// new family of ops is a new file with its register function and one line
// in handlerTable().
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

#include "llvm/ADT/STLExtras.h"


using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::onnx_import;

void HandlerTable::add(StringRef domain, StringRef opType, Handler handler) {
  StringRef key = isDefaultDomain(domain) ? StringRef() : domain;
  if (!byDomain[key].try_emplace(opType, std::move(handler)).second)
    duplicates.push_back(key.empty() ? opType.str()
                                     : (key + "." + opType).str());
}

const Handler *HandlerTable::lookup(StringRef domain, StringRef opType) const {
  auto ops = byDomain.find(isDefaultDomain(domain) ? StringRef() : domain);
  if (ops == byDomain.end())
    return nullptr;
  auto it = ops->second.find(opType);
  return it == ops->second.end() ? nullptr : &it->second;
}

std::vector<std::string> HandlerTable::opNames() const {
  std::vector<std::string> names;
  for (const auto &domain : byDomain)
    for (const auto &op : domain.second)
      names.push_back(domain.getKey().empty()
                          ? op.getKey().str()
                          : (domain.getKey() + "." + op.getKey()).str());
  llvm::sort(names);
  return names;
}

const HandlerTable &onnx_import::handlerTable() {
  static const HandlerTable table = [] {
    HandlerTable t;
    registerElementwiseHandlers(t);
    registerLinalgHandlers(t);
    registerConvHandlers(t);
    registerMovementHandlers(t);
    registerReductionHandlers(t);
    registerElementIndexHandlers(t);
    registerShapeHandlers(t);
    registerLossHandlers(t);
    registerTrainingDomainHandlers(t);
    registerPoolingHandlers(t);
    registerRecurrentHandlers(t); // LSTM, GRU (rnn family)
    registerBatchNormHandlers(t);
    // Misc family (issue 22).
    registerEinsumHandlers(t);
    registerTopKHandlers(t);
    registerLoopHandlers(t);
    registerSpatialHandlers(t);
    return t;
  }();
  return table;
}
