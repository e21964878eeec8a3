// ds.onebit_adam: the round trip. A 10x10 parameter over 3 ranks: the
// worker error pads 100 elements to 144 (a multiple of 3 lcm(3, 8) = 72),
// the server error is its third.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @step
func.func @step(%p: tensor<10x10xf32>, %g: tensor<10x10xf32>, %m: tensor<10x10xf32>, %v: tensor<10x10xf32>, %we: tensor<144xf32>, %se: tensor<48xf32>, %t: tensor<i64>) -> (tensor<10x10xf32>, tensor<144xf32>) {
  // CHECK: ds.onebit_adam %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}} : f64, eps = 1.000000e-08 : f64, freeze_step = 10 : i64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : (tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<144xf32>, tensor<48xf32>, tensor<i64>) -> (tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<144xf32>, tensor<48xf32>)
  %np, %nm, %nv, %nwe, %nse = ds.onebit_adam %p, %g, %m, %v, %we, %se, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 10 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<144xf32>, tensor<48xf32>, tensor<i64>) -> (tensor<10x10xf32>, tensor<10x10xf32>, tensor<10x10xf32>, tensor<144xf32>, tensor<48xf32>)
  return %np, %nwe : tensor<10x10xf32>, tensor<144xf32>
}
