// The verifier rules of ds.onebit_adam.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @bad_padding(%p: tensor<100xf32>, %we: tensor<100xf32>, %se: tensor<50xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{worker error of 100 elements and server error of 50 are not the padding of 100 elements over any world size}}
  %a, %b, %c, %d, %e = ds.onebit_adam %p, %p, %p, %p, %we, %se, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 10 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>)
  return
}

// -----

func.func @negative_freeze(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'freeze_step' failed to satisfy constraint}}
  %a, %b, %c, %d, %e = ds.onebit_adam %p, %p, %p, %p, %we, %se, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = -1 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>)
  return
}

// -----

func.func @f16(%p: tensor<8xf16>, %we: tensor<8xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{expects f32 parameters and state, got 'tensor<8xf16>'}}
  %a, %b, %c, %d, %e = ds.onebit_adam %p, %p, %p, %p, %we, %we, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 10 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<i64>) -> (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>)
  return
}
