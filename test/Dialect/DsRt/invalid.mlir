// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @view_count() {
  %a = dsrt.alloc : memref<4xf32>
  // expected-error @+1 {{must keep the element type and count}}
  %v = dsrt.view %a : memref<4xf32> -> memref<5xf32>
  return
}

// -----

func.func @const_type() {
  // expected-error @+1 {{value type 'tensor<3xf32>' does not match the buffer 'memref<4xf32>'}}
  %c = dsrt.const dense<1.0> : tensor<3xf32> : memref<4xf32>
  return
}

// -----

func.func @kernel_no_output(%x: memref<4xf32>) {
  %x2 = dsrt.alloc : memref<4xf32>
  // expected-error @+1 {{writes no buffer}}
  "dsrt.kernel"(%x2) <{kernel = "relu", params = {}, operandSegmentSizes = array<i32: 1, 0>}> : (memref<4xf32>) -> ()
  return
}

// -----

func.func @kernel_inplace() {
  %a = dsrt.alloc : memref<4xf32>
  %b = dsrt.alloc : memref<4xf32>
  // expected-error @+1 {{inplace operand 1 is not an input}}
  dsrt.kernel "relu"(%a) -> (%b) {inplace = array<i64: 1>, params = {}} : (memref<4xf32>) -> (memref<4xf32>)
  return
}

// -----

func.func @copy_types() {
  %a = dsrt.alloc : memref<4xf32>
  %b = dsrt.alloc : memref<4xf16>
  // expected-error @+1 {{source and target types differ}}
  dsrt.copy %a, %b : memref<4xf32>, memref<4xf16>
  return
}

// -----

func.func @dynamic() {
  // expected-error @+1 {{statically shaped memref}}
  %a = dsrt.alloc : memref<?xf32>
  return
}
