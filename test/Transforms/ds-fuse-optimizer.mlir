// The per-parameter updates of one kind, attributes and step counter fused
// into one multi-tensor op (issue 24 item 3).
// RUN: ds-opt %s --ds-fuse-optimizer -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fuse-optimizer -split-input-file | ds-opt -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fuse-optimizer=hoist-operands=false -split-input-file | FileCheck %s --check-prefix=NOHOIST
// RUN: ds-opt %s --ds-fuse-optimizer=hoist-limit=32 -split-input-file | FileCheck %s --check-prefix=LIMIT

// Three Adam updates with equal attributes become one ds.multi_adam at the
// first one's place; its results replace theirs in order (new params, then
// exp_avg, then exp_avg_sq).
// CHECK-LABEL: func.func @adam
// CHECK-NEXT: %[[R:.*]]:9 = ds.multi_adam params(%arg0, %arg1, %arg2) grads(%arg3, %arg4, %arg5) exp_avgs(%arg6, %arg7, %arg8) exp_avg_sqs(%arg9, %arg10, %arg11) step(%arg12) {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled = true, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK-NOT: ds.adam
// CHECK: return %[[R]]#0, %[[R]]#3, %[[R]]#6, %[[R]]#1, %[[R]]#4, %[[R]]#7, %[[R]]#2, %[[R]]#5, %[[R]]#8
func.func @adam(%p0: tensor<4x3xf32>, %p1: tensor<3xf32>, %p2: tensor<5xf32>,
                %g0: tensor<4x3xf32>, %g1: tensor<3xf32>, %g2: tensor<5xf32>,
                %m0: tensor<4x3xf32>, %m1: tensor<3xf32>, %m2: tensor<5xf32>,
                %v0: tensor<4x3xf32>, %v1: tensor<3xf32>, %v2: tensor<5xf32>,
                %step: tensor<i64>)
    -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<3xf32>,
        tensor<3xf32>, tensor<3xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) {
  %a0, %b0, %c0 = ds.adam %p0, %g0, %m0, %v0, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.1 : f64} : (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<i64>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
  %a1, %b1, %c1 = ds.adam %p1, %g1, %m1, %v1, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.1 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  %a2, %b2, %c2 = ds.adam %p2, %g2, %m2, %v2, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.1 : f64} : (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<i64>) -> (tensor<5xf32>, tensor<5xf32>, tensor<5xf32>)
  return %a0, %b0, %c0, %a1, %b1, %c1, %a2, %b2, %c2 : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
}

// -----

// Parameter groups (no weight decay on the biases): one op per group, the
// interleaved members included. A Lamb update, one with a gradient
// accumulator and a group of one stay as they are.
// CHECK-LABEL: func.func @groups
// CHECK-NEXT: %[[D:.*]]:6 = ds.multi_adam params(%arg0, %arg2) grads(%arg4, %arg6) exp_avgs(%arg8, %arg10) exp_avg_sqs(%arg8, %arg10) step(%arg15) {{.*}} weight_decay = 1.000000e-01 : f64}
// CHECK-NEXT: %[[N:.*]]:6 = ds.multi_adam params(%arg1, %arg3) grads(%arg5, %arg7) exp_avgs(%arg9, %arg11) exp_avg_sqs(%arg9, %arg11) step(%arg15) {{.*}} weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: ds.adam %arg0, %arg4, %arg12, %arg12, %arg15 {{.*}} lamb = true
// CHECK-NEXT: ds.adam %arg1, %arg5, %arg13, %arg13, %arg15, %arg13 {
// CHECK-NEXT: ds.adam %arg2, %arg6, %arg14, %arg14, %arg15 {{.*}} lr = 5.000000e-01
// CHECK-NOT: ds.multi_adam
// CHECK: return %[[D]]#0, %[[N]]#0, %[[D]]#2, %[[N]]#2
func.func @groups(%w0: tensor<4xf32>, %b0: tensor<4xf32>, %w1: tensor<4xf32>, %b1: tensor<4xf32>,
                  %gw0: tensor<4xf32>, %gb0: tensor<4xf32>, %gw1: tensor<4xf32>, %gb1: tensor<4xf32>,
                  %s0: tensor<4xf32>, %s1: tensor<4xf32>, %s2: tensor<4xf32>, %s3: tensor<4xf32>,
                  %s4: tensor<4xf32>, %s5: tensor<4xf32>, %s6: tensor<4xf32>, %step: tensor<i64>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %p0, %m0, %v0 = ds.adam %w0, %gw0, %s0, %s0, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.1 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %p1, %m1, %v1 = ds.adam %b0, %gb0, %s1, %s1, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %p2, %m2, %v2 = ds.adam %w1, %gw1, %s2, %s2, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.1 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %p3, %m3, %v3 = ds.adam %b1, %gb1, %s3, %s3, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = true, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %l0, %l1, %l2 = ds.adam %w0, %gw0, %s4, %s4, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lamb = true, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %q0, %q1, %q2, %q3 = ds.adam %b0, %gb0, %s5, %s5, %step, %s5 {accum_steps = 2 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r0, %r1, %r2 = ds.adam %w1, %gw1, %s6, %s6, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.5 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %p0, %p1, %m0, %m1, %l0, %q0, %r0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// ZeRO 1-2's form (3 ranks): each update reads the shard of its parameter
// copied just before it (flattened, padded with zeros to a multiple of the
// ranks) and its slice of the gradient bucket's reduce-scatter. The layout
// ops move before the first update, marked ds.update_operand (they stay in
// the optimizer phase), and the updates become one op whose new shards the
// all-gather reads. With hoist-operands=false each update keeps its copy.
// CHECK-LABEL: func.func @zero_shards
// CHECK-NEXT: %[[Z:.*]] = ds.constant
// CHECK-NEXT: %[[RS:.*]] = ds.reduce_scatter %arg2
// CHECK-NEXT: %[[G:.*]]:3 = ds.split %[[RS]]
// CHECK-NEXT: %[[F0:.*]] = ds.reshape %arg0 : tensor<4x3xf32> -> tensor<12xf32>
// CHECK-NEXT: %[[X0:.*]] = ds.shard %[[F0]] {group = 0 : i64} : tensor<12xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[C1:.*]] = ds.concat %arg1, %[[Z]] {axis = 0 : i64, ds.update_operand}
// CHECK-NEXT: %[[X1:.*]] = ds.shard %[[C1]] {ds.update_operand, group = 0 : i64} : tensor<6xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[X2:.*]] = ds.shard %arg3 {ds.update_operand, group = 0 : i64} : tensor<3xf32> -> tensor<1xf32>
// CHECK-NEXT: %[[R:.*]]:9 = ds.multi_adam params(%[[X0]], %[[X1]], %[[X2]]) grads(%[[G]]#0, %[[G]]#1, %[[G]]#2) exp_avgs(%arg4, %arg6, %arg8) exp_avg_sqs(%arg5, %arg7, %arg9) step(%arg10)
// CHECK-NEXT: %[[B:.*]] = ds.concat %[[R]]#0, %[[R]]#1, %[[R]]#2
// CHECK-NEXT: ds.all_gather %[[B]]
// hoist-limit=32: the second update's copies (the padded 24 bytes and its
// 8-byte shard) fit, the third's 4 more bytes do not: it starts a group
// of its own (left as it is), its copy at its place.
// LIMIT-LABEL: func.func @zero_shards
// LIMIT: ds.multi_adam params(%{{.*}}, %{{.*}}) grads
// LIMIT-NEXT: ds.shard %arg3 {group = 0 : i64}
// LIMIT-NEXT: ds.adam
// NOHOIST-LABEL: func.func @zero_shards
// NOHOIST: ds.shard
// NOHOIST-NEXT: ds.adam
// NOHOIST: ds.shard
// NOHOIST-NEXT: ds.adam
// NOHOIST: ds.shard
// NOHOIST-NEXT: ds.adam
// NOHOIST-NOT: ds.multi_adam
// NOHOIST-NOT: ds.update_operand
func.func @zero_shards(%w0: tensor<4x3xf32>, %w1: tensor<5xf32>, %bucket: tensor<21xf32>, %w2: tensor<3xf32>,
                       %m0: tensor<4xf32>, %v0: tensor<4xf32>, %m1: tensor<2xf32>, %v1: tensor<2xf32>,
                       %m2: tensor<1xf32>, %v2: tensor<1xf32>, %step: tensor<i64>) -> tensor<21xf32> {
  %zero = ds.constant dense<0.0> : tensor<1xf32>
  %rs = ds.reduce_scatter %bucket {group = 0 : i64, reduction = "mean"} : tensor<21xf32> -> tensor<7xf32>
  %g:3 = ds.split %rs {axis = 0 : i64} : tensor<7xf32> -> tensor<4xf32>, tensor<2xf32>, tensor<1xf32>
  %f0 = ds.reshape %w0 : tensor<4x3xf32> -> tensor<12xf32>
  %x0 = ds.shard %f0 {group = 0 : i64} : tensor<12xf32> -> tensor<4xf32>
  %p0, %n0, %s0 = ds.adam %x0, %g#0, %m0, %v0, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %c1 = ds.concat %w1, %zero {axis = 0 : i64} : (tensor<5xf32>, tensor<1xf32>) -> tensor<6xf32>
  %x1 = ds.shard %c1 {group = 0 : i64} : tensor<6xf32> -> tensor<2xf32>
  %p1, %n1, %s1 = ds.adam %x1, %g#1, %m1, %v1, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
  %x2 = ds.shard %w2 {group = 0 : i64} : tensor<3xf32> -> tensor<1xf32>
  %p2, %n2, %s2 = ds.adam %x2, %g#2, %m2, %v2, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<i64>) -> (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  %b = ds.concat %p0, %p1, %p2 {axis = 0 : i64} : (tensor<4xf32>, tensor<2xf32>, tensor<1xf32>) -> tensor<7xf32>
  %all = ds.all_gather %b {group = 0 : i64} : tensor<7xf32> -> tensor<21xf32>
  return %all : tensor<21xf32>
}

// -----

// SGD with momentum at ZeRO-2 likewise (one momentum buffer per shard).
// The first update's own copy stays where it was, unmarked.
// CHECK-LABEL: func.func @zero_sgd
// CHECK-NEXT: ds.shard %arg0 {group = 0 : i64}
// CHECK-NEXT: ds.shard %arg1 {ds.update_operand
// CHECK-NEXT: ds.multi_sgd params
// CHECK-NOT: ds.sgd
func.func @zero_sgd(%w0: tensor<8xf32>, %w1: tensor<4xf32>, %g0: tensor<4xf32>, %g1: tensor<2xf32>,
                    %b0: tensor<4xf32>, %b1: tensor<2xf32>, %step: tensor<i64>) -> (tensor<4xf32>, tensor<2xf32>) {
  %x0 = ds.shard %w0 {group = 0 : i64} : tensor<8xf32> -> tensor<4xf32>
  %q0, %c0 = ds.sgd %x0, %g0, %b0, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  %x1 = ds.shard %w1 {group = 0 : i64} : tensor<4xf32> -> tensor<2xf32>
  %q1, %c1 = ds.sgd %x1, %g1, %b1, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>)
  return %q0, %q1 : tensor<4xf32>, tensor<2xf32>
}

// -----

// A layout op reading what an earlier update overwrites in place (here
// the first update's parameter) stays after it: moved before the fused
// op it would be read after the write. Each update keeps its own kernel.
// CHECK-LABEL: func.func @layout_reads_updated
// CHECK-NEXT: ds.adam %arg0
// CHECK-NEXT: ds.shard %arg0
// CHECK-NEXT: ds.adam
// CHECK-NOT: ds.multi_adam
func.func @layout_reads_updated(%w0: tensor<4xf32>, %g: tensor<4xf32>, %g1: tensor<2xf32>,
                                %s: tensor<4xf32>, %t: tensor<2xf32>, %step: tensor<i64>) -> (tensor<4xf32>, tensor<2xf32>) {
  %p0, %m0, %v0 = ds.adam %w0, %g, %s, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %x1 = ds.shard %w0 {group = 0 : i64} : tensor<4xf32> -> tensor<2xf32>
  %p1, %m1, %v1 = ds.adam %x1, %g1, %t, %t, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
  return %p0, %p1 : tensor<4xf32>, tensor<2xf32>
}

// -----

// An operand made by another kind of op between the updates (here the
// gradient's clip) is not moved: the updates stay one per parameter.
// CHECK-LABEL: func.func @operand_made_between
// CHECK: ds.mul
// CHECK-NEXT: ds.adam
// CHECK-NEXT: ds.mul
// CHECK-NEXT: ds.adam
// CHECK-NOT: ds.multi_adam
func.func @operand_made_between(%w0: tensor<4xf32>, %w1: tensor<4xf32>, %g: tensor<4xf32>, %c: tensor<4xf32>,
                                %s: tensor<4xf32>, %step: tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>) {
  %x0 = ds.mul %g, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %p0, %m0, %v0 = ds.adam %w0, %x0, %s, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %x1 = ds.mul %g, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %p1, %m1, %v1 = ds.adam %w1, %x1, %s, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %p0, %p1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A read of a parameter between two updates: moving the second update
// ahead of it would change what it reads, so the second one is left.
// CHECK-LABEL: func.func @read_between
// CHECK-NEXT: ds.adam %arg0
// CHECK-NEXT: ds.neg %arg1
// CHECK-NEXT: ds.adam %arg1
// CHECK-NOT: ds.multi_adam
func.func @read_between(%w0: tensor<4xf32>, %w1: tensor<4xf32>, %g: tensor<4xf32>,
                        %s: tensor<4xf32>, %step: tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %p0, %m0, %v0 = ds.adam %w0, %g, %s, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %n = ds.neg %w1 : tensor<4xf32>
  %p1, %m1, %v1 = ds.adam %w1, %g, %s, %s, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %p0, %p1, %n : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// SGD without momentum reads no buffer (its buffer operand is the
// gradient, its result unused): ds.multi_sgd has none; with momentum, one
// buffer per parameter.
// CHECK-LABEL: func.func @sgd
// CHECK-NEXT: %[[P:.*]]:2 = ds.multi_sgd params(%arg0, %arg1) grads(%arg2, %arg3) momentum_buffers() step(%arg6) {dampening = 0.000000e+00 : f64, lr = 1.000000e-01 : f64, momentum = 0.000000e+00 : f64, nesterov = false, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: %[[Q:.*]]:4 = ds.multi_sgd params(%arg0, %arg1) grads(%arg2, %arg3) momentum_buffers(%arg4, %arg5) step(%arg6) {{.*}} momentum = 9.000000e-01
// CHECK-NEXT: return %[[P]]#0, %[[P]]#1, %[[Q]]#0, %[[Q]]#1, %[[Q]]#2, %[[Q]]#3
func.func @sgd(%w0: tensor<4xf32>, %w1: tensor<2xf32>, %g0: tensor<4xf32>, %g1: tensor<2xf32>,
               %b0: tensor<4xf32>, %b1: tensor<2xf32>, %step: tensor<i64>)
    -> (tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>) {
  %p0, %u0 = ds.sgd %w0, %g0, %g0, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  %p1, %u1 = ds.sgd %w1, %g1, %g1, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>)
  %q0, %c0 = ds.sgd %w0, %g0, %b0, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  %q1, %c1 = ds.sgd %w1, %g1, %b1, %step {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>)
  return %p0, %p1, %q0, %q1, %c0, %c1 : tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>
}
