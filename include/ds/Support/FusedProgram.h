//===- FusedProgram.h - the program of ds.fused_elementwise -----*- C++ -*-===//
//
// Part of the ds project (no MLIR or LLVM).
//
// `--ds-fuse-elementwise` replaces a chain of f32 elementwise ops by one
// `ds.fused_elementwise` op (kernel `fused_elementwise`) whose `program`
// attribute lists the chain's operations. The compiler's verifier and the
// kernels read the program through this header, so they agree on it.
//
// Encoding: four integers per instruction, `opcode, a, b, c`. An operand
// reference r >= 0 names a register: registers 0..N-1 are the N inputs,
// register N+k is instruction k's result; r < 0 names the constant
// `constants[-r-1]` (an f32 value). Unused operand fields are 0. The result
// is the last instruction's register. Each instruction computes in f32 what
// the unfused kernel of its op computes (the same expression), so a fused
// chain is bit-identical to the chain of kernels on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef DS_SUPPORT_FUSEDPROGRAM_H
#define DS_SUPPORT_FUSEDPROGRAM_H

#include <cstdint>
#include <string>
#include <vector>

namespace ds {

/// The operations of a fused program; the value is the opcode.
enum class FusedOp : int64_t {
  Add = 1,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Erf,
  Tanh,
  Relu,
  Sigmoid,
  Where, ///< a (a condition input, i1) ? b : c
};

constexpr int64_t kFusedOpFirst = 1;
constexpr int64_t kFusedOpLast = static_cast<int64_t>(FusedOp::Where);

/// Operands an opcode reads (1, 2 or 3).
inline int fusedArity(FusedOp op) {
  switch (op) {
  case FusedOp::Add: case FusedOp::Sub: case FusedOp::Mul: case FusedOp::Div:
  case FusedOp::Pow: case FusedOp::Max: case FusedOp::Min:
    return 2;
  case FusedOp::Where:
    return 3;
  default:
    return 1;
  }
}

/// The ds op name of an opcode (the kernel an instruction stands for).
inline const char *fusedOpName(FusedOp op) {
  static const char *const names[] = {
      "",     "add",  "sub",  "mul",        "div", "pow",  "max",
      "min",  "neg",  "abs",  "exp",        "log", "sqrt", "reciprocal",
      "erf",  "tanh", "relu", "sigmoid",    "where"};
  int64_t i = static_cast<int64_t>(op);
  return i >= kFusedOpFirst && i <= kFusedOpLast ? names[i] : "?";
}

/// Checks `program` over `numInputs` inputs (`boolInput[i]`: input i is an
/// i1 mask) and `numConstants` constants. Returns "" or what is wrong.
/// Masks are read only as where's condition, and a condition is a mask.
inline std::string checkFusedProgram(const std::vector<int64_t> &program,
                                     const std::vector<bool> &boolInput,
                                     int64_t numConstants) {
  int64_t n = static_cast<int64_t>(boolInput.size());
  if (program.empty() || program.size() % 4 != 0)
    return "program of " + std::to_string(program.size()) +
           " integers is not a non-empty list of 4-integer instructions";
  for (size_t k = 0; k < program.size() / 4; ++k) {
    const int64_t *ins = &program[4 * k];
    std::string at = "instruction " + std::to_string(k) + ": ";
    if (ins[0] < kFusedOpFirst || ins[0] > kFusedOpLast)
      return at + "unknown opcode " + std::to_string(ins[0]);
    FusedOp op = static_cast<FusedOp>(ins[0]);
    int arity = fusedArity(op);
    for (int j = 0; j < 3; ++j) {
      int64_t r = ins[1 + j];
      if (j >= arity) {
        if (r != 0)
          return at + "unused operand " + std::to_string(j) + " is not 0";
        continue;
      }
      bool cond = op == FusedOp::Where && j == 0;
      if (r < 0) {
        if (-r - 1 >= numConstants)
          return at + "constant " + std::to_string(-r - 1) + " out of range";
        if (cond)
          return at + "where's condition is a constant";
        continue;
      }
      if (r >= n + static_cast<int64_t>(k))
        return at + "register " + std::to_string(r) + " is not defined yet";
      bool mask = r < n && boolInput[r];
      if (cond != mask)
        return at + (cond ? "where's condition is not an i1 input"
                          : "an i1 input is read as a number");
    }
  }
  return "";
}

} // namespace ds

#endif // DS_SUPPORT_FUSEDPROGRAM_H
