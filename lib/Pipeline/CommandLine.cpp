//===- CommandLine.cpp - TrainingOptions as llvm::cl options --------------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Pipeline/CommandLine.h"

using namespace mlir;
using namespace mlir::ds;
namespace cl = llvm::cl;

namespace {
constexpr OptionCategory kCategories[] = {
    OptionCategory::Input, OptionCategory::Train, OptionCategory::Parallel,
    OptionCategory::Memory, OptionCategory::Cost};

/// A cl option of the field's type, writing into the field, initialised
/// from the storage's current value (the table's default).
template <typename T>
std::unique_ptr<cl::Option> makeOption(const OptionInfo &info, T &field,
                                       cl::OptionCategory &category) {
  if constexpr (std::is_same_v<T, StringList>) {
    auto o = std::make_unique<cl::list<std::string, StringList>>(
        llvm::StringRef(info.flag), cl::desc(info.help), cl::location(field),
        cl::cat(category));
    if (!info.valueDesc.empty())
      o->setValueStr(info.valueDesc);
    return o;
  } else {
    auto o = std::make_unique<cl::opt<T, /*ExternalStorage=*/true>>(
        llvm::StringRef(info.flag), cl::desc(info.help), cl::location(field),
        cl::init(T(field)), cl::cat(category));
    if (!info.valueDesc.empty())
      o->setValueStr(info.valueDesc);
    if (info.kind == OptionKind::ToolOptionalValue)
      o->setValueExpectedFlag(cl::ValueOptional);
    return o;
  }
}
} // namespace

TrainingOptionsCL::TrainingOptionsCL(TrainingOptions &storage)
    : storage(storage) {
  for (OptionCategory cat : kCategories)
    categories.push_back(
        std::make_unique<cl::OptionCategory>(categoryTitle(cat)));
  for (const OptionInfo &info : trainingOptionTable()) {
    cl::OptionCategory &category = *categories[size_t(info.category)];
    std::unique_ptr<cl::Option> o = std::visit(
        [&](auto member) {
          return makeOption(info, storage.*member, category);
        },
        info.field);
    options.emplace_back(&info, std::move(o));
  }
}

TrainingOptionsCL::~TrainingOptionsCL() = default;

void TrainingOptionsCL::hideOtherOptions() {
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *o = entry.second;
    bool ours = llvm::any_of(o->Categories, [&](cl::OptionCategory *c) {
      return c->getName() == "Generic Options" ||
             llvm::any_of(categories,
                          [&](auto &mine) { return mine.get() == c; });
    });
    if (!ours && o->getOptionHiddenFlag() == cl::NotHidden)
      o->setHiddenFlag(cl::Hidden);
  }
}

void TrainingOptionsCL::recordCommandLine() {
  for (auto &[info, option] : options)
    if (option->getNumOccurrences() > 0)
      storage.origin[info->flag] = "command line";
}
