// Collectives read later become async with a wait before the first reader;
// one read at once stays synchronous.
// RUN: ds-opt %s --dsrt-overlap-comm | FileCheck %s
// RUN: ds-opt %s --dsrt-overlap-comm --dsrt-plan-memory | FileCheck %s --check-prefix=PLAN

// CHECK-LABEL: func.func @forward
// CHECK: dsrt.kernel "reduce_scatter"(%[[G:.*]]) -> (%[[S:.*]]) {params = {async = 1 : i64, group = 0 : i64, reduction = "mean"}}
// CHECK: dsrt.kernel "mul"
// CHECK: dsrt.kernel "mul"
// CHECK-NEXT: dsrt.view %[[S]]
// CHECK-NEXT: dsrt.alloc
// CHECK-NEXT: dsrt.kernel "wait"(%[[G]], %[[S]]) -> () {params = {}}
// CHECK-NEXT: dsrt.kernel "all_gather"(%{{.*}}) -> (%{{.*}}) {params = {group = 0 : i64}}
// CHECK-NOT: "wait"
// CHECK: return

// The buffers the collective touches stay reserved until the wait: the two
// products in between take other offsets than the 64-byte gradient (0) and
// its 32-byte shard (64).
// PLAN: %[[G:.*]] = dsrt.alloc {offset = 0 : i64} : memref<16xf32>
// PLAN: %[[S:.*]] = dsrt.alloc {offset = 64 : i64} : memref<8xf32>
// PLAN: dsrt.alloc {offset = 128 : i64} : memref<16xf32>
// PLAN: dsrt.alloc {offset = 192 : i64} : memref<16xf32>
func.func @forward() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<16xf32>
  %g = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%x, %x) -> (%g) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %s = dsrt.alloc : memref<8xf32>
  dsrt.kernel "reduce_scatter"(%g) -> (%s) {params = {group = 0 : i64, reduction = "mean"}} : (memref<16xf32>) -> (memref<8xf32>)
  %a = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%x, %x) -> (%a) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %b = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%a, %a) -> (%b) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %v = dsrt.view %s : memref<8xf32> -> memref<2x4xf32>
  %w = dsrt.alloc : memref<16xf32>
  dsrt.kernel "all_gather"(%v) -> (%w) {params = {group = 0 : i64}} : (memref<2x4xf32>) -> (memref<16xf32>)
  dsrt.output %w {index = 0 : i64, name = "w"} : memref<16xf32>
  dsrt.output %b {index = 1 : i64, name = "b"} : memref<16xf32>
  return
}
