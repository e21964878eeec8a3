// RUN: ds-opt %s | ds-opt | FileCheck %s
// `ds.onebit_lamb` round-trips (docs/compression.md): 10 elements padded
// for 2 ranks to 16 (a multiple of 2 lcm(2, 8)), the server error 8, the
// two coefficients.

// CHECK-LABEL: func.func @step
// CHECK: ds.onebit_lamb %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{.*}}, coeff_beta = 9.000000e-01 : f64{{.*}}factor_max = 4.000000e+00 : f64{{.*}}freeze_step = 3 : i64
func.func @step(%p: tensor<10xf32>, %g: tensor<10xf32>, %m: tensor<10xf32>,
                %v: tensor<10xf32>, %vf: tensor<10xf32>, %we: tensor<16xf32>,
                %se: tensor<8xf32>, %c: tensor<2xf32>, %t: tensor<i64>)
    -> tensor<10xf32> {
  %0:7 = ds.onebit_lamb %p, %g, %m, %v, %vf, %we, %se, %c, %t {
      lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64,
      eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, freeze_step = 3,
      max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64,
      factor_max = 4.0 : f64, factor_min = 0.5 : f64,
      factor_threshold = 0.1 : f64}
    : (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>,
       tensor<10xf32>, tensor<16xf32>, tensor<8xf32>, tensor<2xf32>,
       tensor<i64>)
    -> (tensor<10xf32>, tensor<10xf32>, tensor<10xf32>, tensor<10xf32>,
        tensor<16xf32>, tensor<8xf32>, tensor<2xf32>)
  return %0#0 : tensor<10xf32>
}
