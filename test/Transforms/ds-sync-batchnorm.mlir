// RUN: ds-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(ds-sync-batchnorm{size=2}))' | FileCheck %s
// RUN: ds-opt %s --pass-pipeline='builtin.module(func.func(ds-sync-batchnorm{size=1}))' | FileCheck %s --check-prefix=ONE
// The same through the pass flag (ds-opt --ds-sync-batchnorm=size=2).
// RUN: ds-opt %s --split-input-file --verify-diagnostics --ds-sync-batchnorm=size=2 | FileCheck %s

// The partial sum is summed over data-parallel group 0; the divisions by
// the count become divisions by the global count (2 * 4 = 8, and 2 * 4 - 1
// = 7 for the unbiased variance).
// CHECK-LABEL: func.func @forward
// CHECK: %[[S:.*]] = ds.reduce_sum %arg0 {axes = array<i64: 0>, ds.f32_island, keepdims = true}
// CHECK-NEXT: %[[G:.*]] = ds.all_reduce %[[S]] {ds.f32_island, group = 0 : i64, reduction = "sum"}
// CHECK: %[[N:.*]] = ds.constant dense<8.000000e+00>
// CHECK-NEXT: ds.div %[[G]], %[[N]] {ds.f32_island}
// CHECK: %[[N1:.*]] = ds.constant dense<7.000000e+00>
// CHECK-NEXT: ds.div %[[G]], %[[N1]] {ds.f32_island}
// ONE-LABEL: func.func @forward
// ONE-NOT: ds.all_reduce
func.func @forward(%x: tensor<4x3xf32>) -> (tensor<1x3xf32>, tensor<1x3xf32>) {
  %s = ds.reduce_sum %x {axes = array<i64: 0>, ds.batch_stat, ds.f32_island, keepdims = true} : tensor<4x3xf32> -> tensor<1x3xf32>
  %n = ds.constant dense<4.0> : tensor<f32>
  %m = ds.div %s, %n {ds.batch_count = 0 : i64, ds.f32_island} : (tensor<1x3xf32>, tensor<f32>) -> tensor<1x3xf32>
  %n1 = ds.constant dense<3.0> : tensor<f32>
  %v = ds.div %s, %n1 {ds.batch_count = 1 : i64, ds.f32_island} : (tensor<1x3xf32>, tensor<f32>) -> tensor<1x3xf32>
  return %m, %v : tensor<1x3xf32>, tensor<1x3xf32>
}

// -----

func.func @bad(%x: tensor<4x3xf32>, %n: tensor<f32>) -> tensor<1x3xf32> {
  %s = ds.reduce_sum %x {axes = array<i64: 0>, ds.batch_stat, keepdims = true} : tensor<4x3xf32> -> tensor<1x3xf32>
  // expected-error @+1 {{'ds.div' op a ds.batch_count division must divide by a float constant}}
  %m = ds.div %s, %n {ds.batch_count = 0 : i64} : (tensor<1x3xf32>, tensor<f32>) -> tensor<1x3xf32>
  return %m : tensor<1x3xf32>
}
