// The memory plan: offsets from liveness (the smallest arena of first fit in
// program order and greedy by size or lifetime with best fit), 64-byte
// aligned offsets, in-place reuse by elementwise kernels, views extending
// lifetimes, outputs live to the end. The arena's size is the end of its
// highest buffer (what ds-run measures).
// RUN: ds-opt %s --dsrt-plan-memory -split-input-file | FileCheck %s

// A chain a -> b -> c -> d of 256-byte buffers: b cannot take a's place
// (softmax is not in place), c takes a's place once a is dead, and d takes
// c's place in place (exp reads each element before writing it).
// CHECK-LABEL: func.func @chain
// CHECK-SAME: dsrt.arena_bytes = 512
// CHECK: %[[A:.*]] = dsrt.alloc {offset = 0 : i64}
// CHECK: %[[B:.*]] = dsrt.alloc {offset = 256 : i64}
// CHECK: %[[C:.*]] = dsrt.alloc {offset = 0 : i64}
// CHECK: %[[D:.*]] = dsrt.alloc {offset = 0 : i64}
func.func @chain() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<64xf32>
  %a = dsrt.alloc : memref<64xf32>
  dsrt.kernel "relu"(%x) -> (%a) {params = {}} : (memref<64xf32>) -> (memref<64xf32>)
  %b = dsrt.alloc : memref<64xf32>
  dsrt.kernel "softmax"(%a) -> (%b) {params = {axis = 0 : i64}} : (memref<64xf32>) -> (memref<64xf32>)
  %c = dsrt.alloc : memref<64xf32>
  dsrt.kernel "softmax"(%b) -> (%c) {params = {axis = 0 : i64}} : (memref<64xf32>) -> (memref<64xf32>)
  %d = dsrt.alloc : memref<64xf32>
  dsrt.kernel "exp"(%c) -> (%d) {inplace = array<i64: 0>, params = {}} : (memref<64xf32>) -> (memref<64xf32>)
  dsrt.output %d {index = 0 : i64, name = "y"} : memref<64xf32>
  return
}

// -----

// In place: the relu output takes the dying input's 64 bytes.
// CHECK-LABEL: func.func @inplace
// CHECK-SAME: dsrt.arena_bytes = 64
// CHECK: dsrt.alloc {offset = 0 : i64}
// CHECK: dsrt.alloc {offset = 0 : i64}
func.func @inplace() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<16xf32>
  %a = dsrt.alloc : memref<16xf32>
  dsrt.kernel "exp"(%x) -> (%a) {params = {}} : (memref<16xf32>) -> (memref<16xf32>)
  %b = dsrt.alloc : memref<16xf32>
  dsrt.kernel "relu"(%a) -> (%b) {inplace = array<i64: 0>, params = {}} : (memref<16xf32>) -> (memref<16xf32>)
  dsrt.output %b {index = 0 : i64, name = "y"} : memref<16xf32>
  return
}

// -----

// A view keeps its source alive: %a is read through %v by the last kernel,
// so %b (written while %a lives) cannot reuse %a's bytes; buffers are
// 64-byte aligned (an 8-byte buffer takes 64; the last one ends at 136).
// CHECK-LABEL: func.func @view_lifetime
// CHECK-SAME: dsrt.arena_bytes = 136
// CHECK: %[[A:.*]] = dsrt.alloc {offset = 0 : i64} : memref<2xf32>
// CHECK: dsrt.alloc {offset = 64 : i64} : memref<2xf32>
// CHECK: dsrt.alloc {offset = 128 : i64} : memref<2xf32>
func.func @view_lifetime() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<2xf32>
  %a = dsrt.alloc : memref<2xf32>
  dsrt.kernel "exp"(%x) -> (%a) {params = {}} : (memref<2xf32>) -> (memref<2xf32>)
  %v = dsrt.view %a : memref<2xf32> -> memref<1x2xf32>
  %b = dsrt.alloc : memref<2xf32>
  dsrt.kernel "exp"(%x) -> (%b) {params = {}} : (memref<2xf32>) -> (memref<2xf32>)
  %c = dsrt.alloc : memref<2xf32>
  dsrt.kernel "add"(%v, %b) -> (%c) {params = {}} : (memref<1x2xf32>, memref<2xf32>) -> (memref<2xf32>)
  dsrt.output %c {index = 0 : i64, name = "y"} : memref<2xf32>
  return
}

// -----

// Outputs live to the end: the second kernel's buffer cannot reuse the
// first one's bytes although no kernel reads it again.
// CHECK-LABEL: func.func @outputs_live
// CHECK-SAME: dsrt.arena_bytes = 80
// CHECK: dsrt.alloc {offset = 0 : i64}
// CHECK: dsrt.alloc {offset = 64 : i64}
func.func @outputs_live() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<4xf32>
  %a = dsrt.alloc : memref<4xf32>
  dsrt.kernel "exp"(%x) -> (%a) {params = {}} : (memref<4xf32>) -> (memref<4xf32>)
  %b = dsrt.alloc : memref<4xf32>
  dsrt.kernel "exp"(%x) -> (%b) {params = {}} : (memref<4xf32>) -> (memref<4xf32>)
  dsrt.output %a {index = 0 : i64, name = "y0"} : memref<4xf32>
  dsrt.output %b {index = 1 : i64, name = "y1"} : memref<4xf32>
  return
}

// -----

// No in-place when another input reads the same storage through a view of
// another shape (a broadcast operand): the planner stays conservative and
// gives %out its own bytes.
// CHECK-LABEL: func.func @no_inplace_over_view
// CHECK: dsrt.alloc {offset = 0 : i64} : memref<1x16xf32>
// CHECK: dsrt.alloc {offset = 64 : i64} : memref<1x16xf32>
func.func @no_inplace_over_view() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<1x16xf32>
  %a = dsrt.alloc : memref<1x16xf32>
  dsrt.kernel "exp"(%x) -> (%a) {params = {}} : (memref<1x16xf32>) -> (memref<1x16xf32>)
  %v = dsrt.view %a : memref<1x16xf32> -> memref<16xf32>
  %out = dsrt.alloc : memref<1x16xf32>
  dsrt.kernel "add"(%a, %v) -> (%out) {inplace = array<i64: 0>, params = {}} : (memref<1x16xf32>, memref<16xf32>) -> (memref<1x16xf32>)
  dsrt.output %out {index = 0 : i64, name = "y"} : memref<1x16xf32>
  return
}

// -----

// Best fit beats first fit in program order: %a (64 bytes, dies at the
// concat) leaves a hole too small for %c (128 bytes), which first fit would
// put above %b (320 bytes in all). Greedy by size places %c, then %b beside
// it, then %a under %b where %c is not yet live: the arena equals the most
// bytes live at once (%b and %c, 256).
// CHECK-LABEL: func.func @best_fit
// CHECK-SAME: dsrt.arena_bytes = 256
// CHECK: dsrt.alloc {offset = 0 : i64} : memref<16xf32>
// CHECK: dsrt.alloc {offset = 128 : i64} : memref<32xf32>
// CHECK: dsrt.alloc {offset = 0 : i64} : memref<32xf32>
func.func @best_fit() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<16xf32>
  %a = dsrt.alloc : memref<16xf32>
  dsrt.kernel "exp"(%x) -> (%a) {params = {}} : (memref<16xf32>) -> (memref<16xf32>)
  %b = dsrt.alloc : memref<32xf32>
  dsrt.kernel "concat"(%x, %a) -> (%b) {params = {axis = 0 : i64}} : (memref<16xf32>, memref<16xf32>) -> (memref<32xf32>)
  %c = dsrt.alloc : memref<32xf32>
  dsrt.kernel "add"(%b, %b) -> (%c) {params = {}} : (memref<32xf32>, memref<32xf32>) -> (memref<32xf32>)
  dsrt.output %c {index = 0 : i64, name = "y"} : memref<32xf32>
  return
}
