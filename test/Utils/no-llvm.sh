#!/usr/bin/env bash
# Fails if the binary $1 links LLVM or MLIR (shared libraries or symbols).
# The symbol table must show ds's runtime symbols, so that an empty or
# unreadable symbol table cannot pass.
bin="$1"
syms=$(nm -C "$bin" 2>/dev/null) || { echo "no-llvm: cannot read symbols of $bin"; exit 1; }
echo "$syms" | grep -q 'ds::rt::' || { echo "no-llvm: $bin has no ds::rt symbols"; exit 1; }
hits=$( { ldd "$bin"; echo "$syms"; } | grep -E 'libLLVM|libMLIR|mlir::|llvm::' | head -3)
if [ -n "$hits" ]; then
  echo "no-llvm: $bin links LLVM/MLIR:"; echo "$hits"; exit 1
fi
echo "$(basename "$bin") links no LLVM or MLIR"
