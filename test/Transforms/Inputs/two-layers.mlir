// Two linear layers and a loss: the ZeRO bucket tests (ds-zero.mlir).
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %v: tensor<3x3xf32> {ds.param = "v", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %h2 = ds.matmul %h, %v : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h2, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
