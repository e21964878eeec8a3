// 1-bit Adam's parameter exchange under ZeRO 1-3: ds.compressed_all_gather
// (this rank's updated 13-element chunk, the whole padded parameter of 3
// chunks before the update, the chunk's gather error) and
// ds.onebit_quantized_all_gather (two shards of 13 and 5 of a stage-3 bucket);
// the round trip.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @step
func.func @step(%p: tensor<13xf32>, %base: tensor<39xf32>, %e: tensor<13xf32>, %s: tensor<18xf32>, %t: tensor<i64>) -> (tensor<39xf32>, tensor<13xf32>, tensor<54xf32>) {
  // CHECK: ds.compressed_all_gather %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {freeze_step = 20 : i64, valid = 37 : i64} : (tensor<13xf32>, tensor<39xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<39xf32>, tensor<13xf32>)
  %w, %ne = ds.compressed_all_gather %p, %base, %e, %t {freeze_step = 20 : i64, valid = 37 : i64} : (tensor<13xf32>, tensor<39xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<39xf32>, tensor<13xf32>)
  // CHECK: ds.onebit_quantized_all_gather %{{.*}}, %{{.*}} {freeze_step = 20 : i64, pieces = array<i64: 13, 5>, valid = array<i64: 37, 15>} : (tensor<18xf32>, tensor<i64>) -> tensor<54xf32>
  %g = ds.onebit_quantized_all_gather %s, %t {freeze_step = 20 : i64, pieces = array<i64: 13, 5>, valid = array<i64: 37, 15>} : (tensor<18xf32>, tensor<i64>) -> tensor<54xf32>
  return %w, %ne, %g : tensor<39xf32>, tensor<13xf32>, tensor<54xf32>
}
