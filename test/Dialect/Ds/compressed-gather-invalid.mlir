// The verifier rules of ds.compressed_all_gather and
// ds.onebit_quantized_all_gather.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @not_chunks(%p: tensor<13xf32>, %b: tensor<40xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{result of 40 elements is not whole chunks of the 13-element input}}
  %w, %e = ds.compressed_all_gather %p, %b, %p, %t {freeze_step = 2 : i64, valid = 39 : i64} : (tensor<13xf32>, tensor<40xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<40xf32>, tensor<13xf32>)
  return
}

// -----

func.func @too_valid(%p: tensor<13xf32>, %b: tensor<39xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{valid elements 40 exceed the result's 39}}
  %w, %e = ds.compressed_all_gather %p, %b, %p, %t {freeze_step = 2 : i64, valid = 40 : i64} : (tensor<13xf32>, tensor<39xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<39xf32>, tensor<13xf32>)
  return
}

// -----

func.func @long_error(%p: tensor<13xf32>, %b: tensor<39xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{error and its new value must have the input's type 'tensor<13xf32>'}}
  %w, %e = ds.compressed_all_gather %p, %b, %b, %t {freeze_step = 2 : i64, valid = 39 : i64} : (tensor<13xf32>, tensor<39xf32>, tensor<39xf32>, tensor<i64>) -> (tensor<39xf32>, tensor<39xf32>)
  return
}

// -----

func.func @pieces_sum(%s: tensor<18xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{pieces of 17 elements, an input of 18 and a result of 54 are not one rank's part of a gather}}
  %g = ds.onebit_quantized_all_gather %s, %t {freeze_step = 2 : i64, pieces = array<i64: 12, 5>, valid = array<i64: 36, 15>} : (tensor<18xf32>, tensor<i64>) -> tensor<54xf32>
  return
}

// -----

func.func @valid_count(%s: tensor<18xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{valid count 16 is not within its piece's 15 gathered elements}}
  %g = ds.onebit_quantized_all_gather %s, %t {freeze_step = 2 : i64, pieces = array<i64: 13, 5>, valid = array<i64: 37, 16>} : (tensor<18xf32>, tensor<i64>) -> tensor<54xf32>
  return
}

// -----

func.func @counts(%s: tensor<18xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{expects one valid count per piece, got 2 pieces and 1 counts}}
  %g = ds.onebit_quantized_all_gather %s, %t {freeze_step = 2 : i64, pieces = array<i64: 13, 5>, valid = array<i64: 37>} : (tensor<18xf32>, tensor<i64>) -> tensor<54xf32>
  return
}
