// Round trip of every dsrt op.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {dsrt.arena_bytes = 192 : i64}
func.func @forward() attributes {dsrt.arena_bytes = 192 : i64} {
  // CHECK: %[[I:.*]] = dsrt.input {index = 0 : i64, name = "x"} : memref<4x8xf32>
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<4x8xf32>
  // CHECK: %[[P:.*]] = dsrt.param {index = 0 : i64, name = "w", trainable} : memref<8x4xf32>
  %w = dsrt.param {index = 0 : i64, name = "w", trainable} : memref<8x4xf32>
  // CHECK: dsrt.const dense<1.000000e+00> : tensor<4xf32> : memref<4xf32>
  %c = dsrt.const dense<1.0> : tensor<4xf32> : memref<4xf32>
  // CHECK: %[[A:.*]] = dsrt.alloc {offset = 0 : i64} : memref<4x4xf32>
  %a = dsrt.alloc {offset = 0 : i64} : memref<4x4xf32>
  // CHECK: dsrt.kernel "matmul"(%[[I]], %[[P]]) -> (%[[A]]) {params = {}} : (memref<4x8xf32>, memref<8x4xf32>) -> (memref<4x4xf32>)
  dsrt.kernel "matmul"(%x, %w) -> (%a) {params = {}} : (memref<4x8xf32>, memref<8x4xf32>) -> (memref<4x4xf32>)
  // CHECK: dsrt.alloc : memref<4x4xf32>
  %b = dsrt.alloc : memref<4x4xf32>
  // CHECK: dsrt.kernel "add"(%[[A]], %{{.*}}) -> (%{{.*}}) {inplace = array<i64: 0>, params = {}}
  dsrt.kernel "add"(%a, %c) -> (%b) {inplace = array<i64: 0>, params = {}} : (memref<4x4xf32>, memref<4xf32>) -> (memref<4x4xf32>)
  // CHECK: dsrt.view %{{.*}} : memref<4x4xf32> -> memref<16xf32>
  %v = dsrt.view %b : memref<4x4xf32> -> memref<16xf32>
  %d = dsrt.alloc {offset = 128 : i64} : memref<16xf32>
  // CHECK: dsrt.copy %{{.*}}, %{{.*}} : memref<16xf32>, memref<16xf32>
  dsrt.copy %v, %d : memref<16xf32>, memref<16xf32>
  // A ZeRO shard and a collective kernel.
  // CHECK: dsrt.param {full_shape = array<i64: 3, 5>, index = 1 : i64, name = "u", trainable} : memref<8xf32>
  %u = dsrt.param {index = 1 : i64, name = "u", trainable, full_shape = array<i64: 3, 5>} : memref<8xf32>
  %e = dsrt.alloc : memref<16xf32>
  // CHECK: dsrt.kernel "all_gather"
  dsrt.kernel "all_gather"(%u) -> (%e) {params = {group = 0 : i64}} : (memref<8xf32>) -> (memref<16xf32>)
  // CHECK: dsrt.record_event {event = 1 : i64, stream = "comm"}
  dsrt.record_event {event = 1 : i64, stream = "comm"}
  // CHECK: dsrt.wait_event {event = 1 : i64, stream = "compute"}
  dsrt.wait_event {event = 1 : i64, stream = "compute"}
  // CHECK: dsrt.output %{{.*}} {index = 0 : i64, name = "y"} : memref<16xf32>
  dsrt.output %d {index = 0 : i64, name = "y"} : memref<16xf32>
  return
}
