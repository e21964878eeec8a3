// The verifier rules of ds.zero_one_adam (docs/compression.md).
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @bad_padding(%p: tensor<100xf32>, %we: tensor<100xf32>, %se: tensor<50xf32>, %c: tensor<5xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{worker error of 100 elements and server error of 50 are not the padding of 100 elements over any world size}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = 10 : i64, var_update_scaler = 16 : i64, local_step_scaler = 4 : i64, local_step_clipper = 16 : i64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>, tensor<100xf32>, tensor<5xi64>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>, tensor<100xf32>, tensor<5xi64>)
  return
}

// -----

func.func @negative_freeze(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<5xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'var_freeze_step' failed to satisfy constraint}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = -1 : i64, var_update_scaler = 16 : i64, local_step_scaler = 4 : i64, local_step_clipper = 16 : i64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>)
  return
}

// -----

func.func @zero_scaler(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<5xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'var_update_scaler' failed to satisfy constraint}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = 10 : i64, var_update_scaler = 0 : i64, local_step_scaler = 4 : i64, local_step_clipper = 16 : i64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>)
  return
}

// -----

func.func @zero_clipper(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<5xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'local_step_clipper' failed to satisfy constraint}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = 10 : i64, var_update_scaler = 16 : i64, local_step_scaler = 4 : i64, local_step_clipper = 0 : i64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<5xi64>)
  return
}

// -----

func.func @counters(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<4xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{counters must hold 5 elements, got 'tensor<4xi64>'}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = 10 : i64, var_update_scaler = 16 : i64, local_step_scaler = 4 : i64, local_step_clipper = 16 : i64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<4xi64>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<100xf32>, tensor<4xi64>)
  return
}

// -----

func.func @f16(%p: tensor<8xf16>, %we: tensor<8xf32>, %se: tensor<8xf32>, %c: tensor<5xi64>, %t: tensor<i64>) {
  // expected-error @+1 {{expects f32 parameters and state, got 'tensor<8xf16>'}}
  %r:7 = ds.zero_one_adam %p, %p, %p, %p, %we, %se, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, var_freeze_step = 10 : i64, var_update_scaler = 16 : i64, local_step_scaler = 4 : i64, local_step_clipper = 16 : i64} : (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<5xi64>, tensor<i64>) -> (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf16>, tensor<5xi64>)
  return
}
