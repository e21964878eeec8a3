// 1-bit Adam under ZeRO 1-3: ds.compressed_reduce_scatter (a bucket of 3
// chunks of 13 elements, its worker error the bucket's length) and
// ds.onebit_adam_local on this rank's 13-element partition; the round trip.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @step
func.func @step(%b: tensor<39xf32>, %we: tensor<39xf32>, %p: tensor<13xf32>, %m: tensor<13xf32>, %v: tensor<13xf32>, %t: tensor<i64>) -> (tensor<13xf32>, tensor<39xf32>) {
  // CHECK: ds.compressed_reduce_scatter %{{.*}}, %{{.*}}, %{{.*}} {freeze_step = 20 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<39xf32>)
  %g, %nwe = ds.compressed_reduce_scatter %b, %we, %t {freeze_step = 20 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<39xf32>)
  // CHECK: ds.onebit_adam_local %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1 = 9.000000e-01 : f64, {{.*}}freeze_step = 20 : i64{{.*}}} : (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>)
  %np, %nm, %nv = ds.onebit_adam_local %p, %g, %m, %v, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 20 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>)
  return %np, %nwe : tensor<13xf32>, tensor<39xf32>
}

// The momentum form (1-bit Adam): this rank's momentum, the bucket's
// length, exchanged after the freeze; the update takes it as m.
// CHECK-LABEL: func.func @momentum
func.func @momentum(%b: tensor<39xf32>, %we: tensor<39xf32>, %mom: tensor<39xf32>, %p: tensor<13xf32>, %m: tensor<13xf32>, %v: tensor<13xf32>, %t: tensor<i64>) -> (tensor<13xf32>, tensor<39xf32>, tensor<39xf32>) {
  // CHECK: ds.compressed_reduce_scatter %{{.*}}, %{{.*}}, %{{.*}} momentum %{{.*}} {beta1 = 9.000000e-01 : f64, freeze_step = 20 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>, tensor<39xf32>) -> (tensor<13xf32>, tensor<39xf32>, tensor<39xf32>)
  %g, %nwe, %nmom = ds.compressed_reduce_scatter %b, %we, %t momentum %mom {beta1 = 0.9 : f64, freeze_step = 20 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>, tensor<39xf32>) -> (tensor<13xf32>, tensor<39xf32>, tensor<39xf32>)
  // CHECK: ds.onebit_adam_local {{.*}}momentum_exchange = true
  %np, %nm, %nv = ds.onebit_adam_local %p, %g, %m, %v, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 20 : i64, lr = 1.0e-3 : f64, momentum_exchange = true, weight_decay = 0.0 : f64} : (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<13xf32>, tensor<13xf32>)
  return %np, %nwe, %nmom : tensor<13xf32>, tensor<39xf32>, tensor<39xf32>
}
