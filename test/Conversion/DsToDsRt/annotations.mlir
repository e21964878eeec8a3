// Every kernel call carries its ds op's cost (ds.flops, ds.bytes: read plus
// written) and the part of the step it belongs to (ds.phase): forward up to
// the last op defining a forward output, backward after it, optimizer from
// the first optimizer step on; collectives communicate, transfers move.
// RUN: ds-opt %s --ds-lower-to-dsrt | FileCheck %s

// CHECK-LABEL: func.func @forward()
// 2*4*3*8 FLOPs; reads 4x8 and 8x3 f32, writes 4x3 f32.
// CHECK: dsrt.kernel "matmul"
// CHECK-SAME: attributes {ds.bytes = 272 : i64, ds.flops = 192 : i64, ds.phase = "forward"}
// CHECK: dsrt.kernel "softmax_cross_entropy_loss"
// CHECK-SAME: attributes {ds.bytes = 84 : i64, ds.flops = 68 : i64, ds.phase = "forward"}
// CHECK: dsrt.kernel "loss_grad"
// CHECK-SAME: attributes {ds.bytes = 132 : i64, ds.flops = 72 : i64, ds.phase = "backward"}
// The transpose folds into the weight gradient's matmul (no kernel).
// CHECK-NOT: "transpose"
// CHECK: dsrt.kernel "matmul"
// CHECK-SAME: {params = {trans_a = true}}
// CHECK-SAME: attributes {ds.bytes = 272 : i64, ds.flops = 192 : i64, ds.phase = "backward"}
// CHECK: dsrt.kernel "all_reduce"
// CHECK-SAME: attributes {ds.bytes = 192 : i64, ds.flops = 24 : i64, ds.phase = "communication"}
// CHECK: dsrt.kernel "transfer"
// CHECK-SAME: attributes {ds.bytes = 192 : i64, ds.flops = 0 : i64, ds.phase = "transfer"}
// 6 FLOPs per element; reads w, g, the buffer (8x3 f32) and the step (i64),
// writes w and the buffer.
// CHECK: dsrt.kernel "sgd"
// CHECK-SAME: attributes {ds.bytes = 488 : i64, ds.flops = 144 : i64, ds.phase = "optimizer"}
// CHECK: dsrt.kernel "transfer"
// CHECK-SAME: ds.phase = "transfer"
// CHECK: dsrt.kernel "neg"
// CHECK-SAME: attributes {ds.bytes = 192 : i64, ds.flops = 24 : i64, ds.phase = "optimizer"}
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"}, %y: tensor<4xi64> {ds.input = "y"},
                   %w: tensor<8x3xf32> {ds.param = "w", ds.trainable},
                   %step: tensor<i64> {ds.step},
                   %buf: tensor<8x3xf32> {ds.state = "w.momentum_buffer"})
    -> (tensor<f32> {ds.output = "loss", ds.loss},
        tensor<8x3xf32> {ds.output = "update:w", ds.update = "w"},
        tensor<8x3xf32> {ds.output = "update:w.momentum_buffer", ds.update = "w.momentum_buffer"},
        tensor<8x3xf32> {ds.output = "negated"}) {
  %h = ds.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  %seed = ds.constant dense<1.0> : tensor<f32>
  %g = ds.loss_grad %seed, %h, %y {reduction = "mean", softmax = true} : (tensor<f32>, tensor<4x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %xt = ds.transpose %x {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %gw = ds.matmul %xt, %g : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %gs = ds.all_reduce %gw {reduction = "mean", group = 0 : i64} : tensor<8x3xf32>
  %gh = ds.transfer %gs {to = "host"} : tensor<8x3xf32>
  %p, %nb = ds.sgd %w, %gh, %buf, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<8x3xf32>, tensor<8x3xf32>, tensor<8x3xf32>, tensor<i64>) -> (tensor<8x3xf32>, tensor<8x3xf32>)
  %pd = ds.transfer %p {to = "device"} : tensor<8x3xf32>
  %n = ds.neg %pd : tensor<8x3xf32>
  return %l, %p, %nb, %n : tensor<f32>, tensor<8x3xf32>, tensor<8x3xf32>, tensor<8x3xf32>
}
