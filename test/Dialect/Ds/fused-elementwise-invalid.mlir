// Every verifier rule of ds.fused_elementwise, one case each.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @result_not_f32(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{expects an f32 result}}
  %0 = ds.fused_elementwise %x {program = array<i64: 8, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

func.func @no_input() -> tensor<4xf32> {
  // expected-error @+1 {{expects at least one input}}
  %0 = ds.fused_elementwise {program = array<i64: 8, -1, 0, 0>, constants = array<f64: 1.0>} : () -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @i64_input(%x: tensor<4xi64>) -> tensor<4xf32> {
  // expected-error @+1 {{expects f32 or i1 inputs, input 0 is 'tensor<4xi64>'}}
  %0 = ds.fused_elementwise %x {program = array<i64: 8, 0, 0, 0>} : (tensor<4xi64>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @no_broadcast(%x: tensor<3xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{input 0 of shape [3] does not broadcast to the result's [2, 4]}}
  %0 = ds.fused_elementwise %x {program = array<i64: 8, 0, 0, 0>} : (tensor<3xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @ragged_program(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has an invalid program: program of 3 integers is not a non-empty list of 4-integer instructions}}
  %0 = ds.fused_elementwise %x {program = array<i64: 8, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unknown_opcode(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: unknown opcode 99}}
  %0 = ds.fused_elementwise %x {program = array<i64: 99, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @undefined_register(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: register 1 is not defined yet}}
  %0 = ds.fused_elementwise %x {program = array<i64: 1, 0, 1, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @constant_out_of_range(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: constant 1 out of range}}
  %0 = ds.fused_elementwise %x {program = array<i64: 1, 0, -2, 0>, constants = array<f64: 1.0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unused_operand(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: unused operand 1 is not 0}}
  %0 = ds.fused_elementwise %x {program = array<i64: 15, 0, 5, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @mask_as_number(%m: tensor<4xi1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: an i1 input is read as a number}}
  %0 = ds.fused_elementwise %m, %x {program = array<i64: 1, 0, 1, 0>} : (tensor<4xi1>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @condition_not_mask(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0: where's condition is not an i1 input}}
  %0 = ds.fused_elementwise %x {program = array<i64: 18, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
