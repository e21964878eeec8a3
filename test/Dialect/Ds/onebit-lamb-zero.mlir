// RUN: ds-opt %s | ds-opt | FileCheck %s
// `ds.onebit_lamb_local` round-trips (docs/compression.md): 1-bit LAMB's
// update of this rank's 4-element partition of a 10-element tensor over 3
// ranks (valid = 10), with the two coefficients.

// CHECK-LABEL: func.func @step
// CHECK: ds.onebit_lamb_local %{{.*}} {{.*}}factor_max = 4.000000e+00 : f64{{.*}}freeze_step = 3 : i64{{.*}}valid = 10 : i64
func.func @step(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>,
                %v: tensor<4xf32>, %vf: tensor<4xf32>, %c: tensor<2xf32>,
                %t: tensor<i64>) -> tensor<4xf32> {
  %0:5 = ds.onebit_lamb_local %p, %g, %m, %v, %vf, %c, %t {
      lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64,
      eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, freeze_step = 3,
      max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64,
      factor_max = 4.0 : f64, factor_min = 0.5 : f64,
      factor_threshold = 0.1 : f64, valid = 10}
    : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
       tensor<4xf32>, tensor<2xf32>, tensor<i64>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
        tensor<2xf32>)
  return %0#0 : tensor<4xf32>
}
