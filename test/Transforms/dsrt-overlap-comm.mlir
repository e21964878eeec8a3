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

// Two reduce-scatters in a row: with max-in-flight=1 the second starts only
// after the first's wait; with the default 2 both run while the muls do.
// RUN: ds-opt %s --dsrt-overlap-comm='max-in-flight=1' | FileCheck %s --check-prefix=ONE
// RUN: ds-opt %s --dsrt-overlap-comm | FileCheck %s --check-prefix=TWO
// ONE-LABEL: func.func @two
// ONE: dsrt.kernel "reduce_scatter"(%[[A:.*]]) -> (%[[SA:.*]]) {params = {async = 1
// ONE: dsrt.kernel "mul"
// ONE: dsrt.kernel "wait"(%[[A]], %[[SA]])
// ONE-NEXT: dsrt.kernel "reduce_scatter"(%[[B:.*]]) -> (%[[SB:.*]]) {params = {async = 1
// ONE: dsrt.kernel "mul"
// ONE: dsrt.kernel "wait"(%[[B]], %[[SB]])
// TWO-LABEL: func.func @two
// TWO: dsrt.kernel "reduce_scatter"(%[[A:.*]]) -> (%[[SA:.*]]) {params = {async = 1
// TWO-NOT: "wait"
// TWO: dsrt.kernel "reduce_scatter"(%[[B:.*]]) -> (%[[SB:.*]]) {params = {async = 1
// TWO: dsrt.kernel "mul"
// TWO: dsrt.kernel "wait"(%[[A]], %[[SA]])
// TWO-NEXT: dsrt.kernel "wait"(%[[B]], %[[SB]])
func.func @two() {
  %x = dsrt.input {index = 0 : i64, name = "x"} : memref<16xf32>
  %a = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%x, %x) -> (%a) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %sa = dsrt.alloc : memref<8xf32>
  dsrt.kernel "reduce_scatter"(%a) -> (%sa) {params = {group = 0 : i64, reduction = "mean"}} : (memref<16xf32>) -> (memref<8xf32>)
  %b = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%x, %x) -> (%b) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %sb = dsrt.alloc : memref<8xf32>
  dsrt.kernel "reduce_scatter"(%b) -> (%sb) {params = {group = 0 : i64, reduction = "mean"}} : (memref<16xf32>) -> (memref<8xf32>)
  %c = dsrt.alloc : memref<16xf32>
  dsrt.kernel "mul"(%x, %x) -> (%c) {params = {}} : (memref<16xf32>, memref<16xf32>) -> (memref<16xf32>)
  %d = dsrt.alloc : memref<8xf32>
  dsrt.kernel "add"(%sa, %sb) -> (%d) {params = {}} : (memref<8xf32>, memref<8xf32>) -> (memref<8xf32>)
  dsrt.output %d {index = 0 : i64, name = "d"} : memref<8xf32>
  dsrt.output %c {index = 1 : i64, name = "c"} : memref<16xf32>
  return
}
