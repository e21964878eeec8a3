//===- ConfigReader.cpp - reading a ds_config.json's values ---------------===//
//
// Part of the ds project.
//
// The value readers every section uses, the key checks with their "did
// you mean" suggestions, the keys ds accepts without a counterpart, and
// the HJSON leniencies DeepSpeed's reader has (comments, trailing commas).
//
//===----------------------------------------------------------------------===//

#include "ConfigReader.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::ds;
using namespace mlir::ds::config;

std::string config::fmt(double v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%.17g", v);
  return s;
}

const OptionInfo *config::findOptionByKey(llvm::StringRef configKey) {
  for (const OptionInfo &o : trainingOptionTable())
    if (o.configKey == configKey)
      return &o;
  return nullptr;
}

std::string config::closeKey(llvm::StringRef key,
                             const std::vector<std::string> &valid) {
  // Names people write for DeepSpeed's (torch's spellings and the like).
  static const std::map<std::string, std::string> synonyms = {
      {"learning_rate", "lr"},
      {"epsilon", "eps"},
      {"beta1", "betas"},
      {"beta2", "betas"},
      {"micro_batch_size", "train_micro_batch_size_per_gpu"},
      {"batch_size", "train_batch_size"},
      {"grad_accum", "gradient_accumulation_steps"},
      {"zero", "zero_optimization"},
      {"max_grad_norm", "gradient_clipping"},
      {"clip_grad", "gradient_clipping"},
  };
  if (auto it = synonyms.find(key.lower()); it != synonyms.end())
    if (std::find(valid.begin(), valid.end(), it->second) != valid.end())
      return it->second;
  std::string best;
  unsigned bestDist = ~0u;
  for (const std::string &v : valid) {
    unsigned d = key.edit_distance(v, /*AllowReplacements=*/true, 16);
    if (d < bestDist) {
      bestDist = d;
      best = v;
    }
  }
  // A typo: a few edits, relative to the shorter name (a key that only
  // shares a prefix with a long one is not a typo of it).
  size_t shorter = std::min(key.size(), best.size());
  unsigned limit = std::max<unsigned>(2, static_cast<unsigned>(shorter) / 3);
  if (bestDist <= limit)
    return best;
  // A truncation or an extension: one name contains the other.
  for (const std::string &v : valid)
    if (v.size() >= 4 && key.size() >= 4 &&
        (llvm::StringRef(v).starts_with(key) || key.starts_with(v)))
      return v;
  return "";
}

bool config::isAuto(const Value &v) {
  auto s = v.getAsString();
  return s && s->equals_insensitive("auto");
}

bool config::isOff(const Value &v) {
  if (v.getAsNull())
    return true;
  if (auto b = v.getAsBoolean())
    return !*b;
  if (auto d = v.getAsNumber())
    return *d == 0;
  if (auto s = v.getAsString())
    return s->equals_insensitive("none") || s->equals_insensitive("false");
  if (const Object *o = v.getAsObject()) {
    const Value *e = o->get("enabled");
    return !e || isOff(*e);
  }
  return false;
}

bool Reader::handleKnown(const std::string &path, const KnownKey &k,
                         const Value &v) {
  switch (k.kind) {
  case KnownKey::NoOp:
    if (!isOff(v))
      note(path, "accepted without effect: " + k.reason);
    return true;
  case KnownKey::OffOnly:
    if (isOff(v))
      return true;
    return fail(path, "is not supported yet (" + k.reason + ")");
  case KnownKey::Refused:
    return fail(path, "is not supported yet (" + k.reason + ")");
  }
  return false;
}

bool Reader::checkKeys(const Object &obj, const std::string &where,
                       const std::vector<std::string> &valid,
                       const std::map<std::string, KnownKey> &known) {
  // Sorted: llvm::json::Object is a hash map, and messages come in a
  // stable order.
  std::vector<std::string> keys;
  for (const auto &kv : obj)
    keys.push_back(kv.first.str());
  std::sort(keys.begin(), keys.end());
  bool ok = true;
  for (const std::string &key : keys) {
    if (std::find(valid.begin(), valid.end(), key) != valid.end())
      continue;
    std::string path = where.empty() ? key : where + "." + key;
    if (auto it = known.find(key); it != known.end()) {
      ok &= handleKnown(path, it->second, *obj.get(key));
      continue;
    }
    std::vector<std::string> all = valid;
    for (const auto &[name, info] : known)
      all.push_back(name);
    std::string near = closeKey(key, all);
    ok = false;
    if (near.empty())
      fail(path, "unknown key (docs/config.md lists the keys ds reads)");
    else
      fail(path, "unknown key; did you mean '" +
                     (where.empty() ? "" : where + ".") + near + "'?");
  }
  return ok;
}

std::optional<double> Reader::number(const Value &v, const std::string &key) {
  if (auto d = v.getAsNumber())
    return *d;
  if (auto s = v.getAsString()) { // DeepSpeed accepts "5e8" strings too
    double d;
    if (!llvm::StringRef(*s).getAsDouble(d))
      return d;
  }
  fail(key, "expects a number");
  return std::nullopt;
}

std::optional<int64_t> Reader::integer(const Value &v,
                                       const std::string &key) {
  std::optional<double> d = number(v, key);
  if (!d)
    return std::nullopt;
  if (*d != std::floor(*d) || *d < 0 || *d > 9e18) {
    fail(key, "expects a non-negative whole number");
    return std::nullopt;
  }
  return static_cast<int64_t>(*d);
}

std::optional<bool> Reader::boolean(const Value &v, const std::string &key) {
  if (auto b = v.getAsBoolean())
    return *b;
  fail(key, "expects true or false");
  return std::nullopt;
}

std::optional<std::string> Reader::string(const Value &v,
                                          const std::string &key) {
  if (auto s = v.getAsString())
    return s->str();
  fail(key, "expects a string");
  return std::nullopt;
}

const Object *Reader::object(const Value &v, const std::string &key) {
  if (const Object *o = v.getAsObject())
    return o;
  fail(key, "expects an object");
  return nullptr;
}

std::optional<std::string> Reader::typedSection(const Value &v,
                                               const std::string &key,
                                               const Object *&o) {
  o = object(v, key);
  if (!o || !checkKeys(*o, key, {"type", "params"}))
    return std::nullopt;
  const Value *typeV = o->get("type");
  if (!typeV) {
    fail(key, "needs a 'type'");
    return std::nullopt;
  }
  return string(*typeV, key + ".type");
}

bool Reader::plain(const Value &v, llvm::StringRef configKey,
                   const std::string &path) {
  const OptionInfo *info = findOptionByKey(configKey);
  if (!info)
    return fail(path, "has no option");
  // "auto" stands for a number or a switch HF's Trainer fills in; a string
  // option (ds.recompute, ds.offload) may take "auto" as its own value.
  bool stringOption =
      std::holds_alternative<std::string TrainingOptions::*>(info->field);
  if (isAuto(v) && !stringOption) {
    autoValue(path, "--" + info->flag.str() + " (command line, else " +
                        (info->defaultText.empty()
                             ? std::string("its default")
                             : "its default " + info->defaultText.str()) +
                        ")");
    return true;
  }
  std::optional<std::string> text = std::visit(
      [&](auto member) -> std::optional<std::string> {
        using T = std::decay_t<decltype(TrainingOptions().*member)>;
        if constexpr (std::is_same_v<T, double>) {
          auto d = number(v, path);
          return d ? std::optional<std::string>(fmt(*d)) : std::nullopt;
        } else if constexpr (std::is_same_v<T, bool>) {
          auto b = boolean(v, path);
          return b ? std::optional<std::string>(*b ? "true" : "false")
                   : std::nullopt;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return string(v, path);
        } else {
          auto n = integer(v, path);
          return n ? std::optional<std::string>(std::to_string(*n))
                   : std::nullopt;
        }
      },
      info->field);
  if (text)
    set(info->flag.str(), *text, path);
  return text.has_value();
}

std::string config::stripHjson(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0, n = text.size();
  while (i < n) {
    char c = text[i];
    if (c == '"') { // a string, escapes included, as it is
      size_t j = i + 1;
      while (j < n && text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, n);
      out.append(text.data() + i, j - i);
      i = j;
    } else if (c == '#' || (c == '/' && i + 1 < n && text[i + 1] == '/')) {
      while (i < n && text[i] != '\n')
        ++i; // the line's end stays (error positions keep their lines)
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      end = end == llvm::StringRef::npos ? n : end + 2;
      for (size_t k = i; k < end; ++k)
        if (text[k] == '\n')
          out.push_back('\n');
      i = end;
    } else if (c == ',') {
      // A trailing comma: only blanks and comments before '}' or ']'.
      size_t j = i + 1;
      while (j < n) {
        if (std::isspace(static_cast<unsigned char>(text[j]))) {
          ++j;
        } else if (text[j] == '#' ||
                   (text[j] == '/' && j + 1 < n && text[j + 1] == '/')) {
          while (j < n && text[j] != '\n')
            ++j;
        } else if (text[j] == '/' && j + 1 < n && text[j + 1] == '*') {
          size_t end = text.find("*/", j + 2);
          j = end == llvm::StringRef::npos ? n : end + 2;
        } else {
          break;
        }
      }
      if (!(j < n && (text[j] == '}' || text[j] == ']')))
        out.push_back(',');
      ++i;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}
