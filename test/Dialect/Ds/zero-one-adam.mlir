// RUN: ds-opt %s | ds-opt | FileCheck %s
// `ds.zero_one_adam` round-trips (docs/compression.md): 10 elements padded
// for 2 ranks to 16 (a multiple of 2 lcm(2, 8)), the server error 8.

// CHECK-LABEL: func.func @step
// CHECK: ds.zero_one_adam %{{.*}} {beta1 = 9.000000e-01 : f64{{.*}}local_step_clipper = 16 : i64{{.*}}var_freeze_step = 3 : i64
func.func @step(%p: tensor<10xf32>, %g: tensor<10xf32>, %m: tensor<10xf32>,
                %v: tensor<10xf32>, %we: tensor<16xf32>, %se: tensor<8xf32>,
                %u: tensor<10xf32>, %c: tensor<5xi64>, %t: tensor<i64>)
    -> tensor<10xf32> {
  %0:7 = ds.zero_one_adam %p, %g, %m, %v, %we, %se, %u, %c, %t {
      lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64,
      eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, var_freeze_step = 3,
      var_update_scaler = 16, local_step_scaler = 32678,
      local_step_clipper = 16}
    : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>,
       tensor<16xf32>, tensor<8xf32>, tensor<10xf32>, tensor<5xi64>,
       tensor<i64>)
    -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<16xf32>,
        tensor<8xf32>, tensor<10xf32>, tensor<5xi64>)
  return %0#0 : tensor<10xf32>
}
