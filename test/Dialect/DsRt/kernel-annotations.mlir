// The annotations of a kernel call (ds.flops, ds.bytes, ds.phase) print
// after its signature and round-trip, in the custom and the generic form;
// a call without them prints none. Other discardable attributes stay in
// the leading dictionary.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @forward
func.func @forward() {
  %a = dsrt.alloc : memref<4xf32>
  %b = dsrt.alloc : memref<4xf32>
  // CHECK: dsrt.kernel "neg"(%{{.*}}) -> (%{{.*}}) {dsrt.host, inplace = array<i64: 0>, params = {}} : (memref<4xf32>) -> (memref<4xf32>) attributes {ds.bytes = 32 : i64, ds.flops = 4 : i64, ds.phase = "forward"}{{$}}
  dsrt.kernel "neg"(%a) -> (%b) {inplace = array<i64: 0>, params = {}, dsrt.host} : (memref<4xf32>) -> (memref<4xf32>) attributes {ds.phase = "forward", ds.flops = 4 : i64, ds.bytes = 32 : i64}
  // The annotations may also come in the leading dictionary.
  // CHECK: dsrt.kernel "all_reduce"(%{{.*}}) -> (%{{.*}}) {params = {group = 0 : i64}} : (memref<4xf32>) -> (memref<4xf32>) attributes {ds.bytes = 32 : i64, ds.flops = 4 : i64, ds.phase = "communication"}{{$}}
  dsrt.kernel "all_reduce"(%b) -> (%a) {params = {group = 0 : i64}, ds.phase = "communication", ds.flops = 4 : i64, ds.bytes = 32 : i64} : (memref<4xf32>) -> (memref<4xf32>)
  // CHECK: dsrt.kernel "pipe_mark"() -> () {params = {}} : () -> (){{$}}
  dsrt.kernel "pipe_mark"() -> () {params = {}} : () -> ()
  return
}
